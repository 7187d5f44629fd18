// STORAGE READ. The webdataset shard loader: N reader threads per rank read
// whole samples from their shards (shard_assignment.h), shuffle them in a
// bounded buffer, pack their tokens into windows (token_packer.h) and fill
// micro-batches in a ring of host buffers; the trainer takes ready batches.
//
// Determinism: batch i of a rank comes from reader i % readers, and each
// reader's stream depends only on (seed, epoch, rank, world, reader,
// readers) — as a PyTorch DataLoader with workers over a webdataset — so a
// run is reproducible for a given seed, rank count and reader count, however
// the threads are scheduled.
#pragma once

#include <chrono>   // wait_until_ready's deadline
#include <cstdint>  // int64_t, uint64_t
#include <memory>   // std::unique_ptr
#include <string>
#include <vector>

#include "dataloader/batch_source.h"  // BatchSource, HostAllocator, SourceStats
#include "dataloader/token_decode.h"  // TokenFormat

namespace trainbench {

struct LoaderOptions {
  std::vector<std::string> shards;  // resolved paths (resolve_shard_list)
  int64_t micro_batch = 1;
  int64_t seq_len = 1;
  int64_t vocab = 1;
  std::string field = "u16";        // the token member's extension
  int32_t eos_token = 0;            // separator after every sample
  int64_t readers = 2;              // reader threads on this rank
  int64_t prefetch = 4;             // ready batches each reader may hold
  int64_t shuffle_buffer = 256;     // samples; 0 or 1 = read order
  uint64_t seed = 1;
  int64_t rank = 0;
  int64_t world = 1;
  int64_t max_member_bytes = 256LL << 20;
  int64_t block_bytes = 4LL << 20;  // libarchive read block
  bool skip_corrupt = false;        // data.on_corrupt: skip
  double timeout_s = 300;           // longest wait for one batch, and for the readers to end with the loader
  double inject_delay_s = 0;        // fault injection: sleep per sample read (slow storage)
  // 0: the readers cross epochs for ever (training). N > 0 (bench io): each
  // reader stops after its shards of epochs 0..N-1, packs what its shuffle
  // buffer holds and hands out a last, possibly short, batch; next_or_end()
  // then says when every reader is done.
  int64_t epochs = 0;
  HostAllocator allocator;          // empty = plain_host_allocator()
};

// Where one reader stands after the batches the trainer has consumed.
struct ReaderPosition {
  int64_t epoch = 0;
  int64_t shard_cursor = 0;        // index into this reader's shards of `epoch`
  int64_t samples_into_shard = 0;  // samples already taken from that shard
  uint64_t shuffle_rng = 0;        // splitmix64 state
  std::vector<std::vector<int32_t>> shuffle_buffer;  // samples waiting in it
  std::vector<int32_t> partial_window;  // packer: window being filled
  std::vector<int32_t> current_rest;    // packer: tokens of the current sample still to place
  bool eos_pending = false;             // packer: that sample's separator still to place
};

// The loader's exact position: restoring it continues the batch stream as
// if the run had never stopped. Valid only for the same shard list, seed,
// rank, world and readers, which it records and restore checks.
struct LoaderPosition {
  int64_t shard_count = 0, rank = 0, world = 1, readers = 1;
  uint64_t seed = 0;
  int64_t batches_consumed = 0;
  std::vector<ReaderPosition> reader_positions;
};

std::string serialize_position(const LoaderPosition& position);
// Throws DataError(kConfig) when the bytes are not a position this version
// wrote: a bad tag or length, a layout that cannot be (rank outside world,
// fewer shards than readers), or a reader field outside it (negative epoch
// or count, a shard cursor past the reader's shards).
LoaderPosition parse_position(const std::string& bytes);
// Throws DataError(kConfig) unless `position` fits a loader built with
// `options` over `shard_count` shards (options.shards is not read): the same
// shard count, seed, rank, world and readers, shuffle buffers within
// data.shuffle_buffer, partial windows shorter than a window, token ids
// below vocab. The ShardLoader checks it before it resumes; a resume may
// call it earlier, before the shards are listed, to name the checkpoint in
// the message.
void check_resume_position(const LoaderOptions& options, int64_t shard_count, const LoaderPosition& position);

// Raised when no batch arrives within timeout_s: the CLI exits 3 with it.
class LoaderTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShardLoader final : public BatchSource {
 public:
  // Checks the options (DataError(kConfig): fewer shards than ranks x
  // readers, unknown field, ...), then starts the reader threads. With
  // `resume_from`, the readers continue from that position.
  explicit ShardLoader(LoaderOptions options, const LoaderPosition* resume_from = nullptr);
  ~ShardLoader() override;
  ShardLoader(const ShardLoader&) = delete;
  ShardLoader& operator=(const ShardLoader&) = delete;

  // Throws DataError when a reader met bad data (data.on_corrupt: fail), or
  // LoaderTimeout.
  const HostBatch& next(double* wait_seconds) override;
  // As next(), but with options.epochs > 0 it returns nullptr once every
  // reader has finished its epochs and every batch has been taken (a reader
  // that is done is passed over; its last batch may hold fewer rows:
  // HostBatch::batch). A last partial window (< seq_len + 1 tokens) is not
  // handed out, but its samples were read and counted in stats(). With
  // epochs == 0 it never returns nullptr.
  const HostBatch* next_or_end(double* wait_seconds);
  SourceStats stats() const override;
  // The position after the last batch next() returned.
  LoaderPosition position() const;
  std::string save_position() const override { return serialize_position(position()); }
  bool resumed() const override;
  // The reader whose batch comes next has one ready (a hint: it may become
  // ready right after; with epochs, a finished reader passed over is not
  // looked past).
  bool batch_ready() const override;
  // Waits until batch_ready() or `until`, whichever is first (true: ready).
  // For a consumer on its own clock (bench io's --seconds): next_or_end
  // waits up to data.timeout_s and then gives the loader up.
  bool wait_until_ready(std::chrono::steady_clock::time_point until);
  // Gives the batch next_or_end handed out back to its reader now, as the
  // next call would: a consumer that waits before taking the next holds
  // none of the reader's prefetch slots meanwhile (bench io's polling held
  // one: with data.prefetch 1 the reader stood still, and its rate was the
  // bench's polling's).
  void return_batch();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbench
