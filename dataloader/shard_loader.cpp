#include "dataloader/shard_loader.h"

#include <algorithm>  // std::copy_n, std::find, std::min
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>     // std::fprintf: a reader let go at the end
#include <cstring>    // std::memcpy
#include <deque>
#include <exception>  // std::exception_ptr
#include <mutex>
#include <new>        // std::bad_alloc
#include <optional>
#include <set>
#include <stdexcept>  // std::logic_error
#include <thread>
#include <utility>    // std::move

#include "dataloader/data_error.h"
#include "dataloader/shard_assignment.h"
#include "dataloader/tar_reader.h"
#include "dataloader/token_packer.h"
#include "dataloader/webdataset.h"

namespace trainbench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kKeptSkipMessages = 20;  // the rest are only counted

// A reader's stream position at one batch boundary, but for its shuffle
// buffer, which travels as the changes made to it (ShuffleChange) rather
// than as a copy: a copy per batch of a 256-sample buffer cost a third of
// the loader's speed on token-only shards.
struct ReaderScalars {
  int64_t epoch = 0;
  int64_t shard_cursor = 0;
  int64_t samples_into_shard = 0;
  uint64_t shuffle_rng = 0;
  PackerState packer;
};

// One change to a shuffle buffer, replayed in the same order on the
// consumer's mirror of it: append `pushed`, or (pushed null) remove the
// sample at `removed` by moving the last one into its place.
struct ShuffleChange {
  SharedTokens pushed;
  size_t removed = 0;
};

// The consumer's view of a reader: its state after the last batch taken.
struct ConsumedState {
  ReaderScalars scalars;
  std::vector<SharedTokens> shuffle_buffer;
};

// One ring entry: a micro-batch's inputs then targets in one host allocation.
struct BatchSlot {
  int32_t* tokens = nullptr;
  HostBatch view;
  ReaderScalars after;                  // the reader's state once this batch was complete
  std::vector<ShuffleChange> changes;   // to its shuffle buffer while filling this batch
  // Samples the consumer's mirror let go of: freed by the reader when it
  // refills the slot, on the thread that allocated them.
  std::vector<SharedTokens> released;
};

// What every reader and the consumer share.
struct SharedState {
  explicit SharedState(const LoaderOptions& o) : options(o) {}
  const LoaderOptions& options;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> storage_bytes{0}, samples{0}, tokens{0}, shards_opened{0}, samples_skipped{0},
      shards_skipped{0}, tokens_stepped_over{0}, samples_stepped_over{0};
  std::mutex mutex;  // guards the non-atomic members below
  std::vector<std::string> skip_messages;
  // Shards (by index in the list) that every tar reader reads as whole but
  // that look damaged: no end-of-archive marker after the last member (a
  // copy cut short at a member boundary), or no sample at all. Each counted
  // once however often it is read; the first one's line is kept.
  std::set<int64_t> cut_short, without_samples;
  std::string first_odd_shard;
  // The shards (by index in the list) read through without a sample with
  // tokens since any reader's last one, and the opens that took. Shared: each
  // epoch deals the readers a partition of the list, so together they meet
  // every shard in about one epoch, where one reader needs ~N*H(N) opens.
  std::vector<bool> tried_since_sample;  // sized by the loader once its options are in
  int64_t opens_since_sample = 0;
  std::atomic<int64_t> distinct_tried_since_sample{0};  // read without the lock on every sample
  // The consumer's first call: until it, a reader holds its first sample
  // (its shuffle buffer filled, a resume's samples stepped over) and builds
  // no batch. Readers filled every prefetch slot while a run set up (GEMM
  // calibration, --ceilings), and a loader-bound run's measured steps took
  // that backlog: no data stall for 15 steps, "compute 94%" at 112% of the
  // storage-read ceiling. As PyTorch's DataLoader starts its workers with
  // the first iteration. Readers wait on their own condition variables.
  std::atomic<bool> consumer_started{false};
  // Since when every reader waits for that call (guarded by the mutex),
  // and how many do: that time is not reading (SourceStats::reading_seconds).
  int64_t readers_waiting = 0;
  std::chrono::steady_clock::time_point all_waiting_since;
};

class Reader {
 public:
  Reader(SharedState& shared, int64_t index, const ReaderPosition* resume)
      : shared_(shared),
        options_(shared.options),
        index_(index),
        format_(token_format_of_field(options_.field)),
        packer_(options_.seq_len, options_.eos_token),
        tar_(options_.block_bytes),
        window_(static_cast<size_t>(options_.seq_len + 1)) {
    if (resume != nullptr) {
      epoch_ = resume->epoch;
      cursor_ = resume->shard_cursor;
      samples_into_shard_ = resume->samples_into_shard;
      rng_ = resume->shuffle_rng;
      for (const std::vector<int32_t>& tokens : resume->shuffle_buffer)
        buffer_.push_back(std::make_shared<const std::vector<int32_t>>(tokens));
      // A buffer holds samples only once its first fill handed one out: a
      // stall after the resume is the storage's, not a filling buffer's.
      if (!buffer_.empty()) filling_ = kFilled;
      PackerState packer;
      packer.partial = resume->partial_window;
      if (!resume->current_rest.empty())
        packer.current = std::make_shared<const std::vector<int32_t>>(resume->current_rest);
      packer.eos_pending = resume->eos_pending;
      packer_.restore(std::move(packer));
    } else {
      // Each (seed, rank, reader) gets its own shuffle stream.
      uint64_t mix = options_.seed;
      mix = splitmix64_next(&mix) ^ static_cast<uint64_t>(options_.rank * 1000003 + index_);
      rng_ = splitmix64_next(&mix);
    }
    assignment_ = assignment_for(epoch_);
  }

  ~Reader() { join(); }

  void allocate_slots(int64_t count, const HostAllocator& allocator) {
    const int64_t n = options_.micro_batch * options_.seq_len;
    slots_.resize(static_cast<size_t>(count));
    for (BatchSlot& slot : slots_) {
      slot.tokens = static_cast<int32_t*>(allocator.allocate(sizeof(int32_t) * 2 * n));
      if (slot.tokens == nullptr) throw std::bad_alloc();
      slot.view = HostBatch{slot.tokens, slot.tokens + n, options_.micro_batch, options_.seq_len};
      free_.push_back(&slot);
    }
  }
  void release_slots(const HostAllocator& allocator) {
    for (BatchSlot& slot : slots_) allocator.release(slot.tokens);
    slots_.clear();
  }

  void start() {
    thread_ = std::thread([this] {
      run();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        exited_ = true;
      }
      changed_.notify_all();
    });
  }
  void detach() {
    if (thread_.joinable()) thread_.detach();
  }
  void join() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
      }  // the stop flag is set; wake a reader waiting for a free slot
      changed_.notify_all();
      thread_.join();
    }
  }
  // join(), unless the thread has not ended by `deadline` (a read on storage
  // that stopped responding): false then, and it is left running.
  bool join_by(Clock::time_point deadline) {
    if (!thread_.joinable()) return true;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.notify_all();  // the stop flag is set; wake a reader waiting for a free slot
      if (!changed_.wait_until(lock, deadline, [&] { return exited_; })) return false;
    }
    thread_.join();
    return true;
  }

  // Consumer side. Waits until a batch is ready, this reader failed, or the
  // deadline passes (nullptr then). Only this reader's failure: batch i is
  // reader i % readers' whatever the others do, so the run fails at the
  // batch the failed reader could not make, at the same step every time
  // (stopping on any reader's failure failed it at whichever reader's queue
  // ran dry first, a step that varied from run to run, or a run whose steps
  // never reached the bad sample because a reader read ahead into it).
  BatchSlot* take_ready(Clock::time_point deadline) {
    // A batch due within microseconds is taken without sleeping: a futex
    // sleep and wake-up per batch costs a busy reader ~10% (bench io).
    constexpr auto kSpin = std::chrono::microseconds(50);
    for (const auto until = Clock::now() + kSpin;
         ready_count_.load(std::memory_order_acquire) == 0 && Clock::now() < until;)
      std::this_thread::yield();
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_until(lock, deadline, [&] { return !ready_.empty() || finished_ || error_ != nullptr; });
    if (ready_.empty()) return nullptr;
    BatchSlot* slot = ready_.front();
    ready_.pop_front();
    ready_count_.fetch_sub(1, std::memory_order_relaxed);
    return slot;
  }
  // Until a batch is ready to take, the reader has finished or failed, or
  // `until` (true: one of those).
  bool wait_ready(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_until(lock, until, [&] { return !ready_.empty() || finished_ || error_ != nullptr; });
  }
  // A batch is ready to take, or the reader's failure (without the lock: a hint).
  bool has_ready() const { return ready_count_.load(std::memory_order_acquire) > 0 || failed_.load(); }
  // What ended the reader's thread, once its batches are taken; or null.
  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  // With options.epochs: the reader has read its epochs and every batch it
  // made has been taken.
  bool finished() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_ && ready_.empty();
  }
  void give_back(BatchSlot* slot) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(slot);
    }
    changed_.notify_all();
  }

  // The consumer's first call came (SharedState::consumer_started).
  void wake() {
    { std::lock_guard<std::mutex> lock(mutex_); }
    changed_.notify_all();
  }

  // Where the reader starts; asked before its thread runs.
  ConsumedState initial_state() const { return ConsumedState{scalars(), buffer_}; }
  // The shard it is on, for a timeout message.
  std::string current_shard() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_path_;
  }
  // For a timeout message: the samples in its shuffle buffer during its
  // first fill, which reads every one before a batch; -1 once it was full.
  int64_t shuffle_buffer_filling() const { return filling_.load(std::memory_order_relaxed); }

 private:
  std::vector<int64_t> assignment_for(int64_t epoch) const {
    return shards_for_reader(static_cast<int64_t>(options_.shards.size()), options_.seed, epoch,
                             options_.rank, options_.world, index_, options_.readers);
  }

  ReaderScalars scalars() const {
    return ReaderScalars{epoch_, cursor_, samples_into_shard_, rng_, packer_.state()};
  }

  void run() {
    try {
      for (;;) {
        BatchSlot* slot = nullptr;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return !free_.empty() || shared_.stop.load(); });
          if (shared_.stop.load()) return;
          slot = free_.front();
          free_.pop_front();
        }
        slot->released.clear();
        journal_ = &slot->changes;
        const bool more = fill(slot);
        slot->after = scalars();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (slot->view.batch > 0) {
            ready_.push_back(slot);
            ready_count_.fetch_add(1, std::memory_order_release);
          } else {
            slot->changes.clear();
            free_.push_back(slot);
          }
          finished_ = !more;
        }
        changed_.notify_all();
        if (!more) return;  // options.epochs are read
      }
    } catch (...) {
      // Thrown by the consumer when it comes to this reader's next batch.
      {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
      }
      failed_ = true;
      changed_.notify_all();
    }
  }

  // Fills the slot's rows; false when the reader has read its
  // options.epochs and has no window left: the slot then holds the rows it
  // could fill (view.batch, maybe 0).
  bool fill(BatchSlot* slot) {
    const int64_t T = options_.seq_len;
    const int64_t n = options_.micro_batch * T;
    slot->view.batch = options_.micro_batch;
    for (int64_t row = 0; row < options_.micro_batch; ++row) {
      while (!packer_.fill_window(window_.data())) {
        if (shared_.stop.load()) return true;
        SharedTokens sample = next_shuffled();
        if (!passed_start_ && !wait_for_the_consumer()) return true;
        if (sample == nullptr) {
          slot->view.batch = row;
          return false;
        }
        packer_.feed(std::move(sample));
      }
      std::copy_n(window_.data(), T, slot->tokens + row * T);
      std::copy_n(window_.data() + 1, T, slot->tokens + n + row * T);
    }
    return true;
  }

  // Holds the reader at its first sample until the consumer's first call
  // (SharedState::consumer_started); false when the loader stops meanwhile.
  bool wait_for_the_consumer() {
    passed_start_ = true;
    if (shared_.consumer_started.load()) return true;
    {
      std::lock_guard<std::mutex> lock(shared_.mutex);
      if (++shared_.readers_waiting == options_.readers) shared_.all_waiting_since = Clock::now();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return shared_.consumer_started.load() || shared_.stop.load(); });
    return !shared_.stop.load();
  }

  // webdataset's shuffle: keep `shuffle_buffer` samples, hand out a random
  // one. nullptr once options.epochs are read and the buffer is empty.
  SharedTokens next_shuffled() {
    const auto capacity = static_cast<size_t>(options_.shuffle_buffer);
    if (capacity <= 1) return read_sample();
    while (buffer_.size() < capacity) {
      // Stopped (an empty sample comes back then): a reader let go after a
      // timeout filled a large buffer with empty samples to its capacity.
      if (shared_.stop.load()) break;
      SharedTokens sample = read_sample();
      if (sample == nullptr) break;  // the epochs are read: the buffer drains
      buffer_.push_back(std::move(sample));
      journal_->push_back(ShuffleChange{buffer_.back(), 0});
      if (filling_.load(std::memory_order_relaxed) != kFilled)
        filling_.store(static_cast<int64_t>(buffer_.size()), std::memory_order_relaxed);
    }
    filling_.store(kFilled, std::memory_order_relaxed);
    if (buffer_.empty()) return nullptr;
    const size_t k = splitmix64_below(&rng_, buffer_.size());
    SharedTokens out = std::move(buffer_[k]);
    buffer_[k] = std::move(buffer_.back());
    buffer_.pop_back();
    journal_->push_back(ShuffleChange{nullptr, k});
    return out;
  }

  // At a shard's end: whether it ended as a whole tar archive ends.
  void note_shard_end() {
    const int64_t data_after_end = tar_.data_after_end_marker();
    const bool cut_short = tar_.ended_without_end_marker() || data_after_end >= 0;
    // No sample, or none with a token: empty token members train on nothing
    // but the EOS separators between them (`shards verify` calls it no data).
    const bool empty = !shard_gave_a_sample_ && !opened_past_samples_;
    if (!cut_short && !empty) return;
    const int64_t shard = assignment_[static_cast<size_t>(cursor_)];
    std::lock_guard<std::mutex> lock(shared_.mutex);
    if (cut_short) shared_.cut_short.insert(shard);
    if (empty) shared_.without_samples.insert(shard);
    if (shared_.first_odd_shard.empty())
      shared_.first_odd_shard =
          printable(tar_.path()) +
          (data_after_end >= 0 ? " holds data after its end-of-archive marker (byte " +
                                     std::to_string(data_after_end) + "), read up to it: " +
                                     std::to_string(samples_into_shard_) + " samples"
           : empty ? (samples_into_shard_ == 0 ? " holds no sample"
                                                : " holds no sample with tokens (" +
                                                      std::to_string(samples_into_shard_) + " without)")
                   : " ends without the end-of-archive marker after " + std::to_string(samples_into_shard_) +
                         " samples");
  }

  void note_skip(bool whole_shard, const std::string& message) {
    (whole_shard ? shared_.shards_skipped : shared_.samples_skipped)++;
    std::lock_guard<std::mutex> lock(shared_.mutex);
    if (shared_.skip_messages.size() < kKeptSkipMessages) shared_.skip_messages.push_back(message);
  }

  // With data.on_corrupt: skip, a bad sample or shard is counted and left
  // out; otherwise (or for a configuration error) it ends the run.
  void handle(const DataError& error) {
    if (!options_.skip_corrupt || error.scope() == CorruptScope::kConfig ||
        error.scope() == CorruptScope::kEnvironment)
      throw error;
    if (error.scope() == CorruptScope::kSample) {
      note_skip(false, error.what());
    } else {
      note_skip(true, error.what());
      close_shard();
      advance_shard();
    }
  }

  void account_storage_bytes() {
    const int64_t now = tar_.storage_bytes();
    shared_.storage_bytes += now - storage_bytes_counted_;
    storage_bytes_counted_ = now;
  }

  void close_shard() {
    account_storage_bytes();
    tar_.close();
    samples_.reset();
    shard_open_ = false;
  }

  void advance_shard() {
    samples_into_shard_ = 0;
    // Every shard skipped, pass after pass: with skip, the loop would spin
    // forever on unreadable data. It ends once this reader has opened every
    // shard of the list without a sample since its last one. Not after a
    // count in a row: each epoch deals a reader a new share of the list, so
    // one empty shard beside good ones can come to it many times running
    // ("twice the list" in a row failed a good data set with one empty shard).
    // A shard opened at a resume position past its first samples may hold
    // samples all the same: it does not count.
    const size_t shard = static_cast<size_t>(assignment_[static_cast<size_t>(cursor_)]);
    int64_t distinct = 0, opens = 0;
    if (!shard_gave_a_sample_ && !opened_past_samples_) {
      std::lock_guard<std::mutex> lock(shared_.mutex);
      opens = ++shared_.opens_since_sample;
      if (!shared_.tried_since_sample[shard]) {
        shared_.tried_since_sample[shard] = true;
        ++shared_.distinct_tried_since_sample;
      }
      distinct = shared_.distinct_tried_since_sample.load();
    }
    shard_gave_a_sample_ = false;
    opened_past_samples_ = false;
    // Where the data ends here anyway (the last shard of a last epoch: bench
    // io's), its consumer says what an epoch without a token means.
    const auto fail_if_none_is_left = [&] {
      if (distinct < static_cast<int64_t>(options_.shards.size())) return;
      throw DataError(CorruptScope::kConfig,
                      "data.shards: the readers of rank " + std::to_string(options_.rank) +
                          " opened every shard of the list of " + std::to_string(options_.shards.size()) + " (" +
                          std::to_string(opens) +
                          " opens since the last sample) and found no readable sample with tokens (the last: " +
                          printable(current_path_) + ")");
    };
    if (++cursor_ < static_cast<int64_t>(assignment_.size())) return fail_if_none_is_left();
    if (options_.epochs > 0 && epoch_ + 1 >= options_.epochs) {
      exhausted_ = true;  // every shard of the last epoch read: no next one
      return;
    }
    fail_if_none_is_left();
    ++epoch_;
    assignment_ = assignment_for(epoch_);
    cursor_ = 0;
  }

  void open_shard() {
    const std::string& path = options_.shards[static_cast<size_t>(assignment_[cursor_])];
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_path_ = path;
    }
    storage_bytes_counted_ = 0;
    tar_.open(path);
    samples_.emplace(tar_, options_.max_member_bytes, options_.field);
    shard_open_ = true;
    opened_past_samples_ = samples_into_shard_ > 0;
    shared_.shards_opened++;
    // Resuming: step over the samples the position says were already taken.
    for (int64_t skipped = 0; skipped < samples_into_shard_; ++skipped) {
      // A shard stepped over to its millionth sample takes minutes: a run
      // stopped meanwhile (a signal, a peer's failure) waited for it.
      if (shared_.stop.load()) return;
      try {
        if (!samples_->next(&sample_))
          // A shard cannot have ended before samples it was read past: the
          // position is damaged or the shard changed since the checkpoint.
          throw DataError(CorruptScope::kConfig,
                          path + ": the saved loader position says " + std::to_string(samples_into_shard_) +
                              " samples of this shard were read, but it has " + std::to_string(skipped) +
                              ": resume needs the data the checkpoint was taken on");
        // Read from storage (their bytes count) but not trained on: their
        // tokens are counted apart, so that bytes per token stays the data's
        // (it read ten times too high after a resume mid-shard).
        shared_.tokens_stepped_over += static_cast<int64_t>(decode_sample()->size());
        shared_.samples_stepped_over++;
      } catch (const DataError& error) {
        if (error.scope() != CorruptScope::kSample) throw;
      }
    }
  }

  // The next sample's tokens; nullptr once options.epochs are read.
  SharedTokens read_sample() {
    for (;;) {
      if (shared_.stop.load()) return std::make_shared<const std::vector<int32_t>>();
      if (exhausted_) return nullptr;
      try {
        if (!shard_open_) open_shard();
      } catch (const DataError& error) {
        handle(error);
        continue;
      }
      bool got = false;
      try {
        got = samples_->next(&sample_);
      } catch (const DataError& error) {
        // The corrupt sample was consumed; a restore steps over it too.
        if (error.scope() == CorruptScope::kSample) ++samples_into_shard_;
        handle(error);
        continue;
      }
      if (!got) {
        note_shard_end();
        close_shard();
        advance_shard();
        continue;
      }
      ++samples_into_shard_;
      // Its token member's header may be the one cut: the next call says
      // the archive is truncated, where "has no .u16 member" came first.
      if (samples_->broken_after() && sample_.find(options_.field) == nullptr) continue;
      SharedTokens tokens;
      try {
        tokens = decode_sample();
      } catch (const DataError& error) {
        handle(error);
        continue;
      }
      shared_.samples++;
      shared_.tokens += static_cast<int64_t>(tokens->size());
      account_storage_bytes();
      if (options_.inject_delay_s > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(options_.inject_delay_s));
      return tokens;
    }
  }

  SharedTokens decode_sample() {
    const std::string& path = tar_.path();
    const SampleMember* member = sample_.find(options_.field);
    if (member == nullptr) {
      std::string present;
      for (size_t i = 0; i < sample_.member_count; ++i)
        present += (i ? ", ." : ".") + printable(sample_.members[i].extension);
      throw DataError(CorruptScope::kSample,
                      at_offset(path, sample_.offset, "sample '" + printable(sample_.key) + "' has no ." +
                                                          options_.field + " member (it has " +
                                                          present + ")"));
    }
    auto tokens = std::make_shared<std::vector<int32_t>>();
    std::string error;
    if (!decode_tokens(format_, member->data.data(), member->data.size(), options_.vocab,
                       tokens.get(), &error))
      throw DataError(CorruptScope::kSample,
                      at_offset(path, sample_.offset,
                                "sample '" + printable(sample_.key) + "' ." + printable(member->extension) + ": " + error));
    // Only a sample with tokens counts: shards of empty token members would
    // otherwise train on nothing but the EOS separators between them.
    if (!tokens->empty()) {
      shard_gave_a_sample_ = true;
      if (shared_.distinct_tried_since_sample.load(std::memory_order_relaxed) > 0) {
        std::lock_guard<std::mutex> lock(shared_.mutex);
        std::fill(shared_.tried_since_sample.begin(), shared_.tried_since_sample.end(), false);
        shared_.distinct_tried_since_sample = 0;
        shared_.opens_since_sample = 0;
      }
    }
    return tokens;
  }

  SharedState& shared_;
  const LoaderOptions& options_;
  const int64_t index_;
  const TokenFormat format_;

  // The stream position (what ReaderScalars and the consumer's mirror record).
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  int64_t samples_into_shard_ = 0;
  uint64_t rng_ = 0;
  std::vector<SharedTokens> buffer_;
  TokenPacker packer_;

  std::vector<int64_t> assignment_;
  bool exhausted_ = false;  // options.epochs read: no sample is read any more
  bool passed_start_ = false;  // its first sample waited for the consumer's first call
  bool shard_gave_a_sample_ = false;  // the shard being read: it is not one of the tried
  bool opened_past_samples_ = false;  // ... nor is one opened at a resume position
  TarReader tar_;
  std::optional<SampleReader> samples_;
  Sample sample_;  // buffers reused from sample to sample
  bool shard_open_ = false;
  bool exited_ = false;  // the thread's run() has returned (mutex_)
  int64_t storage_bytes_counted_ = 0;
  std::vector<int32_t> window_;
  std::vector<ShuffleChange>* journal_ = nullptr;  // the slot being filled records buffer changes

  std::vector<BatchSlot> slots_;
  mutable std::mutex mutex_;  // guards free_, ready_, current_path_, finished_, error_
  std::condition_variable changed_;
  std::deque<BatchSlot*> free_, ready_;
  std::atomic<int64_t> ready_count_{0};  // ready_.size(), readable without the lock
  static constexpr int64_t kFilled = -1;
  std::atomic<int64_t> filling_{0};  // shuffle_buffer_filling(), read from the consumer's thread
  bool finished_ = false;  // options.epochs read and the last batch in ready_ (guarded by mutex_)
  std::exception_ptr error_;        // what ended run() (guarded by mutex_)
  std::atomic<bool> failed_{false};  // error_ is set: has_ready() without the lock
  std::string current_path_;
  std::thread thread_;
};

ReaderPosition to_position(const ConsumedState& state) {
  const ReaderScalars& s = state.scalars;
  ReaderPosition p;
  p.epoch = s.epoch;
  p.shard_cursor = s.shard_cursor;
  p.samples_into_shard = s.samples_into_shard;
  p.shuffle_rng = s.shuffle_rng;
  for (const SharedTokens& tokens : state.shuffle_buffer) p.shuffle_buffer.push_back(*tokens);
  p.partial_window = s.packer.partial;
  if (s.packer.current != nullptr)
    p.current_rest.assign(s.packer.current->begin() + s.packer.offset, s.packer.current->end());
  p.eos_pending = s.packer.eos_pending;
  return p;
}

// Replays a batch's shuffle-buffer changes on the consumer's mirror; what
// the mirror drops goes back with the slot.
void apply_changes(BatchSlot& slot, std::vector<SharedTokens>& mirror) {
  for (ShuffleChange& change : slot.changes) {
    if (change.pushed != nullptr) {
      mirror.push_back(std::move(change.pushed));
    } else {
      slot.released.push_back(std::move(mirror[change.removed]));
      mirror[change.removed] = std::move(mirror.back());
      mirror.pop_back();
    }
  }
  slot.changes.clear();
}

std::string readers_text(const LoaderOptions& o) {
  return std::to_string(o.world) + " rank(s) x " + std::to_string(o.readers) +
         " reader(s) = " + std::to_string(o.world * o.readers) + " readers";
}

void check_options(const LoaderOptions& o) {
  const auto fail = [](const std::string& what) { throw DataError(CorruptScope::kConfig, what); };
  if (o.shards.empty()) fail("data.shards: the shard list is empty");
  if (o.readers < 1) fail("data.readers: must be >= 1");
  if (o.prefetch < 1) fail("data.prefetch: must be >= 1");
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    fail("rank " + std::to_string(o.rank) + " is outside a world of " + std::to_string(o.world));
  if (o.micro_batch < 1 || o.seq_len < 1) fail("micro_batch and seq_len must be >= 1");
  if (o.eos_token < 0 || o.eos_token >= o.vocab)
    fail("data.eos_token: " + std::to_string(o.eos_token) + " is not a token id below model.vocab (" +
         std::to_string(o.vocab) + ")");
  if (o.block_bytes < (1 << 20)) fail("data.block_bytes: must be at least 1 MiB");
  if (o.timeout_s <= 0) fail("data.timeout_s: must be > 0");
  if (o.epochs < 0) fail("epochs: must be >= 0 (0: endless)");
  const auto shard_count = static_cast<int64_t>(o.shards.size());
  if (shard_count < o.world * o.readers)
    fail("data.shards: " + std::to_string(shard_count) + " shard(s) for " + readers_text(o) +
         "; every reader needs at least one shard: lower data.readers or give at least " +
         std::to_string(o.world * o.readers) + " shards (trainbench shards synth --count N)");
  token_format_of_field(o.field);  // throws for an unknown format
}

// The token ids a position carries go to the engine's embedding as they
// are: one at or above vocab would be read out of bounds there.
void check_tokens(const std::vector<int32_t>& tokens, int64_t vocab, const std::string& where) {
  for (const int32_t t : tokens)
    if (t < 0 || t >= vocab)
      throw DataError(CorruptScope::kConfig, "the saved loader position's " + where + " holds token id " +
                                                 std::to_string(t) + ", not below model.vocab (" +
                                                 std::to_string(vocab) + ")");
}

}  // namespace

void check_resume_position(const LoaderOptions& o, int64_t shard_count, const LoaderPosition& p) {
  const bool same_layout = p.rank == o.rank && p.world == o.world && p.readers == o.readers && p.seed == o.seed;
  // The case a user meets (the other keys are the checkpoint's config,
  // compared before): a shard added to or removed from the folder since.
  if (p.shard_count != shard_count && same_layout)
    throw DataError(CorruptScope::kConfig,
                    "the saved loader position was taken over " + std::to_string(p.shard_count) +
                        " shards, and this run reads " + std::to_string(shard_count) +
                        ": the position counts samples into the shards it read, so a resume needs the same files "
                        "(restore them, or start a new run)");
  if (!same_layout || static_cast<int64_t>(p.reader_positions.size()) != o.readers)
    throw DataError(CorruptScope::kConfig,
                    "the saved loader position was taken with " +
                        std::to_string(p.shard_count) + " shards, seed " + std::to_string(p.seed) +
                        ", rank " + std::to_string(p.rank) + " of " + std::to_string(p.world) +
                        ", " + std::to_string(p.readers) + " reader(s); this run has " +
                        std::to_string(shard_count) + " shards, seed " +
                        std::to_string(o.seed) + ", rank " + std::to_string(o.rank) + " of " +
                        std::to_string(o.world) + ", " + std::to_string(o.readers) +
                        " reader(s): resume needs the same data and layout");
  // parse_position checked each reader against the layout (shard cursor,
  // counts); what is left needs this run's shapes.
  const auto fail = [](const std::string& what) {
    throw DataError(CorruptScope::kConfig, "the saved loader position's " + what);
  };
  const auto capacity = static_cast<size_t>(o.shuffle_buffer > 1 ? o.shuffle_buffer : 0);
  for (size_t i = 0; i < p.reader_positions.size(); ++i) {
    const ReaderPosition& r = p.reader_positions[i];
    const std::string reader = "reader " + std::to_string(i);
    if (r.shuffle_buffer.size() > capacity)
      fail(reader + " holds " + std::to_string(r.shuffle_buffer.size()) +
           " samples in its shuffle buffer; data.shuffle_buffer is " + std::to_string(o.shuffle_buffer));
    if (static_cast<int64_t>(r.partial_window.size()) > o.seq_len)
      fail(reader + " has a partial window of " + std::to_string(r.partial_window.size()) +
           " tokens; a window holds " + std::to_string(o.seq_len + 1));
    for (size_t s = 0; s < r.shuffle_buffer.size(); ++s)
      check_tokens(r.shuffle_buffer[s], o.vocab, reader + "'s shuffle buffer sample " + std::to_string(s));
    check_tokens(r.partial_window, o.vocab, reader + "'s partial window");
    check_tokens(r.current_rest, o.vocab, reader + "'s current sample");
  }
}

struct ShardLoader::Impl {
  LoaderOptions options;
  SharedState shared{options};
  std::vector<std::unique_ptr<Reader>> readers;
  std::vector<ConsumedState> consumed;  // per reader: its state after its last batch taken
  int64_t batches_consumed = 0;
  BatchSlot* current = nullptr;  // handed to the trainer, returned on the next call
  bool abandoned = false;        // a reader timed out: let the threads go instead of joining
  int64_t current_reader = 0;
  int64_t next_reader = 0;  // options.epochs > 0: the reader whose turn it is
  bool resumed = false;  // built from a saved position
  std::chrono::steady_clock::time_point started;  // the readers' start: SourceStats::reading_seconds
  double waited_for_consumer_s = 0;  // every reader held for the consumer's first call: not reading

  // The consumer's first call lets the readers build batches.
  void start_consuming() {
    if (shared.consumer_started.load()) return;
    {
      std::lock_guard<std::mutex> lock(shared.mutex);
      if (shared.readers_waiting == options.readers)
        waited_for_consumer_s = std::chrono::duration<double>(Clock::now() - shared.all_waiting_since).count();
      shared.consumer_started = true;
    }
    for (auto& reader : readers) reader->wake();
  }

  ~Impl() {
    shared.stop = true;
    for (auto& reader : readers) reader->join();
    for (auto& reader : readers) reader->release_slots(options.allocator);
  }
};

ShardLoader::ShardLoader(LoaderOptions options, const LoaderPosition* resume_from)
    : impl_(std::make_unique<Impl>()) {
  check_options(options);
  if (resume_from != nullptr)
    check_resume_position(options, static_cast<int64_t>(options.shards.size()), *resume_from);
  if (!options.allocator.allocate) options.allocator = plain_host_allocator();
  impl_->options = std::move(options);
  Impl& impl = *impl_;
  impl.shared.tried_since_sample.assign(impl.options.shards.size(), false);
  for (int64_t r = 0; r < impl.options.readers; ++r) {
    const ReaderPosition* from =
        resume_from != nullptr ? &resume_from->reader_positions[static_cast<size_t>(r)] : nullptr;
    impl.readers.push_back(std::make_unique<Reader>(impl.shared, r, from));
    impl.readers.back()->allocate_slots(impl.options.prefetch, impl.options.allocator);
    impl.consumed.push_back(impl.readers.back()->initial_state());
  }
  if (resume_from != nullptr) {
    impl.batches_consumed = resume_from->batches_consumed;
    impl.resumed = true;
  }
  impl.started = std::chrono::steady_clock::now();
  for (auto& reader : impl.readers) reader->start();
}

ShardLoader::~ShardLoader() {
  // The readers stop at their next look at the flag, but one in a read on
  // storage that stopped responding never looks: the run's end waited for
  // it for ever, its result unwritten (the loader goes before the result is
  // written). Each is given data.timeout_s, as a batch is. After a timeout
  // (abandoned) they are given a moment only, the timeout's time spent
  // already: a reader that was slow, not stuck (a shuffle buffer still
  // filling), ends in it and its state is freed as at any end; it was left
  // allocated with nothing pointing at it (LeakSanitizer's report).
  impl_->shared.stop = true;
  const double wait_s = impl_->abandoned ? 0.2 : impl_->options.timeout_s;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  bool all_ended = true;
  for (size_t r = 0; r < impl_->readers.size(); ++r) {
    if (impl_->readers[r]->join_by(deadline)) continue;
    if (!impl_->abandoned)
      std::fprintf(stderr,
                   "trainbench: warning: data: reader %zu of rank %lld still in a read of %s data.timeout_s = %g s "
                   "after the data was done: let go (its storage stopped responding)\n",
                   r, static_cast<long long>(impl_->options.rank), impl_->readers[r]->current_shard().c_str(),
                   impl_->options.timeout_s);
    all_ended = false;
  }
  if (all_ended) return;  // ~Impl releases the slots
  // A reader may be stuck in a read() on hung storage that no join would
  // see the end of. Its thread is let go and its state is left allocated
  // (it still reads it); the process is on its way out with the timeout's
  // message, and must not hang on the way.
  for (auto& reader : impl_->readers) reader->detach();
  (void)impl_.release();
}

const HostBatch& ShardLoader::next(double* wait_seconds) {
  const HostBatch* batch = next_or_end(wait_seconds);
  if (batch == nullptr)
    throw std::logic_error("ShardLoader::next: the loader's epochs are all read (a bounded loader ends with "
                           "next_or_end)");
  return *batch;
}

void ShardLoader::return_batch() {
  Impl& impl = *impl_;
  if (impl.current == nullptr) return;
  impl.readers[static_cast<size_t>(impl.current_reader)]->give_back(impl.current);
  impl.current = nullptr;
}

bool ShardLoader::wait_until_ready(std::chrono::steady_clock::time_point until) {
  impl_->start_consuming();
  const Impl& impl = *impl_;
  for (;;) {
    if (batch_ready()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= until) return false;
    // The reader whose turn it is; with epochs, one that finished meanwhile
    // is passed over by batch_ready on the next look, a millisecond on.
    const int64_t r = impl.options.epochs == 0 ? impl.batches_consumed % impl.options.readers : impl.next_reader;
    impl.readers[static_cast<size_t>(r)]->wait_ready(std::min(until, now + std::chrono::milliseconds(1)));
  }
}

const HostBatch* ShardLoader::next_or_end(double* wait_seconds) {
  Impl& impl = *impl_;
  impl.start_consuming();
  return_batch();
  const Clock::time_point begin = Clock::now();
  const int64_t readers = impl.options.readers;
  int64_t r = impl.batches_consumed % readers;
  const auto deadline =
      begin + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(impl.options.timeout_s));
  BatchSlot* slot = nullptr;
  if (impl.options.epochs > 0) {
    // Readers take turns; one that has read its epochs is passed over (its
    // share of the shards may be smaller), and when all have, the data ends.
    r = impl.next_reader;
    for (int64_t passed = 0;;) {
      slot = impl.readers[static_cast<size_t>(r)]->take_ready(deadline);
      if (slot != nullptr || !impl.readers[static_cast<size_t>(r)]->finished()) break;
      if (++passed == readers) {
        if (wait_seconds != nullptr)
          *wait_seconds = std::chrono::duration<double>(Clock::now() - begin).count();
        return nullptr;
      }
      r = (r + 1) % readers;
    }
    impl.next_reader = (r + 1) % readers;
  } else {
    slot = impl.readers[static_cast<size_t>(r)]->take_ready(deadline);
  }
  Reader& reader = *impl.readers[static_cast<size_t>(r)];
  if (slot == nullptr) {
    if (const std::exception_ptr error = reader.error()) std::rethrow_exception(error);
    const std::string shard = reader.current_shard();
    impl.abandoned = true;
    char waited[160];
    std::snprintf(waited, sizeof(waited), "data: no batch from reader %lld of rank %lld within data.timeout_s = %g s",
                  static_cast<long long>(r), static_cast<long long>(impl.options.rank), impl.options.timeout_s);
    // A shuffle buffer larger than the storage can fill in the timeout
    // blamed healthy storage ("stalled or far too slow").
    const int64_t capacity = impl.options.shuffle_buffer, buffered = reader.shuffle_buffer_filling();
    // (Nothing read in the timeout is the storage's alone.)
    const std::string filling =
        capacity > 1 && buffered > 0
            ? "; it was filling its shuffle buffer, " + std::to_string(buffered) + " of data.shuffle_buffer = " +
                  std::to_string(capacity) + " samples, which are all read before its first batch: lower "
                  "data.shuffle_buffer or raise data.timeout_s, or else"
            : ":";
    throw LoaderTimeout(waited + (shard.empty() ? "" : " (reading " + shard + ")") + filling +
                        " storage is stalled or far too slow");
  }
  if (wait_seconds != nullptr)
    *wait_seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  // The slot takes the previous state in exchange, so a sample only it still
  // holds is freed by the reader when it refills the slot: frees stay on the
  // thread that allocated, clear of malloc's cross-thread arena locking.
  ConsumedState& consumed = impl.consumed[static_cast<size_t>(r)];
  apply_changes(*slot, consumed.shuffle_buffer);
  std::swap(consumed.scalars, slot->after);
  impl.current = slot;
  impl.current_reader = r;
  ++impl.batches_consumed;
  return &slot->view;
}

SourceStats ShardLoader::stats() const {
  const SharedState& s = impl_->shared;
  SourceStats out;
  out.storage_bytes = s.storage_bytes;
  out.samples = s.samples;
  out.tokens = s.tokens;
  out.shards_opened = s.shards_opened;
  out.samples_skipped = s.samples_skipped;
  out.shards_skipped = s.shards_skipped;
  out.tokens_stepped_over = s.tokens_stepped_over;
  out.samples_stepped_over = s.samples_stepped_over;
  out.reading_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - impl_->started).count() -
                        impl_->waited_for_consumer_s;
  std::lock_guard<std::mutex> lock(impl_->shared.mutex);
  out.skip_messages = impl_->shared.skip_messages;
  out.shards_cut_short.assign(impl_->shared.cut_short.begin(), impl_->shared.cut_short.end());
  out.shards_without_samples.assign(impl_->shared.without_samples.begin(), impl_->shared.without_samples.end());
  out.first_odd_shard = impl_->shared.first_odd_shard;
  return out;
}

bool ShardLoader::resumed() const { return impl_->resumed; }

bool ShardLoader::batch_ready() const {
  const Impl& impl = *impl_;
  // A reader's failure counts as ready: next_or_end throws it at once.
  const int64_t readers = impl.options.readers;
  if (impl.options.epochs == 0) return impl.readers[static_cast<size_t>(impl.batches_consumed % readers)]->has_ready();
  // As next_or_end takes turns: a reader that has read its epochs is passed
  // over, and when every one has, the end is returned at once.
  for (int64_t passed = 0; passed < readers; ++passed) {
    const Reader& reader = *impl.readers[static_cast<size_t>((impl.next_reader + passed) % readers)];
    if (reader.has_ready()) return true;
    if (!reader.finished()) return false;
  }
  return true;
}

LoaderPosition ShardLoader::position() const {
  const Impl& impl = *impl_;
  LoaderPosition position;
  position.shard_count = static_cast<int64_t>(impl.options.shards.size());
  position.rank = impl.options.rank;
  position.world = impl.options.world;
  position.readers = impl.options.readers;
  position.seed = impl.options.seed;
  position.batches_consumed = impl.batches_consumed;
  for (const ConsumedState& state : impl.consumed)
    position.reader_positions.push_back(to_position(state));
  return position;
}

}  // namespace trainbench
