// Isolation ceilings (`trainbench run --ceilings`): before the full run, each
// resource of DESIGN.md measured alone on the same config and ranks — the
// compute step with batches resident and nothing else, the step's exact
// gradient buckets all-reduced back to back, the loader alone over the run's
// shards, and a checkpoint persisted alone — each expressed as the tokens/s
// it could sustain, so the report can set the achieved rate beside every one
// and name what holds it back.
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // the result's `ceilings`

#include "comm/collective_bench.h"  // CollectiveBenchResult: what the network ceiling timed
#include "comm/communicator.h"
#include "kernels/engine.h"
#include "trainer/config.h"

namespace trainbench {

struct Ceilings {
  // Global tokens/s each resource alone could sustain (0 = not measured).
  double compute_tokens_per_s = 0;   // every rank training on resident batches, no comm, no checkpoints
  double network_tokens_per_s = 0;   // global tokens per step / the buckets' all-reduce time per step
  double read_tokens_per_s = 0;      // every rank's loader alone, summed
  double network_step_s = 0;         // the step's all-reduces back to back (0 on one rank)
  // What network_step_s times: DDP's bucket all-reduces, or under comm.zero 1
  // the reduce-scatter and all-gather (step_all_reduce_s keeps its name).
  std::string network_collectives = "all-reduces";
  // What was timed, as bench comm reports it (collective, bytes, buckets,
  // time, busbw): the step's bucket all-reduces as one result, or ZeRO-1's
  // reduce-scatter and all-gather. Empty when the network was not measured.
  std::vector<CollectiveBenchResult> network_timed;
  // Why the network ceiling was not measured on several ranks ("" = it was).
  std::string network_failure;
  double read_gbs = 0;               // the loaders' storage bytes per second, summed
  double write_gbs = 0;              // a checkpoint persisted alone, this rank's files (1e9 B/s)
  int64_t write_bytes = 0;           // what that measurement wrote per rank
  std::string write_failure;         // why the write ceiling was not measured ("" = it was)
  double checkpoint_bytes = 0;       // one checkpoint, all ranks
  // Seconds per step a synchronous checkpoint would add at write_gbs,
  // amortized over checkpoint.every_steps (0 without checkpoints).
  double write_s_per_step = 0;
};

// The compute ceiling: every rank trains on resident synthetic batches
// alone (a local communicator: no gradient sync, no checkpoints), and the
// slowest rank's 10th-percentile step sets the pace. Global tokens/s and that
// step. Collective; leaves the engine's state as it found it. What `run
// --ceilings` reports as compute and `bench compute` measures alone.
struct ComputeCeiling {
  double tokens_per_s = 0;
  double step_s = 0;
};
ComputeCeiling measure_compute_ceiling(const Config& config, TrainingEngine& engine, Communicator& comm);

// Collective: every rank calls it with the same config, before the run.
// Leaves the engine's state as it found it (copied out and restored).
// `shards` are the run's resolved shards ("" source synthetic: no read
// ceiling); `checkpoint_dir` where the write ceiling writes ("" = none).
Ceilings measure_ceilings(const Config& config, TrainingEngine& engine, Communicator& comm,
                          const std::vector<std::string>& shards, const std::string& checkpoint_dir);

// A checkpoint of `bytes` per rank (at least 1 MiB) persisted alone by every
// rank at once — the ranks agree once each has its images filled, and write
// nothing else beside it — in a temporary folder under `checkpoint_dir`
// (removed after), with the run's writer settings. Collective.
struct WriteRate {
  int64_t bytes = 0;    // written per rank
  double rank_gbs = 0;  // this rank's own rate (1e9 B/s)
  double job_gbs = 0;   // all ranks' bytes / the slowest rank's time
  // Not measured: the first failing rank's words ("rank N: ..." on several
  // ranks), the same on every rank; disk_full when every failure was one.
  std::string failure;
  bool disk_full = false;
};
WriteRate measure_write_rate(const Config& config, Communicator& comm, const std::string& checkpoint_dir,
                             int64_t bytes);

// The network ceiling from what the gradient step timed (DDP's bucketed
// all-reduces, or ZeRO-1's reduce-scatter and all-gather): their times
// summed into network_step_s, kept in network_timed. Where a data check
// failed there is no ceiling and nothing timed is kept; network_failure
// names the collective.
void set_network_ceiling(Ceilings& c, const std::vector<CollectiveBenchResult>& timed, double global_tokens_per_step);

// The step's bus bandwidth over what the network ceiling timed: the bus
// bytes of every collective (busbw × time) over their summed time, in 1e9
// B/s, as nccl-tests' busbw of one collective; 0 when nothing was timed.
double network_busbw_gbs(const std::vector<CollectiveBenchResult>& timed);

nlohmann::json ceilings_to_json(const Ceilings& ceilings, double achieved_tokens_per_s);

// "compute 61k, network 230k, storage read 41k, storage write 9.2 GB/s
// tokens/s: the run reached 38k = 93% of the lowest (storage read)".
std::string ceilings_line(const Ceilings& ceilings, double achieved_tokens_per_s);

// What the run's warnings say of the ceilings, one line each: a run faster
// than the lowest one (its share above 100 %: the host's speed changed
// between the measurement and the run, as MFU above the GEMM ceiling is
// warned of), and no storage-write ceiling for a run that writes no
// checkpoints (it was announced, then missing from the line without a word).
// `wall_tokens_per_s` (0: not measured): where the median step is above the
// storage-read ceiling, the lowest, but the wall rate is not, the steps that
// stalled (a loader whose batches come in bursts: most steps find one ready)
// are the reason, not the host's speed.
std::vector<std::string> ceilings_warnings(const Ceilings& ceilings, double achieved_tokens_per_s,
                                           bool checkpoints_off, double wall_tokens_per_s = 0);

// The run's bottleneck line (RunSummary::bottleneck) with the ceiling that
// explains it: "storage read — data stall 31% of step (compute 66%); the
// loader alone feeds 41k tokens/s, compute alone 60k".
std::string explain_bottleneck(const std::string& bottleneck, const Ceilings& ceilings, double achieved_tokens_per_s);

}  // namespace trainbench
