// STORAGE READ. Where the trainer's token batches come from. The synthetic
// source (seeded random tokens held in memory) is here; the webdataset tar
// shard reader comes with the data-loader issue behind the same interface.
#pragma once

#include <cstdint>  // int32_t, int64_t
#include <memory>   // std::unique_ptr
#include <vector>

namespace trainbench {

// One micro-batch in host memory: inputs and targets, each [batch, seq_len].
struct HostBatch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  int64_t batch = 0;
  int64_t seq_len = 0;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next micro-batch. The reference stays valid until the next call.
  // `wait_seconds` receives how long the caller waited for it (data stall).
  virtual const HostBatch& next(double* wait_seconds) = 0;
  // Bytes read from storage so far (0 for an in-memory source).
  virtual int64_t bytes_read() const = 0;
};

// `distinct_batches` batches of uniform random tokens in [0, vocab), built up
// front from `seed` and returned in a cycle. Each sequence is a window of
// seq_len + 1 tokens: inputs are the first seq_len, targets the last seq_len.
std::unique_ptr<BatchSource> make_synthetic_source(int64_t batch, int64_t seq_len, int64_t vocab,
                                                   int64_t distinct_batches, uint64_t seed);

}  // namespace trainbench
