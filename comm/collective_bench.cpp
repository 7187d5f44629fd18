// One small harness (fill, check, time, reduce over ranks) and each
// collective a few lines plugged into it, as in nccl-tests.
#include "comm/collective_bench.h"  // and bench_buffer.h: where the buffers live

#include <algorithm>   // std::nth_element, std::max_element, std::fill
#include <atomic>      // the watchdog's progress count
#include <chrono>
#include <cmath>       // std::floor
#include <condition_variable>
#include <cstdlib>     // std::getenv: the stall test hook
#include <functional>  // a path's timed operation
#include <limits>      // MPI's int counts
#include <mutex>
#include <numeric>     // std::accumulate: the mean over ranks
#include <optional>
#include <stdexcept>   // std::invalid_argument: time_across_ranks of no rank
#include <string>
#include <thread>      // the watchdog

#if TRAINBENCH_HAVE_MPI
#include <mpi.h>  // the raw path: plain blocking MPI calls beside the communicator's
#endif

namespace trainbench {

namespace {

// 0 to 7, from a hash of the element's index (splitmix64's finaliser): the
// same for every rank, so the sum over ranks stays one product, but without
// a period a block size can share. With (rank + i) % 7 alone, every rank's
// block of a reduce-scatter whose block was a multiple of 7 floats expected
// the same values, and a block delivered to the wrong rank passed the check.
int64_t index_term(int64_t i) {
  uint64_t z = static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<int64_t>(z >> 61);
}

}  // namespace

float bench_contribution(int rank, int64_t i) {
  return static_cast<float>(1 + (rank + i) % 7 + 7 * index_term(i));
}

float bench_sum_of_contributions(int world, int64_t i) {
  // The index's term from every rank; then whole cycles of 1..7 over the
  // ranks, and the ranks left over.
  int64_t sum = static_cast<int64_t>(world) * 7 * index_term(i) + static_cast<int64_t>(world / 7) * 28;
  for (int r = world / 7 * 7; r < world; ++r) sum += 1 + (r + i) % 7;
  return static_cast<float>(sum);
}

namespace {

using Clock = std::chrono::steady_clock;

// Where the communicator takes them (bench_buffer.h): host memory, or the
// GPU for NCCL, each with a host view that is filled and checked.
struct Buffers {
  std::unique_ptr<BenchBuffer> send;  // an all-reduce works in place here
  std::unique_ptr<BenchBuffer> recv;
};

struct Path {
  const char* name;
  std::function<void(Buffers&)> run;
  bool blocking = false;  // plain blocking MPI calls, with no timeout of their own
};

// Ends the job (comm.abort, exit 3) when one blocking call of a path has not
// returned for timeout_s: a rank that died or stalled inside MPI_Allreduce
// hung the raw path for ever, where the communicator's own calls time out.
// Only time inside a call counts: the host's fill and check of a large
// buffer between calls took seconds, and with comm.timeout_s 1 ended a
// healthy job. Each call pays two relaxed atomic stores; the thread looks
// every 100 ms.
class StallWatchdog {
 public:
  StallWatchdog(Communicator& comm, double timeout_s, std::string what)
      : comm_(comm), timeout_s_(timeout_s), what_(std::move(what)), thread_([this] { watch(); }) {}
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;
  ~StallWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  // Around each blocking call (the measuring thread's alone): which call is
  // under way, numbered from 1, or none (0).
  void entered() { in_call_.store(++calls_, std::memory_order_relaxed); }
  void left() { in_call_.store(0, std::memory_order_relaxed); }

 private:
  void watch() {
    int64_t seen = 0;
    Clock::time_point since = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
      const int64_t call = in_call_.load(std::memory_order_relaxed);
      if (call == 0 || call != seen) {  // between calls, or another call than last seen
        seen = call;
        since = Clock::now();
      } else if (std::chrono::duration<double>(Clock::now() - since).count() >= timeout_s_) {
        comm_.abort(3, "comm: " + what_ + " made no progress for " + std::to_string(static_cast<int64_t>(timeout_s_)) +
                           " s (comm.timeout_s) on rank " + std::to_string(comm_.rank()) +
                           ": a rank died or stalled");
      }
    }
  }

  Communicator& comm_;
  const double timeout_s_;
  const std::string what_;
  int64_t calls_ = 0;  // the measuring thread's
  std::atomic<int64_t> in_call_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is built
};

// Test hook: the rank named by TRAINBENCH_TEST_STALL_RAW_RANK stops before
// its first blocking call, as a rank stuck in the network would.
void stall_if_asked(Communicator& comm) {
  const char* rank = std::getenv("TRAINBENCH_TEST_STALL_RAW_RANK");
  if (rank != nullptr && std::to_string(comm.rank()) == rank) std::this_thread::sleep_for(std::chrono::hours(1));
}

// One collective at one size: how to fill its input, which paths run it,
// and what every rank must hold afterwards.
struct Collective {
  CollectiveBenchResult shape;  // collective, bytes, count, buckets
  int64_t send_count = 0;
  int64_t recv_count = 0;
  std::function<void(std::vector<float>& send)> fill;  // the host view
  std::vector<Path> paths;
  // The host views, after the collective.
  std::function<bool(const std::vector<float>& send, const std::vector<float>& recv)> check;
};

// `count` floats per rank; `ranks` blocks of them in the whole buffer
// (reduce-scatter, all-gather), 1 for an all-reduce.
CollectiveBenchResult shape(const char* collective, int64_t count, int64_t ranks = 1, int64_t buckets = 1) {
  CollectiveBenchResult result;
  result.collective = collective;
  result.bytes = count * ranks * static_cast<int64_t>(sizeof(float));
  result.count = count;
  result.buckets = buckets;
  return result;
}

// Runs one path once on the pattern and checks the result (filled and
// checked on the host, copied to and from the buffers where they are
// elsewhere), then times the warm-up and timed iterations on zeroed
// buffers (an in-place sum repeated on the pattern would grow without bound). Ranks start the timed loop together;
// the result is every rank's median and the one options.across_ranks picks
// (the slowest rank's by default), and the check holds only when it held on
// every rank.
CollectiveBenchResult measure(Communicator& comm, const CollectiveBenchOptions& options,
                              const MakeBenchBuffer& make_buffer, const Collective& collective, const Path& path) {
  const auto make = [&](int64_t count) {
    return make_buffer ? make_buffer(count) : make_bench_buffer(comm, count);
  };
  Buffers buffers{make(collective.send_count), make(collective.recv_count)};
  std::optional<StallWatchdog> watchdog;
  const auto run_path = [&] {
    if (watchdog) watchdog->entered();
    path.run(buffers);
    if (watchdog) watchdog->left();
  };
  // One call on the pattern, its result checked, the buffers zeroed again:
  // before the timed loop, and after it, as nccl-tests -c checks, so that a
  // fault that shows only under back-to-back load is seen.
  const auto run_checked = [&] {
    collective.fill(buffers.send->host());
    buffers.send->to_collective();
    buffers.recv->zero();
    run_path();
    buffers.send->to_host();
    buffers.recv->to_host();
    const bool ok = collective.check(buffers.send->host(), buffers.recv->host());
    buffers.send->zero();
    buffers.recv->zero();
    return ok;
  };
  if (path.blocking) {
    if (!(options.timeout_s > 0))
      throw std::invalid_argument("bench: the raw path needs CollectiveBenchOptions::timeout_s (comm.timeout_s)");
    watchdog.emplace(comm, options.timeout_s,
                     std::string("raw ") + collective.shape.collective + " of " +
                         std::to_string(collective.shape.bytes) + " bytes");
    stall_if_asked(comm);
  }
  bool check_ok = run_checked();

  comm.barrier();
  std::vector<double> times;
  for (int64_t i = 0; i < options.warmup_iters + options.iters; ++i) {
    const Clock::time_point start = Clock::now();
    run_path();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= options.warmup_iters) times.push_back(seconds);
  }
  check_ok = run_checked() && check_ok;

  // The bucketed path's background all-reduces added their seconds to the
  // communicator's comm_s, which the next training step would have taken as
  // its own (the network ceiling before step 1; burn-in's fabric check
  // between steps): the harness takes them away.
  comm.take_comm_seconds();

  const int world = comm.world_size();
  std::vector<double> per_rank(static_cast<size_t>(world));
  comm.all_gather(median_of_iterations(times), per_rank.data());
  CollectiveBenchResult result = collective.shape;
  result.path = path.name;
  result.rank_time_s = per_rank;
  result.time_s = time_across_ranks(per_rank, options.across_ranks);
  comm.all_gather(check_ok ? 1.0 : 0.0, per_rank.data());
  result.check_ok = *std::min_element(per_rank.begin(), per_rank.end()) == 1.0;
  result.algbw_gbs = result.time_s > 0 ? static_cast<double>(result.bytes) / result.time_s / 1e9 : 0.0;
  result.busbw_gbs = result.algbw_gbs * bus_bandwidth_factor(result.collective, world);
  return result;
}

#if TRAINBENCH_HAVE_MPI
// The raw path needs MPI initialised, which only the MPI communicator does.
bool has_raw_path(const Communicator& comm) { return std::string(comm.backend_name()) == "mpi"; }

// The raw path runs on MPI_COMM_WORLD, which the MPI communicator set to
// return errors; a failure ends the job through the communicator.
void check_raw(Communicator& comm, int result, const char* call) {
  if (result == MPI_SUCCESS) return;
  char reason[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(result, reason, &length) != MPI_SUCCESS) length = 0;
  comm.abort(3, std::string("comm: ") + call + " failed: " +
                    (length > 0 ? std::string(reason, static_cast<size_t>(length)) : "unknown MPI error"));
}

int raw_count(Communicator& comm, int64_t count) {
  if (count > std::numeric_limits<int>::max())
    comm.abort(3, "comm: raw MPI call of " + std::to_string(count) + " floats: MPI counts are int");
  return static_cast<int>(count);
}
#endif

Collective all_reduce(Communicator& comm, int64_t size_bytes) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  const int64_t count = std::max<int64_t>(1, size_bytes / 4);
  Collective c;
  c.shape = shape("all_reduce", count);
  c.send_count = count;
  c.fill = [=](std::vector<float>& send) { for (int64_t i = 0; i < count; ++i) send[i] = bench_contribution(rank, i); };
  c.check = [=](const std::vector<float>& send, const std::vector<float>& /*recv*/) {
    for (int64_t i = 0; i < count; ++i)
      if (send[i] != bench_sum_of_contributions(world, i)) return false;
    return true;
  };
  c.paths.push_back({"bucketed", [&comm, count](Buffers& b) {
                       comm.wait(comm.start_all_reduce_sum(b.send->data(), count));
                     }});
#if TRAINBENCH_HAVE_MPI
  if (has_raw_path(comm))
    c.paths.push_back({"raw", [&comm, count](Buffers& b) {
                         check_raw(comm, MPI_Allreduce(MPI_IN_PLACE, b.send->data(), raw_count(comm, count),
                                                       MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                                   "MPI_Allreduce");
                       }, true});
#endif
  return c;
}

Collective reduce_scatter(Communicator& comm, int64_t size_bytes) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  const int64_t block = std::max<int64_t>(1, size_bytes / 4 / world);
  Collective c;
  c.shape = shape("reduce_scatter", block, world);
  c.send_count = block * world;
  c.recv_count = block;
  c.fill = [=](std::vector<float>& send) {
    for (int64_t i = 0; i < block * world; ++i) send[i] = bench_contribution(rank, i);
  };
  c.check = [=](const std::vector<float>& /*send*/, const std::vector<float>& recv) {
    for (int64_t i = 0; i < block; ++i)
      if (recv[i] != bench_sum_of_contributions(world, rank * block + i)) return false;
    return true;
  };
  c.paths.push_back({"comm", [&comm, block](Buffers& b) {
                       comm.reduce_scatter_sum(b.send->data(), b.recv->data(), block);
                     }});
#if TRAINBENCH_HAVE_MPI
  if (has_raw_path(comm))
    c.paths.push_back({"raw", [&comm, block](Buffers& b) {
                         check_raw(comm, MPI_Reduce_scatter_block(b.send->data(), b.recv->data(),
                                                                  raw_count(comm, block), MPI_FLOAT,
                                                                  MPI_SUM, MPI_COMM_WORLD),
                                   "MPI_Reduce_scatter_block");
                       }, true});
#endif
  return c;
}

Collective all_gather(Communicator& comm, int64_t size_bytes) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  const int64_t block = std::max<int64_t>(1, size_bytes / 4 / world);
  Collective c;
  c.shape = shape("all_gather", block, world);
  c.send_count = block;
  c.recv_count = block * world;
  // Each rank's block is what it sends at its place in the gathered array:
  // blocks of ranks 7 apart differ too.
  c.fill = [=](std::vector<float>& send) {
    for (int64_t i = 0; i < block; ++i) send[i] = bench_contribution(rank, rank * block + i);
  };
  c.check = [=](const std::vector<float>& /*send*/, const std::vector<float>& recv) {
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < block; ++i)
        if (recv[r * block + i] != bench_contribution(r, r * block + i)) return false;
    return true;
  };
  c.paths.push_back({"comm", [&comm, block](Buffers& b) {
                       comm.all_gather_floats(b.send->data(), b.recv->data(), block);
                     }});
#if TRAINBENCH_HAVE_MPI
  if (has_raw_path(comm))
    c.paths.push_back({"raw", [&comm, block](Buffers& b) {
                         const int count = raw_count(comm, block);
                         check_raw(comm, MPI_Allgather(b.send->data(), count, MPI_FLOAT, b.recv->data(),
                                                       count, MPI_FLOAT, MPI_COMM_WORLD),
                                   "MPI_Allgather");
                       }, true});
#endif
  return c;
}

// `collective` on each of its paths the options ask for, appended to `results`.
void measure_paths(Communicator& comm, const CollectiveBenchOptions& options, const MakeBenchBuffer& make_buffer,
                   const Collective& collective, std::vector<CollectiveBenchResult>& results) {
  for (const Path& path : collective.paths)
    if (options.raw_path || !path.blocking) results.push_back(measure(comm, options, make_buffer, collective, path));
}

}  // namespace

double median_of_iterations(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  if (values.size() % 2 == 1) return *middle;
  return 0.5 * (*middle + *std::max_element(values.begin(), middle));
}

std::string failed_data_check(const std::vector<CollectiveBenchResult>& results) {
  for (const CollectiveBenchResult& r : results)
    if (!r.check_ok) return r.collective + " of " + std::to_string(r.bytes) + " bytes (" + r.path + " path)";
  return "";
}

const char* across_ranks_name(AcrossRanks across) {
  switch (across) {
    case AcrossRanks::kRankZero: return "rank 0";
    case AcrossRanks::kMean: return "mean";
    case AcrossRanks::kMin: return "min";
    case AcrossRanks::kMax: return "max";
  }
  return "max";
}

double time_across_ranks(const std::vector<double>& rank_times, AcrossRanks across) {
  if (rank_times.empty()) throw std::invalid_argument("time_across_ranks: no rank's time");
  switch (across) {
    case AcrossRanks::kRankZero: return rank_times.front();
    case AcrossRanks::kMean:
      return std::accumulate(rank_times.begin(), rank_times.end(), 0.0) / static_cast<double>(rank_times.size());
    case AcrossRanks::kMin: return *std::min_element(rank_times.begin(), rank_times.end());
    case AcrossRanks::kMax: break;
  }
  return *std::max_element(rank_times.begin(), rank_times.end());
}

double bus_bandwidth_factor(const std::string& collective, int world_size) {
  // nccl-tests' factors (REFERENCE.md). Every collective named: one added
  // later under another name got (n-1)/n, half a broadcast's busbw on 2 ranks.
  const double n = world_size;
  if (collective == "all_reduce") return 2.0 * (n - 1) / n;
  if (collective == "reduce_scatter" || collective == "all_gather" || collective == "all_to_all") return (n - 1) / n;
  if (collective == "broadcast" || collective == "reduce") return 1.0;
  throw std::logic_error("bus_bandwidth_factor: no bus factor for collective " + collective);
}

std::vector<int64_t> size_sweep(int64_t min_bytes, int64_t max_bytes, double factor) {
  std::vector<int64_t> sizes;
  // Each size is min × factor^i, computed afresh and not by repeated
  // products, and one within a part in 10^9 of max_bytes is max_bytes: 1.1
  // is not exact in binary, so 100000 × 1.1 came out 110000.00000000001 and
  // `--max-bytes 110000` was left out of its own sweep.
  const double max = static_cast<double>(max_bytes);
  for (int i = 0;; ++i) {
    double size = static_cast<double>(min_bytes) * std::pow(factor, i);
    if (size > max * (1 + 1e-9)) break;
    size = std::min(size, max);
    const int64_t whole_floats = std::max<int64_t>(4, static_cast<int64_t>(std::floor(size / 4)) * 4);
    if (sizes.empty() || sizes.back() != whole_floats) sizes.push_back(whole_floats);
  }
  return sizes;
}

std::vector<CollectiveBenchResult> bench_collectives(Communicator& comm,
                                                     const std::vector<int64_t>& sizes_bytes,
                                                     const CollectiveBenchOptions& options,
                                                     const MakeBenchBuffer& make_buffer) {
  std::vector<CollectiveBenchResult> results;
  for (const auto& make : {all_reduce, reduce_scatter, all_gather}) {
    int64_t previous_bytes = -1;
    for (int64_t size : sizes_bytes) {
      const Collective collective = make(comm, size);
      // Reduce-scatter and all-gather move whole blocks of one float or more
      // per rank: small sizes round to the same one, measured once.
      if (collective.shape.bytes == previous_bytes) continue;
      previous_bytes = collective.shape.bytes;
      measure_paths(comm, options, make_buffer, collective, results);
    }
  }
  return results;
}

std::vector<CollectiveBenchResult> bench_zero_one_step(Communicator& comm, int64_t padded_bytes,
                                                       const CollectiveBenchOptions& options,
                                                       const MakeBenchBuffer& make_buffer) {
  std::vector<CollectiveBenchResult> results;
  for (const auto& make : {reduce_scatter, all_gather})
    measure_paths(comm, options, make_buffer, make(comm, padded_bytes), results);
  return results;
}

std::vector<CollectiveBenchResult> bench_gradient_step(Communicator& comm,
                                                       const std::vector<int64_t>& bucket_bytes,
                                                       const CollectiveBenchOptions& options,
                                                       const MakeBenchBuffer& make_buffer) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  std::vector<int64_t> offsets;  // in floats, one per bucket, then the total
  int64_t count = 0;
  for (int64_t bytes : bucket_bytes) {
    offsets.push_back(count);
    count += bytes / 4;
  }
  offsets.push_back(count);
  const int64_t buckets = static_cast<int64_t>(bucket_bytes.size());

  Collective c;
  c.shape = shape("all_reduce", count, 1, buckets);
  c.send_count = count;
  c.fill = [=](std::vector<float>& send) { for (int64_t i = 0; i < count; ++i) send[i] = bench_contribution(rank, i); };
  c.check = [=](const std::vector<float>& send, const std::vector<float>& /*recv*/) {
    for (int64_t i = 0; i < count; ++i)
      if (send[i] != bench_sum_of_contributions(world, i)) return false;
    return true;
  };
  c.paths.push_back({"bucketed", [&comm, offsets, buckets](Buffers& b) {
                       // Reserved first: no throw between the starts, which a
                       // freed b.send would leave writing.
                       std::vector<Communicator::Ticket> tickets;
                       tickets.reserve(static_cast<size_t>(buckets));
                       for (int64_t k = 0; k < buckets; ++k)
                         tickets.push_back(comm.start_all_reduce_sum(b.send->data() + offsets[k],
                                                                     offsets[k + 1] - offsets[k]));
                       for (Communicator::Ticket ticket : tickets) comm.wait(ticket);
                     }});
#if TRAINBENCH_HAVE_MPI
  if (has_raw_path(comm))
    c.paths.push_back({"raw", [&comm, offsets, buckets](Buffers& b) {
                         for (int64_t k = 0; k < buckets; ++k)
                           check_raw(comm, MPI_Allreduce(MPI_IN_PLACE, b.send->data() + offsets[k],
                                                         raw_count(comm, offsets[k + 1] - offsets[k]),
                                                         MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                                     "MPI_Allreduce");
                       }, true});
#endif
  std::vector<CollectiveBenchResult> results;
  measure_paths(comm, options, make_buffer, c, results);
  return results;
}

}  // namespace trainbench
