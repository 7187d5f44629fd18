// Burn-in (`trainbench burnin`): the training job run for a duration with
// checks that find the bad GPU, the slow node and the silent error, and a
// PASS/FAIL verdict per GPU (rank), per node and for the job.
//
//   silent data corruption  a golden step (fixed weights, fixed batch, the
//                           engine's deterministic kernels) recomputed every
//                           burnin.golden_every steps on every rank; its loss
//                           and gradient checksum must equal, bit for bit,
//                           the value the ranks agreed on at the start
//   numerics                loss and gradient norm finite at every step
//   stragglers              each rank's own step time (waits for peers left
//                           out) against the other ranks' median
//   drift                   tokens/s of the first and last tenth of the steps
//   GPU health              NVML samples (gpu_health.h): uncorrected ECC
//                           errors or a hardware slowdown fail the GPU
//   fabric, storage         a short all-reduce busbw and a checkpoint write
//                           GB/s at the start and every burnin.health_every_s;
//                           a drop beyond burnin.degrade_pct fails
//   baseline                --baseline: tokens/s, busbw and write GB/s
//                           against a known-good result
// The cross-rank parameter checksum (comm.check_every) and the run's other
// checks count too. The pure parts (durations, golden values, verdict rules,
// baseline) are separate functions so tests reach them without a job.
#pragma once

#include <cstdint>  // uint32_t, uint64_t
#include <optional>
#include <string>
#include <utility>  // std::move
#include <vector>

#include <nlohmann/json.hpp>  // verdict and baseline

#include "trainer/config.h"  // Config: the job a baseline must match

#include "kernels/engine.h"  // TrainingEngine for the golden step

namespace trainbench {

// "90s", "30m", "2h", "1.5h" or plain seconds ("45") → seconds. Throws
// std::invalid_argument with one line naming the text for anything else
// (no number, unknown unit, not > 0).
double parse_duration(const std::string& text);

// The golden step's outcome: the loss's float bits and an FNV-1a checksum
// of the gradient bytes.
struct GoldenValue {
  uint32_t loss_bits = 0;
  uint64_t gradient_checksum = 0;
  bool operator==(const GoldenValue&) const = default;
};

// One forward + backward on weights initialised from `seed` and a fixed
// batch derived from it, and the parameters put back as they were (the
// optimizer state and the data are not touched; the gradients are left
// zero). `golden_weights`, when given, are those weights already made
// (layout().total_params() floats): initialising a large model on the host
// takes seconds. `flip_bit` (test hook burnin.inject_bitflip_*): one bit of
// the gradient is flipped before it is read, as a silent error would.
GoldenValue compute_golden_step(TrainingEngine& engine, uint64_t seed, bool flip_bit,
                                const float* golden_weights = nullptr);

// The value more than half the ranks hold, if any.
std::optional<GoldenValue> majority_value(const std::vector<GoldenValue>& values);

// "loss bits 40c7b151 vs 40c7b151, gradient checksum ... vs ...".
std::string describe_golden_difference(const GoldenValue& found, const GoldenValue& expected);

// The golden step at the start, judged per rank against the ranks that
// compute alike: the same `numerics` (its engine, and the CPU engine's
// thread count, which splits its sums, or the GPU model, whose kernels
// cuBLASLt and cuDNN pick). Bit-identical results are expected only there:
// two healthy ranks of 1 and 2 threads differ in the last bits. The
// majority among them is a rank's reference for every later check; a rank
// that no other computes alike is its own reference (compared false).
struct GoldenStart {
  std::vector<GoldenValue> reference;              // per rank
  std::vector<std::vector<std::string>> failures;  // per rank, the verdict's lines
  std::vector<bool> compared;                      // per rank: another rank computes alike
};
GoldenStart judge_golden_start(const std::vector<GoldenValue>& values, const std::vector<std::string>& numerics);

// One row of the verdict: a GPU (rank), a node or the job.
struct VerdictRow {
  VerdictRow() = default;
  explicit VerdictRow(std::string row_name, std::string row_host = "")
      : name(std::move(row_name)), host(std::move(row_host)) {}
  std::string name;                   // "rank 1", "node host-a", "job"
  std::string host;                   // where it ran ("" for the job)
  bool passed = true;
  std::vector<std::string> failures;  // why it failed, one line each
  std::vector<std::string> notes;     // figures and what was seen but does not fail it
  nlohmann::json figures = nlohmann::json::object();
  void fail(const std::string& why) {
    passed = false;
    failures.push_back(why);
  }
};

struct Verdict {
  std::vector<VerdictRow> gpus;   // one per rank
  std::vector<VerdictRow> nodes;  // one per host, in order of first rank
  VerdictRow job{"job"};  // the run's checks, fabric, drift, baseline
  bool passed() const;
};

// A rank's own step time: its median over the measured steps of step_s
// minus comm_exposed_s (the wait for its peers in the all-reduce), against
// the median of the other ranks' values. "" when within straggler_pct, else
// why it is a straggler. One rank: never.
std::string straggler_finding(const std::vector<double>& own_step_s, size_t rank, double straggler_pct);

// tokens/s over the first and last tenth of `step_s` (measured steps, in
// order): the global tokens per step over each tenth's median step time.
// Steps a drift is judged from at least: each tenth then a median of 10
// steps. With 20 (tenths of 2), a 1.5 s burn-in FAILed on noise (-27 %).
inline constexpr size_t kDriftMinSteps = 100;
struct Drift {
  bool judged = false;  // false with fewer than kDriftMinSteps steps
  double first_tokens_per_s = 0, last_tokens_per_s = 0;
  double change = 0;    // last / first − 1
};
Drift measure_drift(const std::vector<double>& step_s, double tokens_per_step);

// The two figures a degradation is judged between, from one figure's
// measurements in order (those made: > 0). From kEndsOfMedians × 2 on, the
// median of the first kEndsOfMedians and of the last: one slow measurement
// (a neighbour job's burst on the fabric, a busy disk) is no degradation, a
// link that stays slow is. Fewer: the first and the last. None: 0 and 0.
constexpr size_t kEndsOfMedians = 3;
struct JudgedEnds {
  double start = 0, end = 0;
  bool medians = false;  // start and end are medians of kEndsOfMedians
  size_t count = 0;      // the measurements: 1 compares nothing (start and end are the one)
  std::string start_words() const;  // "at the start", or "over the first 3 measurements (median)"
  std::string end_words() const;    // "at the last measurement", or "over the last 3 (median)"
  std::string finding_words() const;  // after a degradation_finding: "", or ", medians of ..."
};
JudgedEnds judged_ends(const std::vector<double>& measured);

// "" when `now` fell by no more than degrade_pct from `start`, else a line
// naming `what`, both figures and the drop. Zero figures are not judged.
std::string degradation_finding(const std::string& what, double start, double now, double degrade_pct,
                                const std::string& unit);

// Known-good figures (--baseline): 0 = not in the file / not measured.
struct BaselineFigures {
  double tokens_per_s = 0;
  double busbw_gbs = 0;
  double write_gbs = 0;
  nlohmann::json config;  // the job they were measured on (config_to_json), null in a file without one
  int64_t ranks = 0;      // and its ranks; 0 when the file does not say
  std::string compute_backend;  // the engine it ran on (environment.compute_backend): "cpu", "cuda" or ""
  std::string attention_kernel;  // and its attention (environment.attention.kernel): "gemm", "cudnn-sdpa" or ""
  // The hardware it ran on, where the file says (0 / "": not compared):
  int64_t hosts = 0;             // environment.hosts, counted
  std::string gpu_name;          // environment.host_gpus[0].gpu_name ("NVIDIA H200")
  std::string cpu_model;         // environment.cpu.model
  std::string path;              // the file, as --baseline named it
};
// From a result JSON of `trainbench run` (summary.tokens_per_s) or of
// `trainbench burnin` (also burnin.fabric.busbw_gbs and
// burnin.storage.write_gbs). Throws std::invalid_argument naming the file
// when it is not a regular file, cannot be read or parsed, is not a
// trainbench result, holds a figure that is not a positive number (null:
// not measured in that run), or holds none of the figures.
BaselineFigures read_baseline(const std::string& path);
// Why `known` was measured on another job than `config` on `ranks` ranks
// on the `engine` ("cpu", "cuda": train.device resolved, resolve_device)
// — another number of ranks, another engine, model shape, micro-batch,
// accumulation, mode or precision, or (cuda engine) trained with
// train.deterministic false, which the burn-in never is: its tokens/s is
// not this job's — or "".
// A precision of auto is the engine's (bf16 on cuda, fp32 on cpu): the
// baseline's is read from the engine it ran on (an older result that does
// not say is not compared), this job's from `engine`.
std::string baseline_job_difference(const BaselineFigures& known, const Config& config, int ranks,
                                    const std::string& engine);
// Its first check alone: another number of ranks than `ranks` ("" when the
// same or the file does not say). Again once MPI is up, against the job's
// own size (the launcher may not say it beforehand).
std::string baseline_ranks_difference(const BaselineFigures& known, int64_t ranks);
// Why `known` ran another attention kernel than this job's engine does
// (`kernel`, `detail`: TrainingEngine::attention()), or "" when the same or
// the baseline does not say. Not known before the engine exists: train.
// attention auto takes cuDNN's fused SDPA where the build has it and the GPU
// supports the shape, so a baseline from a build with cuDNN made a healthy
// cluster running a build without it fail (or the other way round pass).
std::string baseline_attention_difference(const BaselineFigures& known, const std::string& kernel,
                                          const std::string& detail);
// Why `known` was measured on other hardware than this job runs on, or ""
// when the same or the file does not say: another number of hosts (the
// fabric check's all-reduce crosses another network), another GPU model on
// the cuda engine, another CPU model on the cpu engine. An A100 cluster's
// baseline passed an H100 cluster that fell short of its own.
std::string baseline_hardware_difference(const BaselineFigures& known, int64_t hosts, const std::string& gpu_name,
                                         const std::string& cpu_model, const std::string& engine);
// One line per figure measured in both that fell more than tolerance_pct
// below the baseline, naming the figure, both values and the shortfall.
std::vector<std::string> compare_with_baseline(const BaselineFigures& now, const BaselineFigures& known,
                                               double tolerance_pct);

nlohmann::json verdict_to_json(const Verdict& verdict);
// The table people read: one line per GPU, node and the job, PASS/FAIL and why.
std::string verdict_table(const Verdict& verdict);

}  // namespace trainbench

#include <memory>  // std::unique_ptr

namespace trainbench {

class RunExtension;  // trainer/run_extension.h

// The burn-in's work inside the run (burnin_monitor.cpp): runs until
// `duration_s` (every rank stops at the same step), checks as above, and
// the verdict in the result JSON (`burnin`) and on the console; finish()
// returns 0 when everything passed, 4 otherwise.
std::unique_ptr<RunExtension> make_burnin_monitor(double duration_s, const std::optional<BaselineFigures>& baseline);

}  // namespace trainbench
