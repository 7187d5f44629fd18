// The network ceiling, measured as nccl-tests measures it: each collective at
// each size timed over iterations after a warm-up, its algorithm and bus
// bandwidth, and a check that every rank got the exact expected values.
// Each collective is measured on the communicator's path (the one the trainer
// uses) and, on the MPI backend, as the plain blocking MPI call beside it.
// The buffers are where the communicator takes them (bench_buffer.h): host
// memory for local and mpi, the rank's GPU for nccl. Times are host wall
// time around each call, which on NCCL returns once the host has seen the
// collective complete on the GPU (its wait loop: spinning for the first
// 200 us, then polling every 20 us or so).
#pragma once

#include <cstdint>     // int64_t
#include <functional>  // MakeBenchBuffer
#include <memory>      // MakeBenchBuffer's buffers
#include <string>
#include <vector>

#include "comm/bench_buffer.h"
#include "comm/communicator.h"

namespace trainbench {

struct CollectiveBenchResult {
  std::string collective;  // "all_reduce", "reduce_scatter", "all_gather"
  // "bucketed": start_all_reduce_sum + wait, as the trainer all-reduces a
  // gradient bucket; "comm": the communicator's blocking call; "raw": the
  // plain blocking MPI call on MPI_COMM_WORLD, what any MPI program gets.
  std::string path;
  // nccl-tests' size: the all-reduce buffer; for reduce-scatter and
  // all-gather the whole buffer across ranks (floats per rank × ranks × 4).
  int64_t bytes = 0;
  // nccl-tests' count: the collective's count argument — the floats of the
  // all-reduce buffer; for reduce-scatter and all-gather one rank's block
  // (bytes / 4 / ranks), as nccl-tests prints it.
  int64_t count = 0;
  int64_t buckets = 1;   // all-reduces per measurement (the gradient step's buckets)
  // The ranks' times as CollectiveBenchOptions::across_ranks picks them
  // (the slowest rank's by default) from rank_time_s: each rank's median
  // over the timed iterations, rank-major.
  double time_s = 0.0;
  std::vector<double> rank_time_s;
  double algbw_gbs = 0.0;  // bytes / time_s, in 1e9 bytes/s
  double busbw_gbs = 0.0;  // algbw × bus_bandwidth_factor
  bool check_ok = false;   // every rank got exactly the expected values
};

// Which of the ranks' times a result reports, as nccl-tests' -a (--average):
// 0 rank 0's, 1 their mean, 2 the fastest, 3 the slowest. trainbench takes
// the slowest (a training step waits for it: the network ceiling, burn-in);
// nccl-tests' default is the mean over ranks, which `bench comm --average 1`
// takes too (of each rank's median, where nccl-tests has each rank's mean
// over its timed loop).
enum class AcrossRanks { kRankZero = 0, kMean = 1, kMin = 2, kMax = 3 };
// "rank 0", "mean", "min", "max".
const char* across_ranks_name(AcrossRanks across);
// The time `across` picks from every rank's (rank-major, at least one).
double time_across_ranks(const std::vector<double>& rank_times, AcrossRanks across);

struct CollectiveBenchOptions {
  int64_t warmup_iters = 5;
  int64_t iters = 20;  // timed iterations; the median is reported
  // The raw path: plain blocking MPI calls beside the communicator's, which
  // bench comm compares. Burn-in, the ceilings and project read the
  // communicator's paths only and leave it out.
  bool raw_path = true;
  // The raw path's blocking MPI calls cannot time out by themselves: a
  // watchdog ends the job (exit 3) when none of them returned for this long.
  // No default: it is the run's comm.timeout_s (the callers that left it out
  // waited 300 s whatever comm.timeout_s said); 0 with the raw path is refused.
  double timeout_s = 0.0;
  AcrossRanks across_ranks = AcrossRanks::kMax;
};

// Makes a measurement's buffers. By default make_bench_buffer (where the
// communicator takes them); tests pass make_separate_host_bench_buffer,
// device memory's stand-in.
using MakeBenchBuffer = std::function<std::unique_ptr<BenchBuffer>(int64_t count)>;

// The median of one rank's iteration times; of an even count the mean of
// the two middle ones (as the step statistics interpolate; the upper one was
// taken). 0 for none.
double median_of_iterations(std::vector<double> values);

// What rank `rank` contributes at element i of a collective's whole array
// (an all-gather's rank r sends elements r·block to r·block + block − 1),
// and the sum of every rank's at i: small integers (1 to 56), so every
// partial sum over ranks is exact in fp32, in any order, up to 2^24 / 56 =
// 299,593 ranks, and the check demands equality. (rank + 1 + i % 7 summed
// past 2^24 above 5786 ranks: a healthy large job's data check failed.) The
// values differ by rank and, without a period, by index: a block delivered
// to the wrong rank or offset fails the check.
float bench_contribution(int rank, int64_t i);
float bench_sum_of_contributions(int world, int64_t i);

// busbw / algbw, as nccl-tests defines it: 2(n−1)/n for all-reduce, (n−1)/n
// for reduce-scatter and all-gather; 0 on one rank, where nothing moves.
double bus_bandwidth_factor(const std::string& collective, int world_size);

// min_bytes, min_bytes × factor, ... up to max_bytes (included when reached),
// each rounded down to whole floats.
std::vector<int64_t> size_sweep(int64_t min_bytes, int64_t max_bytes, double factor);

// Every collective at every size, on each path this communicator has. All
// ranks must call it with the same arguments.
std::vector<CollectiveBenchResult> bench_collectives(Communicator& comm,
                                                     const std::vector<int64_t>& sizes_bytes,
                                                     const CollectiveBenchOptions& options,
                                                     const MakeBenchBuffer& make_buffer = nullptr);

// One step's gradient buckets (byte sizes, in the order backward produces
// them) all-reduced back to back: on the bucketed path all started at once
// and then waited for, as the trainer does; on the raw path one blocking
// MPI_Allreduce after another. time_s is the time per step.
std::vector<CollectiveBenchResult> bench_gradient_step(Communicator& comm,
                                                       const std::vector<int64_t>& bucket_bytes,
                                                       const CollectiveBenchOptions& options,
                                                       const MakeBenchBuffer& make_buffer = nullptr);

// ZeRO-1's gradient step as ZeroOneOptimizer makes it: the padded gradient
// (`padded_bytes`, whole floats for every rank) reduce-scattered, then the
// updated parameters all-gathered, each a blocking call. One result per
// collective and path, reduce-scatter first; the step's time on a path is
// the sum of its two.
std::vector<CollectiveBenchResult> bench_zero_one_step(Communicator& comm, int64_t padded_bytes,
                                                       const CollectiveBenchOptions& options,
                                                       const MakeBenchBuffer& make_buffer = nullptr);

// The first result whose data check failed, as "all_reduce of 65536 bytes
// (bucketed path)", or "" when every rank got the expected values in all
// of them. A link that returns wrong values may well be fast: its time is
// no ceiling or link model.
std::string failed_data_check(const std::vector<CollectiveBenchResult>& results);

}  // namespace trainbench
