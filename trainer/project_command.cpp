#include "trainer/project_command.h"

#include <unistd.h>     // getpid: this project's checkpoint folder

#include <CLI/CLI.hpp>  // the command line parser
#include <algorithm>    // std::max, std::sort
#include <cmath>        // std::isfinite: figures that are null
#include <cstdio>
#include <ctime>        // the UTC start in the checkpoint folder's name
#include <limits>       // quiet_NaN: a rate without a step
#include <optional>     // the --verify run
#include <set>          // distinct --layers
#include <stdexcept>    // std::invalid_argument from the model
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/collective_bench.h"   // bench_gradient_step, size_sweep: the link at hand
#include "comm/communicator.h"
#include "kernels/engine.h"          // make_layout, plan_engine_memory at the full depth
#include "kernels/flops.h"           // model_flops_per_token at the full depth
#include "trainer/cli.h"             // run_config, make_communicator, CommandError
#include "trainer/cli_validators.h"  // integer_range: numbers checked as typed
#include "trainer/config.h"
#include "trainer/environment.h"     // trainbench_version, device_bench_room_over_ranks
#include "trainer/gradient_sync.h"   // gradient_bucket_bytes
#include "trainer/projection.h"      // the model
#include "trainer/report.h"          // human_count, human_bytes
#include "trainer/json_text.h"       // utf8_escaped: the command line
#include "trainer/results.h"         // write_result_json: the projection, bounded
#include "trainer/statistics.h"      // median over --repeats
#include "trainer/zero_optimizer.h"  // zero_shard: a ZeRO-1 rank's optimizer share at the full depth

namespace trainbench {

struct ProjectCommand::Options {
  std::string config = "preset:tiny";
  std::vector<std::string> overrides;
  std::string layers = "2,4";  // checked by integer_list: "2,,4" is refused, not read as 2,4
  int64_t steps = 0;  // 0: train.steps
  std::string fabric = "ib-ndr400";
  std::string nodes = "1,2,4,8,16,32,64";
  bool verify = false;
  int64_t repeats = 1;
  std::string out = "trainbench-projection.json";
};

namespace {

constexpr int64_t kMaxRepeats = 100;  // --repeats: rounds of every depth

// What one depth's run gave the projection.
struct MeasuredDepth {
  DepthPoint point;
  double hidden_share = 0;
  double gemm_ceiling_flops_per_s = 0;
  double datasheet_peak_flops_per_s = 0;
  double tokens_per_s = 0;
  std::vector<double> round_step_s;  // each --repeats round's step_s: the host's noise
  int64_t tokens_per_rank_step = 0;
  EngineOptions engine_options;  // as the engine was built (device resolved)
  nlohmann::json result;
};


// `round`: which --repeats round (0-based). Each run is a fresh run: with a
// checkpoint.dir (this project's own folder, below), it checkpoints into a
// folder of its own under it (layers-N-round-R), as trainbench refuses a
// folder holding another run's checkpoints (the second depth was refused,
// exit 2).
MeasuredDepth train_at_depth(const Config& base, int64_t layers, int64_t round, std::unique_ptr<Communicator>& comm) {
  Config config = base;
  config.model.n_layers = layers;
  if (!config.checkpoint.dir.empty())
    config.checkpoint.dir += "/layers-" + std::to_string(layers) + "-round-" + std::to_string(round + 1);
  if (comm->rank() == 0) {
    std::printf("\n=== project: training %ld layer(s) ===\n", static_cast<long>(layers));
    std::fflush(stdout);
  }
  RunReport report = run_config(config, comm, RunSettings{"trainbench project (" + std::to_string(layers) + " layers)",
                                                          "", false, false});
  if (report.exit_code != kExitOk)
    throw CommandError{report.exit_code, "project: the " + std::to_string(layers) + "-layer run " +
                                             (report.outcome.failure.happened()
                                                  ? "stopped: " + report.outcome.failure.message
                                                  : std::string("failed a check"))};
  MeasuredDepth m;
  const RunSummary& s = report.outcome.summary;
  m.point.layers = layers;
  m.point.times = measured_step_times(s);
  m.point.checkpoint_bytes = sum_over_ranks(*comm, static_cast<double>(report.state_bytes));
  m.hidden_share = s.comm_hidden_share;
  m.gemm_ceiling_flops_per_s = s.gemm_ceiling_flops_per_s;
  m.datasheet_peak_flops_per_s = s.datasheet_peak_flops_per_s;
  m.tokens_per_s = s.tokens_per_s;
  m.tokens_per_rank_step = s.global_tokens_per_step / comm->world_size();
  m.engine_options = report.engine_options;
  m.result = std::move(report.result);
  return m;
}

// The median over repeated runs of one depth, category by category (the
// rest, e.g. the result JSON, from the last run).
MeasuredDepth median_of(const std::vector<MeasuredDepth>& repeats) {
  MeasuredDepth m = repeats.back();
  for (const StepCategory& c : step_categories()) {
    std::vector<double> values;
    for (const MeasuredDepth& r : repeats) values.push_back(r.point.times.*c.member);
    m.point.times.*c.member = median(values);
  }
  std::vector<double> tokens_per_s, hidden;
  for (const MeasuredDepth& r : repeats) {
    tokens_per_s.push_back(r.tokens_per_s);
    hidden.push_back(r.hidden_share);
  }
  m.tokens_per_s = median(tokens_per_s);
  m.hidden_share = median(hidden);
  for (const MeasuredDepth& r : repeats) m.round_step_s.push_back(r.point.times.step_s);
  return m;
}

EngineOptions at_depth(EngineOptions options, int64_t layers, const Communicator& comm) {
  options.shape.n_layers = layers;
  if (options.optimizer_shard.end >= 0)  // ZeRO-1: this rank's share at the new depth
    options.optimizer_shard = zero_shard(make_layout(options).trainable_params(), comm.rank(), comm.world_size());
  return options;
}

// The all-reduce between the ranks at hand, timed on the trainer's path over
// sizes up to the largest bucket and fitted as latency + bytes / bandwidth.
// On NCCL the buffers go on each rank's GPU (the measured runs' engines are
// gone by now); a GPU without room for the largest bucket and its host copy
// (agreed over ranks) has its link read off the run's own comm_s instead
// (bandwidth only).
Link measure_link(Communicator& comm, const std::vector<int64_t>& bucket_bytes, const StepTimes& measured) {
  if (comm.world_size() < 2) return {};
  int64_t largest = 0, total = 0;
  for (const int64_t b : bucket_bytes) {
    largest = std::max(largest, b);
    total += b;
  }
  const std::vector<int64_t> sizes = [&] {
    std::vector<int64_t> sweep = size_sweep(64 << 10, std::max<int64_t>(largest, 256 << 10), 4);
    if (sweep.back() != largest && largest > sweep.back()) sweep.push_back(largest);
    return sweep;
  }();
  if (!device_bench_room_over_ranks(comm, sizes.back()).empty()) {
    Link link;
    if (measured.comm_s > 0)
      link.busbw_gbs = bus_bandwidth_factor("all_reduce", comm.world_size()) * static_cast<double>(total) /
                       measured.comm_s * 1e-9;
    return link;
  }
  std::vector<double> bytes, seconds;
  const CollectiveBenchOptions options{.warmup_iters = 3, .iters = 10, .raw_path = false};
  for (const int64_t size : sizes)
    for (const CollectiveBenchResult& r : bench_gradient_step(comm, {size}, options))
      if (r.path == "bucketed") {
        // Agreed over ranks (check_ok is every rank's), so every rank stops alike.
        if (const std::string failed = failed_data_check({r}); !failed.empty())
          throw CommandError{kExitCheckFailed, "project: the " + failed + " between the ranks returned wrong "
                                               "values (data check failed): no link to fit; `trainbench bench "
                                               "comm` shows every collective's check"};
        bytes.push_back(static_cast<double>(size));
        seconds.push_back(r.time_s);
      }
  return fit_link(bytes, seconds, comm.world_size());
}

// A figure, or null where there is none (NaN: a rate without a step).
nlohmann::json figure_json(double value) { return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(); }

// A byte count, whole as every other output writes one (a fit's is rounded),
// where it was held as a double for the fits.
nlohmann::json bytes_json(double value) {
  return std::isfinite(value) ? nlohmann::json(std::llround(value)) : nlohmann::json();
}

nlohmann::json times_json(const StepTimes& t) {
  nlohmann::json json;
  for (const StepCategory& c : step_categories()) json[c.name] = t.*c.member;
  return json;
}

// --- the phases of ProjectCommand::run ---

// --fabric; a fabric it does not know is a user error.
Fabric fabric_option(const std::string& text) {
  try {
    return parse_fabric(text);
  } catch (const std::invalid_argument& e) {
    throw CommandError{kExitUserError, std::string("--fabric ") + e.what()};
  }
}

// --layers, ascending; a depth given twice is refused.
std::vector<int64_t> depths_option(const std::string& text) {
  std::vector<int64_t> layers = integer_list_values(text);
  std::sort(layers.begin(), layers.end());
  if (std::set<int64_t>(layers.begin(), layers.end()).size() != layers.size())
    throw CommandError{kExitUserError, "--layers: each depth once (got a repeated one)"};
  return layers;
}

// --nodes, ascending; a count given twice is refused, as a repeated depth is.
std::vector<int> node_counts_option(const std::string& text) {
  std::vector<int> nodes;
  for (int64_t n : integer_list_values(text)) nodes.push_back(static_cast<int>(n));  // at most 2^20
  std::sort(nodes.begin(), nodes.end());
  if (std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end())
    throw CommandError{kExitUserError, "--nodes: each node count once (got a repeated one)"};
  return nodes;
}

// The config with --set and --steps (`steps` 0: not given), refused where no
// fit can come of it.
Config load_project_config(const std::string& path, const std::vector<std::string>& overrides, int64_t steps) {
  std::vector<std::pair<std::string, std::string>> typed;
  if (steps > 0) typed.push_back({"train.steps=" + std::to_string(steps), "--steps " + std::to_string(steps)});
  refuse_report_out_override("project", overrides);
  Config config = load_config_as_typed(path, overrides, typed);
  // The fit is on each depth's per-step times, which an untimed run does not
  // measure: it fitted zeros and exited 4 with a remedy that could not help.
  if (!config.report.instrument)
    throw CommandError{kExitUserError, "report.instrument=false: project fits each depth's per-step times, which "
                                       "an untimed run does not measure; leave it on (its cost is measured by "
                                       "trainbench bench instrument)"};
  return config;
}

// The depth projected to: model.n_layers_full, else model.n_layers. One
// --layers depth projects only to itself.
int64_t full_depth(const Config& config, const std::vector<int64_t>& layers) {
  const int64_t full_layers = config.n_layers_full > 0 ? config.n_layers_full : config.model.n_layers;
  if (layers.size() == 1 && layers.front() != full_layers && config.n_layers_full > 0)
    throw CommandError{kExitUserError, "--layers " + std::to_string(layers.front()) +
                                           ": one depth cannot be fitted; give two (e.g. 2,4) to project to "
                                           "model.n_layers_full " + std::to_string(full_layers)};
  return full_layers;
}

// "2,4": a list as the ranks compare it.
template <typename Number>
std::string comma_list(const std::vector<Number>& values) {
  std::string text;
  for (const Number v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

// The ranks at hand, which the projection takes for one node: returns the
// hosts they are on (1).
int check_ranks_are_one_node(const Fabric& fabric, Communicator& comm) {
  if (fabric.measured && comm.world_size() < 2)
    throw CommandError{kExitUserError, "--fabric measured: needs at least 2 ranks to measure a link (run it under "
                                       "mpirun -np 2 or more)"};
  const int hosts = hosts_of_job(comm);
  // The measurement is one node's: the table's 1-node row is it, and its
  // link the node's own. Ranks over several hosts measured a ring across
  // them, which the model took for the intra-node link, and labelled that
  // step one node's.
  if (hosts > 1)
    throw CommandError{kExitUserError,
                       "project: the " + std::to_string(comm.world_size()) + " ranks are on " +
                           std::to_string(hosts) + " hosts; it measures one node (its ranks on one host) and "
                           "projects the others with --nodes and --fabric: run it on the ranks of one node"};
  return hosts;
}

// Every depth fits before the first trains: a --verify depth (or a deep
// --layers) that does not fit ended the command after the others had
// trained, with no projection written.
void check_depths_fit(const Config& config, const std::vector<int64_t>& to_train, bool verify, int64_t full_layers,
                      Communicator& comm) {
  for (const int64_t l : to_train) {
    Config at_depth_config = config;
    at_depth_config.model.n_layers = l;
    try {
      check_engine_fits(at_depth_config, comm);
    } catch (const CommandError& e) {
      throw CommandError{e.code, "project: " + std::to_string(l) + " layers" +
                                     (verify && l == full_layers ? " (--verify, the full depth)" : "") + ": " +
                                     e.message + (verify && l == full_layers ? "; or leave out --verify" : "")};
    }
  }
}

// With a checkpoint.dir, this project's runs checkpoint under a folder of
// its own there (project-<UTC start>-<rank 0's pid>, the same on every
// rank): a project repeated with the same checkpoint.dir found the first
// one's checkpoints and was refused, as any fresh run is.
std::string project_checkpoint_folder(Communicator& comm) {
  char stamp[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm utc {};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  return broadcast_string(comm, "project-" + std::string(stamp) + "-" + std::to_string(::getpid()), 0);
}

// Each --layers depth's median over the --repeats rounds and, with
// --verify (the full depth last in `to_train`), the full depth's.
struct TrainedDepths {
  std::vector<MeasuredDepth> runs;
  std::optional<MeasuredDepth> verified;
};

TrainedDepths train_depths(const Config& config, const std::vector<int64_t>& to_train, bool verify, int64_t repeats,
                           std::unique_ptr<Communicator>& comm) {
  // Round r trains every depth once (and the full depth for --verify), so a
  // host whose speed drifts (other jobs, clocks) slows every depth alike.
  std::vector<std::vector<MeasuredDepth>> rounds(to_train.size());
  for (int64_t r = 0; r < repeats; ++r)
    for (size_t d = 0; d < to_train.size(); ++d) rounds[d].push_back(train_at_depth(config, to_train[d], r, comm));
  TrainedDepths trained;
  const size_t layers_depths = to_train.size() - (verify ? 1 : 0);
  for (size_t d = 0; d < layers_depths; ++d) trained.runs.push_back(median_of(rounds[d]));
  if (verify) trained.verified = median_of(rounds.back());
  return trained;
}

// What to rerun with where a fit cannot be right (its warnings, exit 4).
std::string rerun_remedy(int64_t repeats) {
  // --repeats stops at kMaxRepeats: past it, only more steps are offered.
  if (repeats >= kMaxRepeats) return "rerun with more --steps per depth";
  const int64_t more_repeats = std::min<int64_t>(kMaxRepeats, std::max<int64_t>(3, 2 * repeats));
  return "rerun with --repeats " + std::to_string(more_repeats) +
         " (each depth's median over interleaved runs) or more --steps per depth";
}

// The step at the projected depth: the --layers runs fitted and evaluated at
// the full depth, or with one depth, that depth as measured.
struct DepthFigures {
  std::vector<DepthPoint> points;  // the --layers runs, ascending
  int64_t full_layers = 0;
  bool fitted = false;
  int64_t projected_layers = 0;
  DepthProjection projection;  // when fitted
  StepTimes at_full;
  double step_s_projected = 0;  // before any clamp
  bool has_step = false;
  double checkpoint_bytes = 0;
};

DepthFigures project_to_full_depth(const std::vector<MeasuredDepth>& runs, int64_t full_layers) {
  DepthFigures d;
  for (const MeasuredDepth& m : runs) d.points.push_back(m.point);
  d.full_layers = full_layers;
  d.fitted = d.points.size() >= 2;
  d.projected_layers = d.fitted ? full_layers : d.points.front().layers;
  if (d.fitted) d.projection = project_depth(d.points, full_layers);
  d.at_full = d.fitted ? d.projection.at_full : d.points.front().times;
  // A step fitted at or below zero is no step: tokens/s, MFU and the scale
  // table are null, never 0, and the command exits 4 (docs/projection.md).
  d.step_s_projected = d.fitted ? d.projection.step_s_fitted : d.at_full.step_s;  // before any clamp
  d.has_step = d.step_s_projected > 0;
  d.checkpoint_bytes = d.fitted ? d.projection.checkpoint_bytes_at_full : d.points.front().checkpoint_bytes;
  return d;
}

// The full model at the projected depth on these ranks.
struct FullModelFigures {
  int64_t trainable_params = 0;
  MemoryPlan memory;
  double flops_per_token = 0;
  double tokens_per_s = 0;  // NaN: no step
  double mfu = 0;           // of the datasheet peak; 0 without one
  double mfu_gemm = 0;      // of the GEMM ceiling; NaN without one
};

FullModelFigures full_model_figures(const MeasuredDepth& deepest, const DepthFigures& depth,
                                    const Communicator& comm) {
  FullModelFigures f;
  const EngineOptions full_options = at_depth(deepest.engine_options, depth.projected_layers, comm);
  const ParameterLayout full_layout = make_layout(full_options);
  f.trainable_params = full_layout.trainable_params();
  f.memory = plan_engine_memory(full_options);
  f.flops_per_token = model_flops_per_token(full_options.shape, full_layout).total();
  const int world = comm.world_size();
  const double tokens_per_step = static_cast<double>(deepest.tokens_per_rank_step) * world;
  constexpr double kNoFigure = std::numeric_limits<double>::quiet_NaN();
  f.tokens_per_s = depth.has_step ? tokens_per_step / depth.at_full.step_s : kNoFigure;
  const double flops_per_device = f.flops_per_token * f.tokens_per_s / world;
  f.mfu = deepest.datasheet_peak_flops_per_s > 0 ? flops_per_device / deepest.datasheet_peak_flops_per_s : 0;
  f.mfu_gemm =
      deepest.gemm_ceiling_flops_per_s > 0 ? flops_per_device / deepest.gemm_ceiling_flops_per_s : kNoFigure;
  return f;
}

// The scale projection: the link between the ranks here, and the step on
// each --nodes count of them.
struct ScaleFigures {
  Link intra;
  ScaleInputs inputs;
  double modeled_comm_here = 0;  // the model's all-reduce per step at the projected depth, here
  std::vector<ScalePoint> table;
};

// The collectives one step's gradient sync makes, in fp32 bytes: DDP's
// buckets, or under ZeRO-1 one over the whole buffer (its step
// reduce-scatters it whole, comm.bucket_mb unused; modelled as the
// all-reduce of the same bytes). DDP's cut paid a ring's latency per bucket
// that ZeRO-1 never makes: at 64 nodes, 47.8 % efficiency with
// comm.bucket_mb=0.25 against 75.8 % with 25, for one and the same step.
std::vector<int64_t> step_collective_bytes(const Config& config, int64_t trainable_params) {
  const bool whole_buffer = config.comm.zero == 1 || !config.comm.overlap;
  return gradient_bucket_bytes(trainable_params, config.comm.bucket_mb, !whole_buffer);
}

// The link between the ranks here, timed over the deepest run's collectives.
Link time_link_here(const Config& config, const MeasuredDepth& deepest, Communicator& comm) {
  const std::vector<int64_t> measured_buckets =
      step_collective_bytes(config, make_layout(deepest.engine_options).trainable_params());
  if (comm.rank() == 0 && comm.world_size() > 1) {
    std::printf("\n=== project: timing the all-reduce between the %d ranks here ===\n", comm.world_size());
    std::fflush(stdout);
  }
  comm.set_context("project: timing the all-reduce");
  return measure_link(comm, measured_buckets, deepest.point.times);
}

// The table over `nodes`; the scale inputs' doubts join `warnings`.
ScaleFigures project_to_nodes(const Config& config, const MeasuredDepth& deepest, const DepthFigures& depth,
                              const FullModelFigures& full, const Fabric& fabric, const std::vector<int>& nodes,
                              Communicator& comm, std::vector<std::string>& warnings) {
  ScaleFigures s;
  s.intra = time_link_here(config, deepest, comm);
  const int world = comm.world_size();
  ScaleInputs& scale = s.inputs;
  scale.step = depth.at_full;
  // No collective measured on one rank: no overlap assumed (the pessimistic end).
  scale.hidden_share = world > 1 ? deepest.hidden_share : 0.0;
  for (const int64_t b : step_collective_bytes(config, full.trainable_params))
    scale.bucket_bytes.push_back(static_cast<double>(b));
  scale.ranks_per_node = world;  // the ranks of one node (check_ranks_are_one_node)
  scale.tokens_per_rank_step = static_cast<double>(deepest.tokens_per_rank_step);
  scale.intra = s.intra;
  if (world > 1 && s.intra.busbw_gbs <= 0)
    throw CommandError{kExitEnvironmentError, "project: the all-reduce between the ranks showed no bandwidth "
                                              "(times did not grow with size); rerun on a quieter machine"};
  // The model against the run's own comm_s: the factor by which training
  // (compute beside the collectives) slows them. Taken where the table's
  // 1-node row is, at the projected depth (the fit's comm_s against the
  // model over that depth's buckets; one depth: the one measured), so that
  // row reproduces the depth projection. Calibrated at the deepest trained
  // depth and applied to the full depth's buckets, the 1-node row's comm_s
  // fell below the fit's, and its exposed share above its own comm_s.
  for (const double b : scale.bucket_bytes) s.modeled_comm_here += ring_all_reduce_s(b, 1, world, s.intra, s.intra);
  if (s.modeled_comm_here > 0 && depth.at_full.comm_s > 0)
    scale.comm_slowdown = depth.at_full.comm_s / s.modeled_comm_here;
  for (std::string& doubt : scale_input_warnings(fabric, scale.comm_slowdown)) warnings.push_back(std::move(doubt));
  s.table = project_scale(scale, fabric, nodes);
  return s;
}

// Everything the console and the JSON say of a projection.
struct Projection {
  int world = 0, hosts = 0;
  TrainedDepths trained;
  DepthFigures depth;
  FullModelFigures full;
  ScaleFigures scale;
  std::vector<std::string> warnings;
};

// The depth fit, category by category, or the one depth measured.
void print_depth_fit(const DepthFigures& depth) {
  if (!depth.fitted) {
    std::printf("depth      one depth measured: no fit; everything below is at %ld layers\n",
                static_cast<long>(depth.projected_layers));
    return;
  }
  std::printf("depth fit  each category = a + b * layers, evaluated at %ld layers\n",
              static_cast<long>(depth.full_layers));
  std::printf("  %-15s", "category");
  for (const DepthPoint& p : depth.points) std::printf(" %10s", ("@" + std::to_string(p.layers)).c_str());
  std::printf(" %11s %11s %11s\n", "a", "b /layer", ("@" + std::to_string(depth.full_layers)).c_str());
  for (size_t c = 0; c < step_categories().size(); ++c) {
    const StepCategory& category = step_categories()[c];
    std::printf("  %-15s", category.name);
    for (const DepthPoint& p : depth.points) std::printf(" %10s", seconds_text(p.times.*category.member).c_str());
    // step_s is not clamped: at or below 0 it is no step (n/a).
    const bool no_figure = category.member == &StepTimes::step_s && !depth.has_step;
    std::printf(" %11s %11s %11s\n", seconds_text(depth.projection.fits[c].intercept).c_str(),
                seconds_text(depth.projection.fits[c].slope).c_str(),
                no_figure ? "n/a" : seconds_text(depth.at_full.*category.member).c_str());
  }
}

// Tokens/s, MFU, checkpoint and memory of the full model on these ranks.
void print_full_model(const Projection& p) {
  const DepthFigures& depth = p.depth;
  const FullModelFigures& full = p.full;
  std::printf("at %ld layers on these %d rank(s):\n", static_cast<long>(depth.projected_layers), p.world);
  const char* see_warnings = p.warnings.empty() ? "" : "; see the warnings below";
  if (depth.has_step) {
    std::printf("  tokens/s        %s (step %s%s)\n", human_count(full.tokens_per_s).c_str(),
                seconds_text(depth.at_full.step_s).c_str(), see_warnings);
    char mfu_text[64] = "n/a (no datasheet peak for this device)";
    if (full.mfu > 0) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%% of the datasheet peak", 100 * full.mfu);
    // No ceiling (report.gemm_ceiling_s=0) is n/a, not 0 %.
    char gemm_text[96] = "n/a against the GEMM ceiling (not timed)";
    if (std::isfinite(full.mfu_gemm))
      std::snprintf(gemm_text, sizeof gemm_text, "%.1f%% of the GEMM ceiling (%s FLOP/s)", 100 * full.mfu_gemm,
                    human_count(p.trained.runs.back().gemm_ceiling_flops_per_s).c_str());
    std::printf("  MFU             %s; %s, %s FLOPs per token\n", mfu_text, gemm_text,
                human_count(full.flops_per_token).c_str());
  } else {
    std::printf("  tokens/s        n/a: step_s fits to %s%s\n", seconds_text(depth.step_s_projected).c_str(),
                see_warnings);
    std::printf("  MFU             n/a (no step); %s FLOPs per token\n", human_count(full.flops_per_token).c_str());
  }
  // The state alone: each rank's data position (its shuffle buffers) comes on
  // top, the same at every depth (a 4-layer tiny checkpoint: 3.01 MiB state,
  // 5.00 MiB written).
  std::printf("  checkpoint      %s of state (all ranks; the data positions besides)\n",
              human_bytes(depth.checkpoint_bytes).c_str());
  // Per rank: a GPU's memory on the cuda engine, host memory on the cpu
  // engine (whose plan is its own, not the one `plan` prints).
  const MemoryPlan& full_memory = full.memory;
  std::printf("  memory per rank %s (parameters %s, gradients %s, optimizer %s, activations %s, workspace %s)\n",
              human_bytes(static_cast<double>(full_memory.total_bytes())).c_str(),
              human_bytes(static_cast<double>(full_memory.parameter_bytes)).c_str(),
              human_bytes(static_cast<double>(full_memory.gradient_bytes)).c_str(),
              human_bytes(static_cast<double>(full_memory.optimizer_bytes)).c_str(),
              human_bytes(static_cast<double>(full_memory.activation_bytes)).c_str(),
              human_bytes(static_cast<double>(full_memory.workspace_bytes)).c_str());
}

// The fabric, the link here and the table over the node counts.
void print_scale(const Projection& p, const Fabric& fabric) {
  const DepthFigures& depth = p.depth;
  const ScaleFigures& scale = p.scale;
  const long projected_layers = static_cast<long>(depth.projected_layers);
  std::printf("scale      fabric %s: %s\n", fabric.name.c_str(), fabric.assumption.c_str());
  if (p.world > 1)
    std::printf("  link here       ring busbw %.3f GB/s, %.1f us per ring step (fitted over sizes); the model "
                "gives %s of all-reduce per step at %ld layers, training %s %s: x%.2f kept at every size\n",
                scale.intra.busbw_gbs, scale.intra.hop_latency_s * 1e6, seconds_text(scale.modeled_comm_here).c_str(),
                projected_layers, depth.fitted ? "(the depth fit)" : "measured",
                seconds_text(depth.at_full.comm_s).c_str(), scale.inputs.comm_slowdown);
  std::printf("  gradients       %s in %zu bucket(s) at %ld layers; overlap: %.0f%% of the all-reduce hidden "
              "behind backward%s\n",
              human_bytes(static_cast<double>(p.full.trainable_params) * 4).c_str(), scale.inputs.bucket_bytes.size(),
              projected_layers, 100 * scale.inputs.hidden_share,
              p.world > 1 ? " (measured)" : " (one rank: none measured, none assumed)");
  if (!depth.has_step) {
    std::printf("  no table: the step at %ld layers is not positive (see the warnings below)\n", projected_layers);
    return;
  }
  std::printf("  %6s %6s %11s %11s %11s %11s %12s %10s\n", "nodes", "ranks", "busbw GB/s", "comm", "exposed", "step",
              "tokens/s", "efficiency");
  for (const ScalePoint& point : scale.table) {
    char efficiency[32] = "n/a";
    if (std::isfinite(point.scaling_efficiency))
      std::snprintf(efficiency, sizeof efficiency, "%.1f%%", 100 * point.scaling_efficiency);
    std::printf("  %6d %6d %11.3f %11s %11s %11s %12s %10s\n", point.nodes, point.ranks, point.busbw_gbs,
                seconds_text(point.comm_s).c_str(), seconds_text(point.comm_exposed_s).c_str(),
                seconds_text(point.step_s).c_str(),
                std::isfinite(point.tokens_per_s) ? human_count(point.tokens_per_s).c_str() : "n/a", efficiency);
  }
}

void print_projection(const Projection& p, const Config& config, const Fabric& fabric) {
  const char* bar = "----------------------------------------------------------------------------";
  std::printf("\n%s\nprojection of %s (trainbench project)\n%s\n", bar, config.origin.c_str(), bar);
  std::printf("measured   %d rank(s) on %d node(s), %s engine, depths:", p.world, p.hosts,
              p.trained.runs.back().engine_options.device.c_str());
  for (const DepthPoint& point : p.depth.points) std::printf(" %ld", static_cast<long>(point.layers));
  std::printf(" layers\n");
  print_depth_fit(p.depth);
  print_full_model(p);
  print_scale(p, fabric);
  std::printf("assumptions (docs/projection.md):\n"
              "  - every layer has the same shapes, so each category grows linearly with depth (a + b * layers)\n"
              "  - the overlap behaves as measured: the same share of the all-reduce hides behind backward,\n"
              "    at most the backward pass (2/3 of compute)\n"
              "  - all-reduce is NCCL's ring: busbw = algbw * 2(n-1)/n as nccl-tests, one hop latency per ring step;\n"
              "    training slows the collectives by the factor measured here at every size\n"
              "  - each GPU has its own NIC; compute, data and checkpoint stalls per rank do not change with nodes\n");
}

// The JSON's `depth`: the fits and the full model's figures.
nlohmann::json depth_json(const DepthFigures& depth, const FullModelFigures& full) {
  nlohmann::json fits = nlohmann::json::object();
  for (size_t c = 0; depth.fitted && c < step_categories().size(); ++c)
    fits[step_categories()[c].name] = {{"a", depth.projection.fits[c].intercept},
                                       {"b_per_layer", depth.projection.fits[c].slope}};
  nlohmann::json depth_step_json = times_json(depth.at_full);
  if (!depth.has_step) depth_step_json["step_s"] = nullptr;  // clamped to 0 above: no step, no figure
  return {{"fitted", depth.fitted},
          {"layers", depth.projected_layers},
          {"fits", fits},
          {"step", depth_step_json},
          {"step_s_fitted", depth.fitted ? figure_json(depth.projection.step_s_fitted) : nlohmann::json()},
          {"tokens_per_s", figure_json(full.tokens_per_s)},
          {"model_flops_per_token", full.flops_per_token},
          // null without a step, or without a datasheet peak (CPUs): not 0.
          {"mfu", depth.has_step && full.mfu > 0 ? nlohmann::json(full.mfu) : nlohmann::json()},
          {"mfu_vs_gemm_ceiling", figure_json(full.mfu_gemm)},
          {"checkpoint_bytes", bytes_json(depth.checkpoint_bytes)},
          {"memory_per_gpu_bytes", full.memory.total_bytes()}};
}

// The JSON's `scale`: the fabric, the link here and the table.
nlohmann::json scale_json(const ScaleFigures& scale, const Fabric& fabric, bool has_step) {
  nlohmann::json json_table = nlohmann::json::array();
  for (const ScalePoint& p : scale.table)
    json_table.push_back({{"nodes", p.nodes}, {"ranks", p.ranks}, {"busbw_gbs", p.busbw_gbs}, {"comm_s", p.comm_s},
                          {"comm_exposed_s", p.comm_exposed_s}, {"step_s", p.step_s},
                          {"tokens_per_s", figure_json(p.tokens_per_s)},
                          {"scaling_efficiency", figure_json(p.scaling_efficiency)}});
  if (!has_step) json_table = nullptr;  // built on a step that is not there
  // The figures the table took: with `measured`, the ring fitted here (they
  // were written as the fabric's placeholder 0s).
  const Link inter = between_nodes(scale.inputs, fabric);
  return {{"fabric", {{"name", fabric.name}, {"gbs_per_gpu", inter.busbw_gbs},
                      {"hop_latency_s", inter.hop_latency_s}, {"assumption", fabric.assumption}}},
          {"link_here", {{"busbw_gbs", scale.intra.busbw_gbs}, {"hop_latency_s", scale.intra.hop_latency_s}}},
          {"modeled_comm_s_here", scale.modeled_comm_here},
          {"comm_slowdown", scale.inputs.comm_slowdown},
          {"bucket_bytes", [&scale] {
             nlohmann::json buckets = nlohmann::json::array();
             for (const double b : scale.inputs.bucket_bytes) buckets.push_back(bytes_json(b));
             return buckets;
           }()},
          {"comm_hidden_share", scale.inputs.hidden_share},
          {"table", json_table}};
}

nlohmann::json projection_json(const Projection& p, const Config& config, const Fabric& fabric) {
  nlohmann::json measured = nlohmann::json::array();
  for (const MeasuredDepth& m : p.trained.runs)
    measured.push_back({{"layers", m.point.layers}, {"step", times_json(m.point.times)},
                        {"tokens_per_s", m.tokens_per_s}, {"checkpoint_bytes", bytes_json(m.point.checkpoint_bytes)},
                        {"comm_hidden_share", m.hidden_share}, {"round_step_s", m.round_step_s},
                        {"result", m.result}});
  return {
      {"schema", "trainbench.projection/v1"},
      {"version", trainbench_version()},
      {"config", config_to_json(config)},
      {"ranks", p.world},
      {"nodes", p.hosts},
      {"ranks_per_node", p.world},
      {"measured", measured},
      {"depth", depth_json(p.depth, p.full)},
      {"scale", scale_json(p.scale, fabric, p.depth.has_step)},
      {"warnings", p.warnings},
  };
}

// --verify: the full depth as trained against its projection, printed;
// returns the JSON's `verify`.
nlohmann::json report_verification(const MeasuredDepth& verified, const DepthFigures& depth, double tokens_per_s) {
  const StepTimes& m = verified.point.times;
  char error_text[32] = "n/a";
  if (depth.has_step)
    std::snprintf(error_text, sizeof error_text, "%+.1f%%", 100 * relative_error(tokens_per_s, verified.tokens_per_s));
  std::printf("verify     %ld layers measured: tokens/s %s (projected %s, error %s)\n",
              static_cast<long>(depth.full_layers), human_count(verified.tokens_per_s).c_str(),
              depth.has_step ? human_count(tokens_per_s).c_str() : "n/a", error_text);
  nlohmann::json errors = nlohmann::json::object();
  for (const StepCategory& c : step_categories()) {
    const bool no_figure = c.member == &StepTimes::step_s && !depth.has_step;  // clamped to 0: no step
    std::printf("  %-15s measured %11s projected %11s\n", c.name, seconds_text(m.*c.member).c_str(),
                no_figure ? "n/a" : seconds_text(depth.at_full.*c.member).c_str());
    errors[c.name] = no_figure ? nlohmann::json() : figure_json(relative_error(depth.at_full.*c.member, m.*c.member));
  }
  return {{"layers", depth.full_layers},
          {"step", times_json(m)},
          {"tokens_per_s", verified.tokens_per_s},
          {"tokens_per_s_error", figure_json(relative_error(tokens_per_s, verified.tokens_per_s))},
          {"checkpoint_bytes", bytes_json(verified.point.checkpoint_bytes)},
          {"round_step_s", verified.round_step_s},
          {"errors", errors},
          {"result", verified.result}};
}

}  // namespace

ProjectCommand::ProjectCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  Options& o = *options_;
  project_ = app.add_subcommand(
      "project", "run the config at two depths and project the full model's tokens/s, MFU, checkpoint size and "
                 "memory, then its tokens/s and scaling efficiency on 1..64 nodes of a fabric");
  project_->add_option("config", o.config, "YAML config file or embedded preset (default: tiny)")
      ->transform(home_path());
  project_->add_option("--set", o.overrides, "override a key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  project_->add_option("--layers", o.layers,
                       "depths to train, comma-separated (default 2,4); one depth: no depth fit, the scale "
                       "projection at that depth")
      ->transform(integer_list(1, kMaxLayers));
  project_->add_option("--steps", o.steps, "optimizer steps per depth (overrides train.steps)")
      ->transform(integer_range(1, 1000000000));
  project_->add_option("--fabric", o.fabric,
                       "the network between nodes: ib-ndr400, roce400, measured (like the ranks here) or "
                       "<GB/s>,<us> per GPU (default ib-ndr400)");
  project_->add_option("--nodes", o.nodes, "node counts of the scale table (default 1,2,4,8,16,32,64)")
      ->transform(integer_list(1, 1 << 20));
  project_->add_flag("--verify", o.verify,
                     "also train the full depth (in every --repeats round) and print the depth projection's error");
  project_->add_option("--repeats", o.repeats,
                       "train every depth this many times, the depths interleaved, and take the median of each "
                       "category: cancels a host's drifting speed (default 1)")
      ->transform(integer_range(1, kMaxRepeats));
  project_->add_option("--out", o.out, "projection JSON (default trainbench-projection.json)")
      ->transform(home_path());
}

ProjectCommand::~ProjectCommand() = default;

bool ProjectCommand::parsed() const { return project_->parsed(); }

int ProjectCommand::run(const std::string& command_line) {
  const Options& o = *options_;
  // Every user error before anything trains.
  const Fabric fabric = fabric_option(o.fabric);
  const std::vector<int64_t> layers = depths_option(o.layers);
  const std::vector<int> nodes = node_counts_option(o.nodes);
  check_result_path(o.out);
  Config config = load_project_config(o.config, o.overrides, o.steps);
  const int64_t full_layers = full_depth(config, layers);

  std::unique_ptr<Communicator> comm = make_communicator(config.comm.backend, config.comm.timeout_s);
  check_ranks_run_the_same_job(config,
                               "--layers " + comma_list(layers) + " --fabric " + o.fabric + " --nodes " +
                                   comma_list(nodes) + " --repeats " + std::to_string(o.repeats) +
                                   (o.verify ? " --verify" : ""),
                               *comm);
  Projection p;
  p.hosts = check_ranks_are_one_node(fabric, *comm);
  p.world = comm->world_size();

  // --- depth ---
  std::vector<int64_t> to_train = layers;
  const bool verify = o.verify && layers.size() >= 2 &&
                      std::find(layers.begin(), layers.end(), full_layers) == layers.end();
  if (verify) to_train.push_back(full_layers);
  check_depths_fit(config, to_train, verify, full_layers, *comm);
  if (!config.checkpoint.dir.empty()) config.checkpoint.dir += "/" + project_checkpoint_folder(*comm);
  p.trained = train_depths(config, to_train, verify, o.repeats, comm);
  const MeasuredDepth& deepest = p.trained.runs.back();
  p.depth = project_to_full_depth(p.trained.runs, full_layers);
  const std::string remedy = rerun_remedy(o.repeats);
  if (p.depth.fitted) p.warnings = depth_projection_warnings(p.depth.points, p.depth.projection, full_layers, remedy);
  p.full = full_model_figures(deepest, p.depth, *comm);
  if (std::string beyond = projected_mfu_warning(p.full.mfu, p.full.mfu_gemm, remedy); !beyond.empty())
    p.warnings.push_back(std::move(beyond));

  // --- scale ---
  p.scale = project_to_nodes(config, deepest, p.depth, p.full, fabric, nodes, *comm, p.warnings);

  if (comm->rank() != 0) return kExitOk;
  print_projection(p, config, fabric);
  nlohmann::json result = projection_json(p, config, fabric);
  // The config as given (auto as auto: each measured run's result has it
  // resolved) and the options that are not in it (--layers, --repeats, ...).
  result["command"] = utf8_escaped(command_line);  // argv is bytes
  if (o.verify && !p.trained.verified)
    std::printf("verify     nothing to verify: %s\n",
                p.depth.fitted ? "the full depth is one of --layers" : "one depth, no fit");
  if (p.trained.verified) result["verify"] = report_verification(*p.trained.verified, p.depth, p.full.tokens_per_s);
  for (const std::string& warning : p.warnings) std::printf("warning    %s\n", warning.c_str());
  // Bounded: storage that stopped responding under --out held it for ever.
  write_result_json(o.out, result, config, false);
  std::printf("result     %s\n", o.out.c_str());
  if (!p.depth.has_step)
    throw CommandError{kExitCheckFailed, "project: step_s at " + std::to_string(p.depth.projected_layers) +
                                             " layers fits to " + seconds_text(p.depth.step_s_projected) +
                                             " (<= 0): no tokens/s, MFU or scale table (null in " + o.out + "); " +
                                             remedy};
  return kExitOk;
}

}  // namespace trainbench
