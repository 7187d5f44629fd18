#include "trainer/report.h"

#include <algorithm>  // std::stable_sort: the op breakdown, largest first
#include <cmath>      // std::fabs, std::isnan: a loss that is not finite
#include <vector>

#include "trainer/results.h"  // with_auto_resolved: the header's config as the result's

namespace trainbench {

std::string human_count(double value) {
  const char* units[] = {"", " k", " M", " G", " T", " P"};
  int unit = 0;
  while (std::fabs(value) >= 1000.0 && unit < 5) {
    value /= 1000.0;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f%s" : "%.2f%s", value, units[unit]);
  return text;
}

std::string loss_text(double loss) {
  if (std::isnan(loss)) return "nan";
  if (std::isinf(loss)) return loss > 0 ? "inf" : "-inf";
  char text[64];
  std::snprintf(text, sizeof(text), "%.4f", loss);
  return text;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f %s", bytes, units[unit]);
  return text;
}

std::string human_rate(double gbs) {
  char text[64];
  // The unit a figure rounds to (999.999 MB/s is "1.00 GB/s", not "1000.00 MB/s").
  if (gbs >= 0.999995)
    std::snprintf(text, sizeof(text), "%.2f GB/s", gbs);
  else if (gbs >= 0.999995e-3)
    std::snprintf(text, sizeof(text), "%.2f MB/s", gbs * 1e3);
  else
    std::snprintf(text, sizeof(text), "%.2f kB/s", gbs * 1e6);
  return text;
}

void print_header(FILE* out, const Config& config, const Environment& env, const MemoryPlan& plan,
                  int64_t total_params, int64_t trainable_params, const std::string& steps_said) {
  std::fprintf(out, "trainbench %s  (%s)\n", env.trainbench_version.c_str(), config.origin.c_str());
  const std::string more_hosts =
      env.host_gpus.size() > 1 ? " and " + std::to_string(env.host_gpus.size() - 1) + " more host(s)" : "";
  std::fprintf(out, "  host      %s%s, %d rank(s), comm %s\n", env.host_gpus.front().host.c_str(), more_hosts.c_str(),
               env.world_size, env.comm_backend.c_str());
  const std::string usable = env.usable_threads > 0 && env.usable_threads < env.hardware_threads
                                 ? " (" + std::to_string(env.usable_threads) + " usable)"
                                 : "";
  std::fprintf(out, "  cpu       %s, %d of %d threads%s, %s RAM%s\n", env.cpu_model.c_str(), env.threads_used,
               env.hardware_threads, usable.c_str(), human_bytes(static_cast<double>(env.memory_total_bytes)).c_str(),
               env.memory_limit_bytes > 0 && env.memory_limit_bytes == env.memory_total_bytes ? " (its cgroup's limit)" : "");
  if (env.gpus.gpus.empty()) {
    std::fprintf(out, "  gpu       none (%s)\n", env.gpus.why_none.c_str());
  } else {
    for (const GpuInfo& g : env.gpus.gpus)
      std::fprintf(out, "  gpu %d     %s, %s\n", g.index, g.name.c_str(),
                   human_bytes(static_cast<double>(g.memory_bytes)).c_str());
    std::fprintf(out, "  driver    NVIDIA %s, CUDA %s\n",
                 env.nvidia_driver.empty() ? "unknown" : env.nvidia_driver.c_str(),
                 env.gpus.driver_version.empty() ? "unknown" : env.gpus.driver_version.c_str());
  }
  std::fprintf(out, "  engine    %s (built: %s)\n", env.compute_backend.c_str(),
               env.built_backends.c_str());
  std::fprintf(out, "  attention %s: %s\n", env.attention.kernel.c_str(), env.attention.detail.c_str());
  std::fprintf(out, "  gemm      %s: %s\n", env.gemm.algorithms.c_str(), env.gemm.detail.c_str());
  std::fprintf(out, "  libraries %s; %s; CUDA runtime %s; NCCL %s; MPI %s\n", env.openblas.c_str(),
               env.compiler.c_str(),
               env.gpus.runtime_version.empty() ? "not built" : env.gpus.runtime_version.c_str(),
               env.nccl.empty() ? "not built" : env.nccl.c_str(), env.mpi.empty() ? "not built" : env.mpi.c_str());
  const ModelShape& m = config.model;
  std::fprintf(out,
               "  model     %s params (%s trainable): d_model %ld, %ld layers, %ld heads "
               "(%ld kv), ffn %ld, vocab %ld, seq %ld\n",
               human_count(static_cast<double>(total_params)).c_str(),
               human_count(static_cast<double>(trainable_params)).c_str(), m.d_model, m.n_layers,
               m.n_heads, m.n_kv_heads, m.ffn_hidden, m.vocab, m.seq_len);
  const TrainSection& t = config.train;
  std::fprintf(out, "  batch     micro %ld x accum %ld x %d rank(s) x seq %ld = %s tokens/step\n",
               t.micro_batch, t.grad_accum, env.world_size, m.seq_len,
               human_count(static_cast<double>(t.micro_batch * t.grad_accum * env.world_size *
                                               m.seq_len))
                   .c_str());
  std::fprintf(out,
               "  memory    %s = params %s + grads %s + optimizer %s + activations %s + "
               "workspace %s\n",
               human_bytes(static_cast<double>(plan.total_bytes())).c_str(),
               human_bytes(static_cast<double>(plan.parameter_bytes)).c_str(),
               human_bytes(static_cast<double>(plan.gradient_bytes)).c_str(),
               human_bytes(static_cast<double>(plan.optimizer_bytes)).c_str(),
               human_bytes(static_cast<double>(plan.activation_bytes)).c_str(),
               human_bytes(static_cast<double>(plan.workspace_bytes)).c_str());
  // As the result's config: the `auto`s as they resolved (it said auto
  // where the JSON said cpu, local, fp32).
  std::fprintf(out, "  config\n");
  for (const std::string& line : config_to_lines(with_auto_resolved(config, env))) {
    const bool steps = line.rfind("train.steps: ", 0) == 0;
    std::fprintf(out, "    %s\n", steps && !steps_said.empty() ? ("train.steps: " + steps_said).c_str() : line.c_str());
  }
  std::fflush(out);
}

void print_progress(FILE* out, const Config& config, const StepRecord& step,
                    const RunSummary& so_far, int64_t first_step, bool of_steps) {
  const int64_t every = config.report.progress_every;
  const bool last = step.step == config.train.steps;
  if (every <= 0 || (step.step % every != 0 && step.step != first_step && !last)) return;
  const double tokens_per_s =
      step.step_s > 0 ? static_cast<double>(so_far.global_tokens_per_step) / step.step_s : 0.0;
  // MFU is per device, as the summary's: one rank's tokens against one
  // device's ceiling (the global rate made it the rank count times too high).
  const double rank_tokens_per_step =
      static_cast<double>(config.train.micro_batch * config.train.grad_accum * config.model.seq_len);
  const double flops = step.step_s > 0 ? so_far.model_flops_per_token * rank_tokens_per_step / step.step_s : 0.0;
  // No ceiling (report.gemm_ceiling_s=0) is "n/a", not an MFU of 0 %.
  char mfu[16] = "  n/a ";
  if (so_far.gemm_ceiling_flops_per_s > 0)
    std::snprintf(mfu, sizeof(mfu), "%5.1f%%", 100.0 * flops / so_far.gemm_ceiling_flops_per_s);
  // A step that waited for a checkpoint says so: with progress_every and
  // checkpoint.every_steps alike (10 and 10 by default) every line printed
  // was such a step, slower than the summary's median. (Every step with
  // checkpoints on has some microseconds of ckpt_stall_s, the check whether
  // one is due: 1 % of the step is a wait.)
  char checkpoint[64] = "";
  if (step.ckpt_stall_s >= 0.01 * step.step_s && step.ckpt_stall_s > 0)
    std::snprintf(checkpoint, sizeof(checkpoint), "  (%.2f ms of it checkpoint stall)", 1e3 * step.ckpt_stall_s);
  char of[24] = "";
  if (of_steps) std::snprintf(of, sizeof(of), "/%ld", static_cast<long>(config.train.steps));
  std::fprintf(out, "step %5ld%-6s loss %8s  tokens/s %10s  mfu(ceiling) %s  step %9.2f ms%s%s\n", step.step,
               of, loss_text(step.loss).c_str(), human_count(tokens_per_s).c_str(), mfu,
               1e3 * step.step_s, step.warmup ? "  (warm-up)" : "", checkpoint);
  std::fflush(out);
}

namespace {

// tokens/s, at the median step and over the wall, and the step's time.
void print_rate_lines(FILE* out, const RunSummary& s, bool measured) {
  if (!measured)
    std::fprintf(out, "  tokens/s            not measured: no step after warm-up  (%ld tokens/step)\n",
                 s.global_tokens_per_step);
  else
    std::fprintf(out, "  tokens/s            %s  (%ld tokens/step)\n",
                 human_count(s.tokens_per_s).c_str(), s.global_tokens_per_step);
  // tokens/s is DESIGN's, at the median step: a stall that hits fewer than
  // half the steps (a checkpoint, a loader hiccup) is not in it, though the
  // shares below count it. The wall rate beside it, where they part by
  // more than 5 %, says what those cost.
  if (measured && s.timed && s.wall_tokens_per_s > 0 && s.wall_tokens_per_s < 0.95 * s.tokens_per_s)
    std::fprintf(out, "  over the wall       %s tokens/s over the measured steps' wall time: %.0f%% below the median "
                 "step's, the steps that stalled (checkpoints, loader or network hiccups; the shares below)\n",
                 human_count(s.wall_tokens_per_s).c_str(), 100.0 * (1.0 - s.wall_tokens_per_s / s.tokens_per_s));
  if (measured && s.timed)
    std::fprintf(out, "  step time           median %.2f ms  p10 %.2f  p90 %.2f\n",
                 1e3 * s.step_s.median, 1e3 * s.step_s.p10, 1e3 * s.step_s.p90);
  else if (measured)
    std::fprintf(out, "  step time           not measured (report.instrument=false): %.2f s for the measured steps\n",
                 s.measured_wall_s);
}

// FLOPs: the model's per token, achieved, the GEMM ceiling and MFU.
void print_flops_lines(FILE* out, const RunSummary& s, bool measured) {
  std::fprintf(out, "  model FLOPs/token   %s\n", human_count(s.model_flops_per_token).c_str());
  if (measured)
    std::fprintf(out, "  achieved            %sFLOP/s per device\n",
                 human_count(s.achieved_flops_per_s).c_str());
  const bool ceiling = s.gemm_ceiling_flops_per_s > 0;
  if (ceiling)
    std::fprintf(out, "  gemm ceiling        %sFLOP/s  (measured, [%ld x %ld] x [%ld x %ld])\n",
                 human_count(s.gemm_ceiling_flops_per_s).c_str(), s.gemm_m, s.gemm_k, s.gemm_k, s.gemm_n);
  else
    std::fprintf(out, "  gemm ceiling        not measured\n");  // report.gemm_ceiling_s=0, or a warning says why
  if (measured && (ceiling || s.datasheet_peak_flops_per_s > 0)) {
    std::fprintf(out, "  MFU                 ");
    if (ceiling) std::fprintf(out, "%.1f%% of the gemm ceiling", 100.0 * s.mfu_vs_gemm_ceiling);
    if (s.datasheet_peak_flops_per_s > 0)
      std::fprintf(out, "%s%.1f%% of the datasheet peak\n", ceiling ? ", " : "", 100.0 * s.mfu);
    else
      std::fprintf(out, "; no datasheet peak for this device\n");
  } else if (measured) {
    std::fprintf(out, "  MFU                 not known: no gemm ceiling and no datasheet peak for this device\n");
  }
}

// Where the step's time went: the categories' shares, the collectives, the ops.
void print_time_lines(FILE* out, const RunSummary& s, bool measured) {
  if (measured && s.timed)
    std::fprintf(out,
                 "  time shares         compute %.1f%%  comm exposed %.1f%%  data stall %.1f%%  "
                 "ckpt stall %.1f%%  other %.1f%%\n",
                 100.0 * s.compute_share, 100.0 * s.comm_exposed_share, 100.0 * s.data_stall_share,
                 100.0 * s.ckpt_stall_share, 100.0 * s.other_share);
  else if (measured)
    std::fprintf(out, "  time shares         not measured (report.instrument=false)\n");
  if (s.timed && s.comm_s.median > 0 && s.zero_sharded)
    std::fprintf(out, "  ZeRO-1 collectives  median %.2f ms per step (reduce-scatter, all-gather and the ranks' "
                      "agreement), all exposed: not overlapped with backward\n",
                 1e3 * s.comm_s.median);
  else if (s.timed && s.comm_s.median > 0)
    // The share is of the summed time (comm_hidden_share), which the two
    // medians need not give: "0.56 ms, 0.28 ms exposed; overlap hid 14%".
    std::fprintf(out,
                 "  gradient all-reduce median %.2f ms per step, %.2f ms exposed; overlap hid %.0f%% of the "
                 "all-reduce time in all\n",
                 1e3 * s.comm_s.median, 1e3 * s.comm_exposed_s.median, 100.0 * s.comm_hidden_share);
  if (s.op_times_requested && !s.op_times_available) {
    std::fprintf(out, "  compute by op       not available: this engine does not time its ops (report.op_times)\n");
  } else if (s.op_times_available && measured) {
    double total = 0;
    for (const OpTime& op : s.op_seconds_per_step) total += op.seconds;
    std::fprintf(out, "  compute by op       %.2f ms per step (mean of the measured steps; median compute %.2f ms):\n", 1e3 * total,
                 1e3 * s.compute_s.median);
    std::vector<OpTime> ops = s.op_seconds_per_step;
    std::stable_sort(ops.begin(), ops.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
    for (const OpTime& op : ops)
      if (op.seconds > 0)
        std::fprintf(out, "    %-10s %9.2f ms  %5.1f%%\n", op.op.c_str(), 1e3 * op.seconds,
                     total > 0 ? 100.0 * op.seconds / total : 0.0);
  }
}

// What the run read from storage, and the read bandwidth it needs.
void print_storage_read_lines(FILE* out, const RunSummary& s, bool measured) {
  if (s.bytes_read > 0) {
    // Delivered over the steps trained: none (a run stopped before its
    // first step ended) is no window to rate.
    // A resume's bytes include the samples it read to step over to its
    // position: "1.47 MiB in 13 samples" read as 100 bytes a token.
    const std::string stepped_over =
        s.tokens_stepped_over > 0
            ? " (and " + human_count(static_cast<double>(s.tokens_stepped_over)) + " tokens stepped over to resume)"
            : "";
    std::fprintf(out, "  storage read        %s in %s samples%s, %.1f bytes/token, %s\n",
                 human_bytes(static_cast<double>(s.bytes_read)).c_str(),
                 human_count(static_cast<double>(s.samples_read)).c_str(), stepped_over.c_str(), s.bytes_per_token,
                 s.read_gbs > 0 ? (human_rate(s.read_gbs) + " delivered").c_str() : "no step trained to rate it over");
    if (measured && s.required_read_gbs > 0)
      std::fprintf(out, "  read bandwidth need %s at the measured tokens/s, %s at the %s\n",
                   human_rate(s.required_read_gbs_measured).c_str(), human_rate(s.required_read_gbs).c_str(),
                   s.required_read_basis == "compute_ceiling" ? "compute ceiling" : "gemm ceiling");
    else if (measured)  // no ceiling to scale to (report.gemm_ceiling_s=0, or it could not be timed)
      std::fprintf(out, "  read bandwidth need %s at the measured tokens/s\n",
                   human_rate(s.required_read_gbs_measured).c_str());
  }
}

// The checkpoints' line: counts, bytes written, the measured ones' medians.
void print_checkpoints_line(FILE* out, const RunSummary& s, const std::vector<CheckpointRecord>& checkpoints) {
  if (checkpoints.empty()) return;
  const CheckpointRecord* last = nullptr;
  for (const CheckpointRecord& c : checkpoints)
    if (c.status == "committed") last = &c;
  std::fprintf(out, "  checkpoints         %ld committed, %ld skipped%s; %s written",
               static_cast<long>(s.checkpoints_committed), static_cast<long>(s.checkpoints_skipped),
               s.checkpoints_failed > 0 ? (", " + std::to_string(s.checkpoints_failed) + " failed").c_str() : "",
               human_bytes(static_cast<double>(s.bytes_written)).c_str());
  if (last != nullptr)
    std::fprintf(out, ", %s write, stall %.1f ms per checkpoint (median), last: step %ld",
                 human_rate(s.checkpoint_write_gbs).c_str(), 1e3 * s.checkpoint_stall_s,
                 static_cast<long>(last->step));
  std::fprintf(out, "\n");
}

// The summary's figures: tokens/s to the bottleneck.
void print_summary_figures(FILE* out, const RunOutcome& outcome) {
  const RunSummary& s = outcome.summary;
  // No step after warm-up (a run a failure stopped early, or all warm-up):
  // no rate, share or bottleneck was measured, and zeros would read as figures.
  const bool measured = s.measured_steps > 0;
  print_rate_lines(out, s, measured);
  print_flops_lines(out, s, measured);
  if (!outcome.steps.empty()) std::fprintf(out, "  loss                %s -> %s\n", loss_text(s.loss_first).c_str(),
                                           loss_text(s.loss_last).c_str());
  print_time_lines(out, s, measured);
  if (s.optimizer_bytes_per_rank < s.optimizer_bytes_unsharded)
    std::fprintf(out, "  optimizer state     %s per rank (ZeRO-1), %s unsharded\n",
                 human_bytes(static_cast<double>(s.optimizer_bytes_per_rank)).c_str(),
                 human_bytes(static_cast<double>(s.optimizer_bytes_unsharded)).c_str());
  print_storage_read_lines(out, s, measured);
  if (measured && s.timed && s.ranks.size() > 1) {
    const RankSummary& slow = s.ranks[static_cast<size_t>(s.slowest_rank)];
    std::fprintf(out,
                 "  slowest rank        %d (%s): own work %.2f ms of a %.2f ms step (medians), %.0f%% above the other "
                 "ranks' median; the summary is its view\n",
                 slow.rank, slow.host.c_str(), 1e3 * slow.own_s, 1e3 * slow.step_s, 100.0 * s.slowest_rank_excess);
  }
  print_checkpoints_line(out, s, outcome.checkpoints);
  if (!outcome.ceilings_line.empty()) std::fprintf(out, "  ceilings            %s\n", outcome.ceilings_line.c_str());
  if (!s.bottleneck.empty()) std::fprintf(out, "  bottleneck          %s\n", s.bottleneck.c_str());
}

}  // namespace

void print_summary(FILE* out, const RunOutcome& outcome, const std::string& result_path, const std::string& job) {
  const RunSummary& s = outcome.summary;
  std::fprintf(out, "\n%s: %ld measured step%s after %ld warm-up\n",
               job.empty() ? "summary" : ("summary of " + job).c_str(), s.measured_steps,
               s.measured_steps == 1 ? "" : "s", s.warmup_steps);
  // The job a measurement (bench compute, bench instrument) ran in: its
  // figures, of one step, stood above the measurement's own line, where a
  // reader took the first tokens/s for the answer. They are in the result.
  if (job.empty())
    print_summary_figures(out, outcome);
  else
    std::fprintf(out, "  figures             in the result's summary (the job's, not the measurement's, which follows)\n");
  for (const Check& c : outcome.checks)
    std::fprintf(out, "  check %-20s%s  %s\n", c.name.c_str(), c.passed ? "ok" : "FAILED",
                 c.detail.c_str());
  for (const std::string& w : outcome.warnings) std::fprintf(out, "  warning: %s\n", w.c_str());
  std::fprintf(out, "  result              %s\n", result_path.c_str());
  std::fflush(out);
}

}  // namespace trainbench
