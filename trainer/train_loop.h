// The step loop: batches from a BatchSource, forward/backward/optimizer on a
// TrainingEngine, gradients through a Communicator; every step timed and its
// wall time split into the DESIGN.md categories.
#pragma once

#include <cstdint>     // int64_t
#include <functional>  // ProgressFn
#include <memory>      // measurement_batches
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // RunOutcome::ceilings

#include "comm/communicator.h"        // Communicator
#include "dataloader/batch_source.h"  // BatchSource, make_synthetic_source
#include "kernels/engine.h"           // TrainingEngine
#include "trainer/checkpointing.h"    // Checkpointer, CheckpointRecord
#include "trainer/config.h"           // Config

namespace trainbench {

// One step on this rank. step_s = compute_s + comm_exposed_s + data_stall_s
// + ckpt_stall_s + other_s by construction; other_s is what no category
// explains (launch gaps, host overhead) and is shown, never hidden.
struct StepRecord {
  int64_t step = 0;      // from 1
  bool warmup = false;   // excluded from the statistics
  double step_s = 0;
  double compute_s = 0;
  double comm_s = 0;
  double comm_exposed_s = 0;
  double data_stall_s = 0;
  double ckpt_stall_s = 0;
  double other_s = 0;
  double loss = 0;       // mean over the step's micro-batches (this rank)
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

// Median, p10 and p90 of one quantity over the measured steps.
struct Spread {
  double median = 0, p10 = 0, p90 = 0;
};

// One rank's medians over the measured steps: how the ranks compare (a slow
// node or GPU shows as one rank whose own work stands out; step_s is the
// same on every rank, since each step ends in the same all-reduce).
struct RankSummary {
  int rank = 0;
  std::string host;
  double step_s = 0, compute_s = 0, comm_exposed_s = 0, data_stall_s = 0, ckpt_stall_s = 0, other_s = 0;
  double own_s = 0;  // median of step_s − comm_exposed_s: the step less its wait in the collectives
  // Of the time its threads were ready to run in the measured steps, the
  // share they waited for a CPU (trainer/cpu_wait.h); -1 when not measured.
  double cpu_wait_share = -1;
};

struct RunSummary {
  // The per-step timers ran (report.instrument, on by default). Without them
  // the step times, categories, shares and the slowest rank are not
  // measured: the result writes them null and the report says so.
  bool timed = true;
  int64_t measured_steps = 0;
  int64_t warmup_steps = 0;
  int64_t global_tokens_per_step = 0;
  double tokens_per_s = 0;          // global tokens / the largest of the ranks' median step_s
  // The measured steps' wall time on this rank, from the end of warm-up to
  // the end of the last step, and global tokens / it: tokens/s without
  // per-step timing (report.instrument=false), and a mean beside the median.
  double measured_wall_s = 0, wall_tokens_per_s = 0;
  // Seconds this rank spent comparing the ranks' parameters (comm.check_every,
  // the last step, steps due a checkpoint): left out of every step_s and of
  // measured_wall_s, as trainbench's check rather than the workload's time.
  double consistency_check_s = 0;
  // This rank's CpuWaitMeter share over the measured window (-1: not
  // measured); after summarize_ranks the largest of the ranks' (every
  // rank's is in `ranks`).
  double cpu_wait_share = -1;
  Spread step_s, compute_s, comm_s, comm_exposed_s, data_stall_s, ckpt_stall_s, other_s;
  // 1 − Σ comm_exposed_s / Σ comm_s: how much of the communication the
  // overlap with backward hid (0 with one rank or comm.overlap=false).
  double comm_hidden_share = 0;
  // Each category's share of step_s (sums of the measured steps).
  double compute_share = 0, comm_exposed_share = 0, data_stall_share = 0, ckpt_stall_share = 0,
         other_share = 0;
  double model_flops_per_token = 0;
  double achieved_flops_per_s = 0;  // per device
  double gemm_ceiling_flops_per_s = 0;
  int64_t gemm_m = 0, gemm_n = 0, gemm_k = 0;
  double mfu_vs_gemm_ceiling = 0;
  double datasheet_peak_flops_per_s = 0;  // 0 when the device has no datasheet figure (CPUs)
  double mfu = 0;                         // against the datasheet peak; 0 when unknown
  double loss_first = 0, loss_last = 0;
  // Storage read: the loaders' counters over the run, summed over ranks.
  int64_t bytes_read = 0;         // from storage (compressed size for compressed shards)
  int64_t samples_read = 0, tokens_read = 0;
  // A resume's step over the samples before its saved position: their
  // bytes are in bytes_read, their tokens and separators in bytes_per_token's
  // count, not in tokens_read or samples_read.
  int64_t tokens_stepped_over = 0, samples_stepped_over = 0;
  int64_t samples_skipped = 0, shards_skipped = 0;  // data.on_corrupt: skip
  // Distinct shards over every rank read as whole that look damaged (SourceStats).
  int64_t shards_cut_short = 0, shards_without_samples = 0;
  double read_gbs = 0;            // bytes_read / run time: what the loaders delivered (1e9 B/s)
  double samples_per_s = 0;
  double bytes_per_token = 0;     // whole samples read per token decoded
  // bytes_per_token × tokens/s: the storage bandwidth the measured rate
  // needs, and the one the GPUs would need at the GEMM ceiling (DESIGN.md).
  double required_read_gbs_measured = 0;
  double required_read_gbs = 0;
  // What required_read_gbs's tokens/s is: "gemm_ceiling" (the FLOPs the GEMM
  // calibration allows), or "compute_ceiling" once run --ceilings measured
  // the step alone (DESIGN's definition).
  std::string required_read_basis = "gemm_ceiling";
  // Storage write: checkpoints of this run (CheckpointRecord each).
  int64_t bytes_written = 0;             // committed checkpoints' files, all ranks
  int64_t checkpoints_committed = 0, checkpoints_skipped = 0, checkpoints_failed = 0;
  double checkpoint_write_gbs = 0;       // median over committed checkpoints
  double checkpoint_stall_s = 0;         // median loop stall per committed checkpoint (this rank)
  double checkpoint_drain_s = 0;         // after the last step: persisting what was in flight
  int64_t checkpoint_staging_bytes = 0;  // host memory this rank stages its checkpoints in (0: none)
  // AdamW state held by each rank, and what it would be unsharded: ZeRO-1
  // (comm.zero=1) keeps about 1/world of it.
  int64_t optimizer_bytes_per_rank = 0, optimizer_bytes_unsharded = 0;
  // The gradients went through ZeRO-1's reduce-scatter and all-gather
  // (comm.zero=1 on 2 ranks or more), not the bucketed all-reduce.
  bool zero_sharded = false;
  MemoryPlan memory_per_rank;  // the engine's plan: what one rank (one GPU) holds
  // report.op_times: the mean seconds per measured step of each kind of op
  // (the engine's breakdown of compute_s on this rank); op_times_available is
  // false when the engine cannot time its ops (the cpu engine).
  bool op_times_requested = false, op_times_available = false;
  std::vector<OpTime> op_seconds_per_step;
  // The rank that sets the pace: the largest median own_s (RankSummary).
  // step_s, the spreads and the shares above are its figures, broadcast
  // from it, so the bottleneck is judged where the time is spent; `steps`
  // in the result stay rank 0's.
  int64_t slowest_rank = 0;
  // Slowest rank's median own_s over the median of the ranks' own_s, − 1:
  // 0.25 = the slowest rank works 25% longer per step than the typical one.
  double slowest_rank_excess = 0;
  std::vector<RankSummary> ranks;  // every rank, gathered to all
  // The resource that limits the run, in one line (docs/metrics.md).
  std::string bottleneck;
};

struct Check {
  std::string name;
  bool passed = false;
  std::string detail;
};

// Why a run stopped before its last step, on a failure every rank learnt of
// in the same step, so that every rank stopped there and the steps trained
// are still measured and written:
// - checkpoints_written: a checkpoint that could not be written, and
//   checkpoint.on_full did not allow going on. The run stops after the step
//   whose agreement round learnt of it (that step is trained and recorded).
// - data_read: a rank could not get a batch (a corrupt shard under
//   data.on_corrupt=fail, no batch within data.timeout_s). The step it was
//   for is not trained: every rank stops before its optimizer update.
// The CLI prints `message` as its one line and exits 3 when `environment`
// (the machine's failure: a disk, a stalled or failing read), else 2 (the
// data's: a corrupt shard is bad input).
struct RunFailure {
  std::string check;  // the failed check's name; empty while none failed
  std::string message;
  bool environment = false;
  bool happened() const { return !check.empty(); }
};

struct RunOutcome {
  std::vector<StepRecord> steps;
  std::vector<CheckpointRecord> checkpoints;
  RunSummary summary;
  std::vector<Check> checks;
  std::vector<std::string> warnings;
  // Isolation ceilings measured before the run (run --ceilings): the result
  // JSON's `ceilings` and the report's line; empty when not measured.
  nlohmann::json ceilings = nlohmann::json::object();
  std::string ceilings_line;
  // The checkpoint the run resumed from and what loading it took (the result
  // JSON's `resume`, resume_json); null for a run that started afresh.
  nlohmann::json resume;
  // The failure every rank learnt of together that stopped the run early (see
  // RunFailure); the steps before it are above. Its check is among `checks`.
  RunFailure failure;
  // The ranks whose parameters left the majority's (checksum_divergence);
  // empty when none did or no majority says which.
  std::vector<int> diverged_ranks;
  bool all_checks_passed() const;
};

using ProgressFn = std::function<void(const StepRecord&, const RunSummary& so_far)>;
// Called on every rank after each step's record is complete (after the
// cross-rank parameter check, before the loss check), for a command's own
// per-step work (burnin's checks). It may run collectives; returning false
// ends the run after this step, so it must return the same on every rank.
// Its time counts in the next step's step_s (as other_s).
using StepHook = std::function<bool(const StepRecord&)>;

// Runs steps first_step .. config.train.steps (a resumed run starts after
// its checkpoint's step; its warm-up counts from first_step). Stops early
// (with a failed check) when the loss stops being finite. gemm ceiling and
// FLOP counts are filled in. With a checkpointer, checkpoints are taken as
// configured and the loop's time blocked by them is ckpt_stall_s. A failed
// checkpoint (checkpoint.on_full says stop) or a batch a rank could not get
// stops every rank and the outcome says so (RunFailure) rather than
// throwing: the steps so far are measured and reported. On more than one
// rank, telling a data failure costs one small host collective per step.
// The GEMM ceiling is timed first for report.gemm_ceiling_s (none at 0).
RunOutcome run_training(const Config& config, TrainingEngine& engine, BatchSource& source,
                        Communicator& comm, const ProgressFn& on_progress,
                        Checkpointer* checkpointer = nullptr, int64_t first_step = 1,
                        const StepHook& after_step = nullptr);

// The config of a measurement's own short runs on the job's engine (the
// compute ceiling, bench instrument's blocks): `warmup_steps` then
// `measured_steps`, no checkpoints, no fault injection and no GEMM ceiling
// timed first.
Config measurement_run_config(const Config& config, int64_t warmup_steps, int64_t measured_steps);
// Their batches: a few resident synthetic batches of the config's shape, so
// that no storage read enters what they measure.
std::unique_ptr<BatchSource> measurement_batches(const Config& config);

// XXH64 over `bytes` bytes: the parameter consistency check's checksum, and
// burn-in's golden gradient checksum.
uint64_t checksum_bytes(const void* data, size_t bytes);

// The parameter consistency check's finding from every rank's checksum ("":
// all equal). The ranks outside the checksum more than half of them hold go
// to `*diverged` (empty where none is held by a majority: of two ranks that
// differ, which is wrong is not known). Naming those that differ from rank 0
// blamed the healthy ranks of a job whose rank 0 diverged.
std::string checksum_divergence(const std::vector<uint64_t>& checksums, int64_t step, std::vector<int>* diverged);

// The optimizer settings of the `train` section.
AdamWSettings adamw_settings(const TrainSection& train);

// The one-line answer: the category that takes the largest share of the
// step beside compute, when it takes at least 10% of it ("storage read —
// data stall 31% of step"), else compute.
std::string bottleneck_line(const RunSummary& summary);

// The largest GEMM of one micro-batch ([m, k] × [k, n]), each side rounded
// up to a multiple of 64, for the ceiling.
void largest_gemm_shape(const ModelShape& shape, int64_t micro_batch, int64_t* m, int64_t* n,
                        int64_t* k);

}  // namespace trainbench
