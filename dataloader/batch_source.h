// STORAGE READ. Where the trainer's token batches come from: the webdataset
// shard loader (shard_loader.h) or seeded tokens held in memory (a pure
// compute workload, for comparisons that must exclude storage).
#pragma once

#include <cstddef>  // size_t
#include <cstdint>  // int32_t, int64_t
#include <functional>
#include <memory>   // std::unique_ptr
#include <string>
#include <vector>

namespace trainbench {

// One micro-batch in host memory: inputs and targets, each [batch, seq_len],
// owned by the source.
struct HostBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
  int64_t batch = 0;
  int64_t seq_len = 0;
};

// How a source gets the host memory its batches live in. The trainer hands
// in the compute backend's allocator (page-locked memory under CUDA, so the
// device copy needs no bounce buffer); the default is plain aligned memory.
struct HostAllocator {
  std::function<void*(size_t bytes)> allocate;  // nullptr on failure
  std::function<void(void* memory)> release;
};
HostAllocator plain_host_allocator();

// What a source read, for the results. Counters since construction.
struct SourceStats {
  int64_t storage_bytes = 0;    // bytes read from storage (compressed size for compressed shards)
  int64_t samples = 0;          // samples decoded
  int64_t tokens = 0;           // token ids decoded (separators not counted)
  int64_t shards_opened = 0;
  int64_t samples_skipped = 0;  // data.on_corrupt=skip: corrupt samples left out
  int64_t shards_skipped = 0;   //   and shards abandoned part-way
  // Tokens of the samples a resume read to step over, back to its saved
  // position, and those samples: their bytes are in storage_bytes, they
  // are not in `tokens` nor `samples`.
  int64_t tokens_stepped_over = 0;
  int64_t samples_stepped_over = 0;
  // Since the readers started (before step 1: they fill every shuffle
  // buffer and prefetch slot while the run sets up) until this call: the
  // time the counts above were read in, a rate's denominator.
  double reading_seconds = 0;
  std::vector<std::string> skip_messages;  // the first few, one line each
  // Shards read to their end that tar reads as whole but that look damaged:
  // no end-of-archive marker (cut short at a member boundary, as an
  // interrupted copy leaves them), or not one sample. By index in the shard
  // list (every rank's is the same), ascending, each once. Their samples
  // are read as they are; `shards verify` names each.
  std::vector<int64_t> shards_cut_short;
  std::vector<int64_t> shards_without_samples;
  std::string first_odd_shard;  // the first of either, one line with its path
};

// "N shard(s) end without the tar end-of-archive marker (...) and M shard(s)
// hold no sample", leaving out a count of 0: what `run` and `bench io` warn of.
std::string odd_shards_text(int64_t cut_short, int64_t without_samples);

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next micro-batch. The batch stays valid until the next call.
  // `wait_seconds` receives how long the caller waited for it (data stall).
  virtual const HostBatch& next(double* wait_seconds) = 0;
  virtual SourceStats stats() const = 0;
  // Where the stream stands after the last batch next() returned, as bytes
  // a source built with the same options resumes from (a checkpoint keeps
  // them; make_synthetic_source and ShardLoader take them back).
  virtual std::string save_position() const = 0;
  // True when the source was built from such a position: the run resumes
  // from a checkpoint (and may write its checkpoints next to it).
  virtual bool resumed() const { return false; }
  // Whether next() would return without waiting (the ring holds the next
  // batch). A source that never waits says true. The train loop asks it to
  // time a data stall as the time the device really waited.
  virtual bool batch_ready() const { return true; }
};

// `distinct_batches` batches of uniform random tokens in [0, vocab), built up
// front from `seed` and returned in a cycle. Each sequence is a window of
// seq_len + 1 tokens: inputs are the first seq_len, targets the last seq_len.
// `resume_position` (save_position() of a source with the same options)
// continues its cycle; empty starts at the first batch. Throws
// std::invalid_argument when it is not such a position.
// The batch a synthetic source of `distinct_batches` batches resumes at, from
// its save_position() bytes. Throws std::invalid_argument (naming the bytes,
// escaped, on one line) when they are not such a position.
int64_t synthetic_position_index(const std::string& position, int64_t distinct_batches);

std::unique_ptr<BatchSource> make_synthetic_source(int64_t batch, int64_t seq_len, int64_t vocab,
                                                   int64_t distinct_batches, uint64_t seed,
                                                   const std::string& resume_position = "");

}  // namespace trainbench
