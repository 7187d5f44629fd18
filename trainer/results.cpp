#include "trainer/results.h"

#include <algorithm>  // std::min: the write's bound with peers
#include <chrono>     // the write's bound
#include <cstdio>     // std::snprintf: the bound, named
#include <cstdlib>    // std::getenv, std::atoll: the test's step-record limit
#include <memory>     // std::make_shared: the write outlives a call that gave up on it
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <utility>    // std::pair: the bench results a training result is told from

#include "checkpoint/atomic_file.h"       // write_file_atomically
#include "checkpoint/checkpoint_files.h"  // CheckpointError
#include "checkpoint/checkpoint_io.h"     // read_small_file: an input result, regular files only
#include "trainer/hung_storage.h"    // run_for_at_most: the write, bounded
#include "trainer/config.h"          // excerpt: a schema named in a message
#include "trainer/json_text.h"       // json_text: the result is written whatever its strings hold

namespace trainbench {

namespace {

// report.op_times: {op: mean seconds per measured step}, this rank's; null
// when not asked for or when the engine cannot time its ops.
nlohmann::json op_times_json(const RunSummary& s) {
  if (!s.op_times_available || s.measured_steps == 0) return nullptr;  // a mean over no step is not 0
  nlohmann::json ops = nlohmann::json::object();
  for (const OpTime& op : s.op_seconds_per_step) ops[op.op] = op.seconds;
  return ops;
}

// A figure that could not be measured is null, never a misleading 0.
nlohmann::json positive_or_null(double value) {
  return value > 0 ? nlohmann::json(value) : nlohmann::json();
}

// A timed figure, or null where the per-step timers did not run
// (report.instrument=false): not measured is not 0.
nlohmann::json timed(bool measured, const nlohmann::json& value) { return measured ? value : nlohmann::json(); }

nlohmann::json timed_spread(bool measured, const Spread& s) {
  return {{"median", timed(measured, s.median)}, {"p10", timed(measured, s.p10)}, {"p90", timed(measured, s.p90)}};
}

}  // namespace

int64_t max_step_records() {
  static const int64_t limit = [] {
    const char* text = std::getenv("TRAINBENCH_TEST_MAX_STEP_RECORDS");
    const long long value = text != nullptr ? std::atoll(text) : 0;
    return value >= 2 ? static_cast<int64_t>(value) : int64_t{100000};  // the first and the last at least
  }();
  return limit;
}

int64_t max_checkpoint_records() { return std::min<int64_t>(1000, max_step_records()); }

int64_t record_stride(int64_t records, int64_t limit) {
  // The multiples of the stride, and the last record where it is not one.
  const auto listed = [records](int64_t stride) {
    return records <= 0 ? 0 : (records + stride - 1) / stride + ((records - 1) % stride != 0 ? 1 : 0);
  };
  int64_t stride = 1;
  while (listed(stride) > limit) stride *= 2;
  return stride;
}

int64_t step_record_stride(int64_t steps) { return record_stride(steps, max_step_records()); }

nlohmann::json step_result_json(const StepRecord& s, bool measured) {
  return {{"step", s.step},
          {"warmup", s.warmup},
          {"step_s", timed(measured, s.step_s)},
          {"compute_s", timed(measured, s.compute_s)},
          {"comm_s", timed(measured, s.comm_s)},
          {"comm_exposed_s", timed(measured, s.comm_exposed_s)},
          {"data_stall_s", timed(measured, s.data_stall_s)},
          {"ckpt_stall_s", timed(measured, s.ckpt_stall_s)},
          {"other_s", timed(measured, s.other_s)},
          {"loss", s.loss},
          {"grad_norm", s.grad_norm},
          {"lr", s.lr}};
}

namespace {

// DESIGN's "config (fully resolved)": a key left to `auto` says what ran —
// the engine, the communicator and the precision — so that a CPU run's
// config and a GPU run's differ where the runs did (both said "auto"). The
// environment says the same in its own words. train.attention stays as
// asked: `auto` is a request the engine meets per GPU and build (cuDNN's
// fused kernel where it can, else the GEMMs), which a plan of the same
// config is checked against (report.py --compare); environment.attention
// says which kernel ran.
nlohmann::json resolved_config_json(const Config& config, const Environment& env) {
  return config_to_json(with_auto_resolved(config, env));
}

}  // namespace

Config with_auto_resolved(const Config& config, const Environment& env) {
  Config resolved = config;
  const auto resolve = [](std::string& value, const std::string& ran) {
    if (value == "auto" && !ran.empty()) value = ran;
  };
  resolve(resolved.train.device, env.compute_backend);
  resolve(resolved.comm.backend, env.comm_backend);
  resolve(resolved.train.precision, precision_of_auto_on(env.compute_backend));
  return resolved;
}

nlohmann::json build_result_json(const std::string& command_line, const Config& config,
                                 const Environment& env, const RunOutcome& outcome) {
  const RunSummary& s = outcome.summary;
  // The summary's figures over the measured steps: null when none was timed
  // (report.instrument=false) or none came after warm-up (a run a failure
  // stopped early) — not measured, never 0. The steps' own are below.
  const bool measured = s.timed && s.measured_steps > 0;
  nlohmann::json summary = {
      {"tokens_per_s", positive_or_null(s.tokens_per_s)},
      {"wall_tokens_per_s", positive_or_null(s.wall_tokens_per_s)},
      {"measured_wall_s", s.measured_steps > 0 ? nlohmann::json(s.measured_wall_s) : nlohmann::json()},
      {"consistency_check_s", s.consistency_check_s},
      {"global_tokens_per_step", s.global_tokens_per_step},
      {"measured_steps", s.measured_steps},
      {"warmup_steps", s.warmup_steps},
      {"step_s", timed_spread(measured, s.step_s)},
      {"compute_s", timed_spread(measured, s.compute_s)},
      {"comm_s", timed_spread(measured, s.comm_s)},
      {"comm_exposed_s", timed_spread(measured, s.comm_exposed_s)},
      // Of no collective time (one rank) there is no share: null, not 0.
      {"comm_hidden_share", timed(measured && s.comm_s.median > 0, s.comm_hidden_share)},
      {"data_stall_s", timed_spread(measured, s.data_stall_s)},
      {"ckpt_stall_s", timed_spread(measured, s.ckpt_stall_s)},
      {"other_s", timed_spread(measured, s.other_s)},
      {"stall_shares",
       {{"compute", timed(measured, s.compute_share)},
        {"comm_exposed", timed(measured, s.comm_exposed_share)},
        {"data_stall", timed(measured, s.data_stall_share)},
        {"ckpt_stall", timed(measured, s.ckpt_stall_share)},
        {"other", timed(measured, s.other_share)}}},
      {"model_flops_per_token", s.model_flops_per_token},
      {"achieved_flops_per_s_per_device", positive_or_null(s.achieved_flops_per_s)},
      {"gemm_ceiling_flops_per_s", positive_or_null(s.gemm_ceiling_flops_per_s)},
      {"gemm_ceiling_shape", {{"m", s.gemm_m}, {"n", s.gemm_n}, {"k", s.gemm_k}}},
      {"mfu_vs_gemm_ceiling", positive_or_null(s.mfu_vs_gemm_ceiling)},
      {"datasheet_peak_flops_per_s", positive_or_null(s.datasheet_peak_flops_per_s)},
      {"mfu", positive_or_null(s.mfu)},
      {"loss_first", outcome.steps.empty() ? nlohmann::json() : nlohmann::json(s.loss_first)},
      {"loss_last", outcome.steps.empty() ? nlohmann::json() : nlohmann::json(s.loss_last)},
      {"bytes_read", s.bytes_read},
      {"storage_read",
       {{"bytes_read", s.bytes_read},
        {"samples", s.samples_read},
        {"tokens", s.tokens_read},
        {"tokens_stepped_over", s.tokens_stepped_over},
        {"samples_stepped_over", s.samples_stepped_over},
        {"samples_skipped", s.samples_skipped},
        {"shards_skipped", s.shards_skipped},
        {"shards_cut_short", s.shards_cut_short},
        {"shards_without_samples", s.shards_without_samples},
        {"read_gbs", positive_or_null(s.read_gbs)},
        {"samples_per_s", positive_or_null(s.samples_per_s)},
        {"bytes_per_token", positive_or_null(s.bytes_per_token)},
        {"required_read_gbs", positive_or_null(s.required_read_gbs)},
        {"required_read_gbs_measured", positive_or_null(s.required_read_gbs_measured)},
        // The basis of a figure that was not made (no ceiling timed) is none.
        {"required_read_basis", s.required_read_gbs > 0 ? nlohmann::json(s.required_read_basis) : nlohmann::json()}}},
      {"bytes_written", s.bytes_written},
      {"storage_write",
       {{"bytes_written", s.bytes_written},
        {"checkpoints_committed", s.checkpoints_committed},
        {"checkpoints_skipped", s.checkpoints_skipped},
        {"checkpoints_failed", s.checkpoints_failed},
        {"write_gbs", positive_or_null(s.checkpoint_write_gbs)},
        {"stall_s_per_checkpoint",
         s.checkpoints_committed > 0 ? nlohmann::json(s.checkpoint_stall_s) : nlohmann::json()},
        {"drain_s", s.checkpoint_drain_s},
        // Host memory (page-locked under CUDA) a rank's snapshot is copied
        // into: rank 0's, whose slices of the state held alike are the largest.
        {"staging_bytes", s.checkpoint_staging_bytes}}},
      {"optimizer_bytes_per_rank", s.optimizer_bytes_per_rank},
      {"memory_per_rank",
       {{"parameter_bytes", s.memory_per_rank.parameter_bytes},
        {"gradient_bytes", s.memory_per_rank.gradient_bytes},
        {"optimizer_bytes", s.memory_per_rank.optimizer_bytes},
        {"activation_bytes", s.memory_per_rank.activation_bytes},
        {"workspace_bytes", s.memory_per_rank.workspace_bytes},
        {"total_bytes", s.memory_per_rank.total_bytes()}}},
      {"optimizer_bytes_unsharded", s.optimizer_bytes_unsharded},
      {"op_seconds_per_step", op_times_json(s)},
      {"slowest_rank", timed(measured, s.slowest_rank)},
      {"slowest_rank_excess", timed(measured, s.slowest_rank_excess)},
      {"bottleneck", timed(measured, s.bottleneck)},
      // The largest of the ranks' (trainer/cpu_wait.h); null where not measured.
      {"cpu_wait_share", timed(s.cpu_wait_share >= 0, s.cpu_wait_share)},
  };
  nlohmann::json steps = nlohmann::json::array();
  const int64_t stride = step_record_stride(static_cast<int64_t>(outcome.steps.size()));
  for (size_t i = 0; i < outcome.steps.size(); ++i)
    if (i % static_cast<size_t>(stride) == 0 || i + 1 == outcome.steps.size())
      steps.push_back(step_result_json(outcome.steps[i], s.timed));
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSummary& r : s.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"host", r.host},
                     {"step_s", timed(measured, r.step_s)},
                     {"compute_s", timed(measured, r.compute_s)},
                     {"comm_exposed_s", timed(measured, r.comm_exposed_s)},
                     {"data_stall_s", timed(measured, r.data_stall_s)},
                     {"ckpt_stall_s", timed(measured, r.ckpt_stall_s)},
                     {"other_s", timed(measured, r.other_s)},
                     {"own_s", timed(measured, r.own_s)},
                     {"cpu_wait_share", timed(r.cpu_wait_share >= 0, r.cpu_wait_share)}});
  // Past max_checkpoint_records, every k-th and the last (k in
  // checkpoints_every), and those not committed (skipped, failed: what a
  // reader looks for) up to as many again: a long run checkpointing every
  // few steps listed every one (8,000 records, 2 MB of a 40,000-step run's
  // result). The summary counts every checkpoint by status all the same.
  nlohmann::json checkpoints = nlohmann::json::array();
  const int64_t checkpoint_stride =
      record_stride(static_cast<int64_t>(outcome.checkpoints.size()), max_checkpoint_records());
  int64_t uncommitted_listed = 0;
  for (size_t i = 0; i < outcome.checkpoints.size(); ++i) {
    const CheckpointRecord& c = outcome.checkpoints[i];
    const bool sampled = i % static_cast<size_t>(checkpoint_stride) == 0 || i + 1 == outcome.checkpoints.size();
    if (!sampled) {
      if (c.status == "committed" || uncommitted_listed >= max_checkpoint_records()) continue;
      ++uncommitted_listed;
    }
    // A phase the checkpoint never reached (a skipped one copied nothing; a
    // failed write gathered no persist time) is null, not a rate of 0 GB/s.
    const bool copied = c.snapshot_s > 0, persisted = c.persist_s > 0;
    checkpoints.push_back({{"step", c.step},
                           {"status", c.status},
                           {"bytes", c.bytes},
                           {"rank_bytes", c.rank_bytes},
                           {"snapshot_s", timed(copied, c.snapshot_s)},
                           {"persist_s", timed(persisted, c.persist_s)},
                           {"write_gbs", timed(persisted, c.write_gbs)},
                           {"commit_s", timed(c.status == "committed", c.commit_s)},
                           {"stall_s", c.stall_s}});
  }
  nlohmann::json checks = nlohmann::json::array();
  for (const Check& c : outcome.checks)
    checks.push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});

  nlohmann::json result = result_header_json(command_line, config, env);
  result.update({
      {"summary", summary},
      {"steps", steps},
      {"steps_every", stride},
      {"ranks", ranks},
      {"checkpoints", checkpoints},
      {"checkpoints_every", checkpoint_stride},
      {"resume", outcome.resume},
      // Isolation ceilings of `run --ceilings` (trainer/ceilings.h); the GEMM
      // calibration of every run is in the summary.
      {"ceilings", outcome.ceilings},
      {"checks", checks},
      {"warnings", outcome.warnings},
  });
  return result;
}

nlohmann::json result_header_json(const std::string& command_line, const Config& config, const Environment& env) {
  return {
      {"schema", kResultSchema},
      {"version", env.trainbench_version},
      {"command", utf8_escaped(command_line)},  // argv is bytes
      {"config", resolved_config_json(config, env)},
      {"environment", environment_to_json(env)},
  };
}

nlohmann::json read_json_input(const std::string& option, const std::string& path, const std::string& wanted) {
  std::string text;
  try {
    text = checkpoint_io::read_small_file(path, option);
  } catch (const CheckpointError& e) {
    if (e.environment()) throw;  // no descriptor or memory left: the machine's (exit 3)
    throw std::invalid_argument(std::string(e.what()) + "; give " + wanted);
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::invalid_argument(option + " " + path + ": not a JSON file; give " + wanted);
  return j;
}

std::string not_a_training_result(const nlohmann::json& result) {
  const nlohmann::json schema = result.is_object() ? result.value("schema", nlohmann::json()) : nlohmann::json();
  const std::string named = schema.is_string() ? schema.get<std::string>() : "";
  // Exactly this build's schema: another version's figures may mean other
  // things (a prefix check took trainbench.result/v2 as one).
  if (named != kResultSchema)
    return "not a trainbench run or burnin result (schema '" + excerpt(named) + "'; this build reads " +
           kResultSchema + ")";
  for (const auto& [field, command] : {std::pair{"compute_ceiling", "bench compute"},
                                       std::pair{"instrumentation_cost", "bench instrument"}})
    if (result.contains(field))
      return std::string("a `trainbench ") + command + "` result (it has " + field + "), not a run or burnin result";
  return "";
}

void write_file_within(const std::string& path, std::string text, double timeout_s, const std::string& bound_named) {
  // The thread owns what it touches: it may outlive this call.
  struct Write {
    std::string path, text, error;
    bool replaced = false;  // AtomicWriteError's: the rename had happened
  };
  auto write = std::make_shared<Write>(Write{path, std::move(text), "", false});
  const bool finished = run_for_at_most(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), [write] {
    try {
      write_file_atomically(write->path, write->text);
    } catch (const AtomicWriteError& e) {
      write->error = e.what();
      write->replaced = e.replaced;
    } catch (const std::exception& e) {
      write->error = e.what();
    }
  });
  // AtomicWriteError either way: an environment failure (exit 3) wherever it
  // is not caught on the way.
  if (!finished)
    throw AtomicWriteError("writing " + path + " did not finish within " + bound_named +
                           ": the storage is not responding (the write is left behind)");
  if (!write->error.empty()) throw AtomicWriteError(write->error, write->replaced);
}

void write_result_json(const std::string& path, const nlohmann::json& result, const Config& config, bool peers) {
  // With peers, as the checkpoint folder's last listing is: they wait for
  // rank 0 at the job's end, within comm.timeout_s.
  const double bound_s =
      peers ? std::min(config.checkpoint.timeout_s, 0.25 * config.comm.timeout_s) : config.checkpoint.timeout_s;
  char bound_named[160];
  std::snprintf(bound_named, sizeof bound_named,
                peers ? "%g s (checkpoint.timeout_s, or a quarter of comm.timeout_s when less)"
                      : "%g s (checkpoint.timeout_s)",
                bound_s);
  write_file_within(path, json_text(result, 2) + "\n", bound_s, bound_named);
}

}  // namespace trainbench
