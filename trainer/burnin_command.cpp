#include "trainer/burnin_command.h"

#include <CLI/CLI.hpp>  // the command line parser
#include <optional>
#include <algorithm>  // std::max
#include <stdexcept>  // std::invalid_argument from parse_duration, read_baseline
#include <string>
#include <vector>

#include "comm/launch_detect.h"  // launcher_task_count: the job a baseline must match
#include "kernels/device_info.h" // query_gpus: the engine device auto takes, which a baseline must match
#include "trainer/burnin.h"         // parse_duration, read_baseline, make_burnin_monitor
#include "trainer/cli.h"            // run_with_extension, CommandError
#include "trainer/cli_validators.h"  // non_empty_path, home_path
#include "trainer/config.h"         // load_config: the config is read once here to size the data
#include "trainer/data_source.h"    // synth_samples_per_shard_for_run
#include "trainer/run_extension.h"  // RunExtension

namespace trainbench {

struct BurninCommand::Options {
  std::string config = "preset:tiny";
  std::vector<std::string> overrides;
  std::string duration;
  std::string baseline;
  std::string out;
};

BurninCommand::BurninCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;
  burnin_ = app.add_subcommand(
      "burnin", "run the training job for a duration with burn-in checks; a PASS/FAIL verdict per GPU and node");
  burnin_->add_option("config", o.config, "YAML config file or embedded preset name (default: tiny)")
      ->transform(home_path());
  burnin_->add_option("--set", o.overrides, "override a key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  burnin_->add_option("--duration", o.duration, "how long to train, e.g. 90s, 30m, 2h")->required();
  burnin_->add_option("--baseline", o.baseline,
                      "a known-good result JSON (run or burnin): tokens/s, busbw and checkpoint write GB/s "
                      "more than burnin.baseline_tolerance_pct below it fail")
      ->check(non_empty_path())  // "" ran with no baseline, without a word
      ->transform(home_path());
  burnin_->add_option("--out", o.out, "result JSON path (overrides report.out; default trainbench-burnin.json)")
      ->check(non_empty_path())
      ->transform(home_path());
}

BurninCommand::~BurninCommand() = default;

bool BurninCommand::parsed() const { return burnin_->parsed(); }

int BurninCommand::run(const std::string& command_line) {
  const Options& o = *options_;
  // Bad input ends here, on every rank alike, before any rank starts the job.
  double duration_s = 0;
  std::optional<BaselineFigures> baseline;
  try {
    duration_s = parse_duration(o.duration);
    if (!o.baseline.empty()) baseline = read_baseline(o.baseline);
  } catch (const std::invalid_argument& e) {
    throw CommandError{kExitUserError, e.what()};
  }
  // The burn-in runs to a duration with a train.steps of its own (2^40): the
  // config is checked with it, or a warm-up past the config's step count was
  // refused ("must be < train.steps (40)") for a count the burn-in replaces.
  const std::string burnin_steps = "train.steps=" + std::to_string(int64_t{1} << 40);
  std::vector<std::string> checked = o.overrides;
  checked.push_back(burnin_steps);
  const Config config = load_config(o.config, checked);
  // Under a launcher every rank knows the job's size before MPI is up.
  const int ranks = std::max(1, launcher_task_count());
  if (baseline) {
    // The engine device auto will take, as the run resolves it below.
    const std::string engine = resolve_device(config.train.device, query_gpus());
    const std::string differs = baseline_job_difference(*baseline, config, ranks, engine);
    if (!differs.empty()) throw CommandError{kExitUserError, "--baseline " + o.baseline + ": " + differs};
  }
  // The straggler, drift and throughput checks read every step's own time,
  // which only an instrumented step has: without it every rank's time was
  // "not measured" and the verdict a PASS that checked nothing.
  if (!config.report.instrument)
    throw CommandError{kExitUserError, "report.instrument: false leaves every step untimed, and the burn-in's "
                                       "straggler and drift checks read each step's time: leave it true"};
  std::vector<std::string> overrides = o.overrides;  // the user's first: ours below must win
  // The run ends at the duration, not at a step count. The temporary shards
  // are sized for the config's own step count on the job's ranks (as `run`
  // sizes them; one rank's worth was split over all of them) and read again
  // epoch after epoch, rather than for a step count nobody sets.
  if (config.data.synth_samples_per_shard == 0) {
    std::vector<std::string> own = o.overrides;  // the config's own step count, whatever its warm-up
    own.push_back("train.warmup_steps=0");
    Config sizing = config;
    sizing.train.steps = load_config(o.config, own).train.steps;
    overrides.push_back("data.synth_samples_per_shard=" + std::to_string(synth_samples_per_shard_for_run(sizing, ranks)));
  }
  overrides.push_back(burnin_steps);
  // The golden step is compared bit for bit: every kernel must repeat itself,
  // cuDNN's attention backward included, whatever the config asked.
  overrides.push_back("train.deterministic=true");
  // The burn-in prints its own progress line (elapsed, tokens/s, golden
  // checks); per-step lines only where the config file or a --set asks for
  // them (a file's own progress_every was overridden to 0 without a word).
  if (!config.keys_given.contains("report.progress_every")) overrides.push_back("report.progress_every=0");
  const std::string out = !o.out.empty() ? o.out : config.report.out.empty() ? "trainbench-burnin.json" : "";
  // The baseline is an earlier result, which the result path may replace:
  // not this one, or the next burn-in compares with this run's figures.
  check_result_is_not_input(out.empty() ? config.report.out : out,
                            !o.out.empty() ? "--out" : out.empty() ? "report.out" : "the default --out", o.baseline,
                            "--baseline");
  const std::unique_ptr<RunExtension> monitor = make_burnin_monitor(duration_s, baseline);
  return run_with_extension(o.config, overrides, out, command_line, *monitor);
}

}  // namespace trainbench
