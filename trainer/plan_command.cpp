#include "trainer/plan_command.h"

#include <CLI/CLI.hpp>  // the command line parser

#include <algorithm>  // std::max
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/device_info.h"  // query_gpus: --gpu-memory defaults to the visible GPU's; cudnn_attention_build_info
#include "kernels/engine.h"       // plan_cuda_engine_memory, cuda_plan_assumes_cudnn
#include "trainer/cli.h"          // CommandError, exit codes
#include "trainer/checkpointing.h"  // rank_staging_bytes: what the Checkpointer stages
#include "trainer/cli_validators.h"  // integer_range, number_range: numbers checked as typed
#include "trainer/config.h"
#include "trainer/environment.h"  // trainbench_version: which build planned it
#include "trainer/report.h"       // human_bytes, human_count
#include "trainer/zero_optimizer.h"  // zero_shard: ZeRO-1's cut of the optimizer state
#include "trainer/json_text.h"       // json_text, utf8_escaped: never throws on bytes that are not UTF-8

namespace trainbench {

struct PlanCommand::Options {
  std::string config = "preset:tiny";
  std::vector<std::string> overrides;
  int64_t gpus_per_node = 8;
  double gpu_memory_gib = 0;  // 0: the visible GPU's, else an H200's
  int64_t nodes = 1;
  bool json = false;
};

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// nvidia-smi's 143771 MiB of an H200, when no GPU is visible to ask.
constexpr double kDefaultGpuGiB = 143771.0 / 1024.0;

EngineOptions cuda_options(const Config& config) {
  EngineOptions options;
  options.shape = config.model;
  options.micro_batch = config.train.micro_batch;
  options.device = "cuda";
  options.attention = config.train.attention;
  options.deterministic = config.train.deterministic;
  return options;
}

}  // namespace

PlannedAttention planned_attention(const Config& config) {
  if (const std::string fallback = cuda_plan_attention_fallback(cuda_options(config)); !fallback.empty())
    return {"gemm", fallback, false};
  if (cuda_plan_assumes_cudnn())
    return {"cudnn-sdpa",
            "assumed: this build has no CUDA engine, and a GPU build that found cuDNN runs it "
            "(--set train.attention=gemm plans the GEMM attention)",
            true};
  const std::string built = cudnn_attention_build_info();
  if (built.empty()) return {"gemm", "this build has no cuDNN attention", false};
  return {"cudnn-sdpa", "built: " + built, false};
}

int64_t usable_gpu_bytes(int64_t gpu_bytes) {
  const int64_t reserve = std::max<int64_t>(int64_t{2} << 30, gpu_bytes / 20);
  return std::max<int64_t>(gpu_bytes - reserve, 0);
}

std::vector<FinetunePlanRow> plan_finetune(const Config& config, int64_t gpus_per_node,
                                           int64_t nodes, int64_t usable_bytes) {
  // The config's own errors first (exit 2, as `run` checks them before it
  // looks for an engine): lora.* as `run` checks them, no row for a rank it
  // would refuse.
  Config as_lora = config;
  as_lora.train.mode = "lora";
  as_lora.comm.zero = 0;  // the LoRA row trains without ZeRO-1
  validate_config(as_lora);
  const int64_t world = gpus_per_node * nodes;
  std::vector<FinetunePlanRow> rows;
  auto add = [&](const std::string& mode, int64_t gpus, const EngineOptions& options) {
    FinetunePlanRow row;
    row.mode = mode;
    row.gpus = gpus;
    // The CUDA engine's plan, in any build: the CPU engine's host memory
    // would answer another question.
    row.memory = plan_cuda_engine_memory(options);
    const ParameterLayout layout = make_layout(options);
    row.trainable_params = layout.trainable_params();
    // The CUDA engine's state tensors (CudaEngine::state_tensors): the fp32
    // master and bf16 copy of what it trains (everything, or the adapters)
    // and, under LoRA with checkpoint.include_base, the frozen base in bf16
    // ("base_bf16"); AdamW m and v. A checkpoint holds each once: what the
    // ranks hold alike each writes a slice of, and ZeRO-1's shards add up to
    // the trainable parameters once (held_alike, job_state_bytes).
    const int64_t masters = options.lora.enabled() ? layout.trainable_params() : layout.total_params();
    const int64_t base = options.lora.enabled() && config.checkpoint.include_base
                             ? layout.total_params() - layout.trainable_params()
                             : 0;
    const int64_t parameters = masters * (4 + 2) + base * 2;
    const int64_t adam = layout.trainable_params() * 8;
    row.checkpoint_bytes = parameters + adam;
    // Rank 0's staging (its slices are the first ranks' largest, its ZeRO-1
    // shard the largest), laid out as the Checkpointer lays out the CUDA
    // engine's state tensors.
    const bool zero = options.optimizer_shard.end >= 0;  // ZeRO-1's row: rank 0's shard
    EngineOptions staged_options = options;
    staged_options.lora_state_includes_base = config.checkpoint.include_base;
    Config staged = config;
    staged.comm.zero = zero ? 1 : 0;  // held_alike reads it: ZeRO-1's moments are each rank's own
    row.staging_bytes =
        rank_staging_bytes(planned_state_tensors(staged_options), staged, static_cast<int>(gpus), 0);
    row.fits = row.memory.total_bytes() <= usable_bytes;
    rows.push_back(row);
  };
  const EngineOptions full = cuda_options(config);
  add("full (DDP)", world, full);
  // ZeRO-1: one rank's shard of the optimizer state (the trainer's cut,
  // zero_shard), the buffers padded to whole blocks as `run` pads them,
  // everything else as DDP.
  EngineOptions zero = full;  // rank 0's shard: the largest
  zero.optimizer_shard = zero_shard(make_layout(full).trainable_params(), 0, static_cast<int>(world));
  zero.pad_buffers_to = zero_padding_multiple(static_cast<int>(world));
  add("full (ZeRO-1)", world, zero);
  EngineOptions lora = full;
  lora.lora = lora_spec(as_lora);
  add("lora", gpus_per_node, lora);
  return rows;
}

PlanCommand::PlanCommand(CLI::App& app) : options_(std::make_unique<Options>()) {
  plan_ = app.add_subcommand("plan",
                             "per-GPU memory of full fine-tuning (DDP, ZeRO-1) and LoRA for a config, "
                             "without allocating; which fits");
  plan_->add_option("config", options_->config, "YAML config file or embedded preset name (default: tiny)")
      ->transform(home_path());
  plan_->add_option("--set", options_->overrides, "override a key: section.key=value (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  // Range checks on the typed text: CLI11 alone saturates huge integers and takes nan and inf.
  plan_->add_option("--gpus-per-node", options_->gpus_per_node, "GPUs per node (default 8)")
      ->transform(integer_range(1, 1024));
  plan_->add_option("--gpu-memory", options_->gpu_memory_gib,
                    "GiB per GPU (default: the visible GPU's, else an H200's 140.4)")
      ->check(number_range(0.001, 1048576));
  plan_->add_option("--nodes", options_->nodes, "nodes for full fine-tuning (default 1)")
      ->transform(integer_range(1, 1 << 20));
  plan_->add_flag("--json", options_->json, "print the plan as JSON instead of a table");
}

PlanCommand::~PlanCommand() = default;

bool PlanCommand::parsed() const { return plan_->parsed(); }

namespace {

// The config as plan reads it, refused as `run` would refuse it: the plan
// is the CUDA engine's, so a shape it cannot run has no plan.
Config load_planned_config(const std::string& config_name, const std::vector<std::string>& overrides) {
  const Config config = load_config(config_name, overrides);
  if (const std::string problem = cuda_engine_shape_problem(config.model); !problem.empty())
    throw CommandError{kExitUserError, "model: " + problem};
  if (config.train.attention == "cudnn")
    if (const std::string refusal = cudnn_attention_shape_refusal(cuda_options(config)); !refusal.empty())
      throw CommandError{kExitUserError, "train.attention=cudnn: " + refusal +
                                             "; train.attention auto runs the GEMM attention for it"};
  // The LoRA row's config, checked where its values were set: plan_finetune
  // checks a copy, which has lost them, and blamed the config file or
  // preset for a --set lora.rank that only the LoRA row refuses.
  if (config.train.mode != "lora") {
    std::vector<std::string> as_lora = overrides;
    as_lora.insert(as_lora.end(), {"train.mode=lora", "comm.zero=0"});
    try {
      (void)load_config(config_name, as_lora);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("the LoRA row (plan compares it with full training): ") + e.what());
    }
  }
  return config;
}

// The GPU memory planned for: --gpu-memory, else the visible GPU's, else
// an H200's; and where that figure came from.
struct PlannedGpu {
  int64_t bytes = 0;
  std::string source;
};
PlannedGpu planned_gpu(double gpu_memory_gib) {
  if (gpu_memory_gib > 0) return {static_cast<int64_t>(gpu_memory_gib * kGiB), "--gpu-memory"};
  const GpuInventory gpus = query_gpus();
  if (!gpus.gpus.empty())
    return {gpus.gpus.front().memory_bytes, "the visible " + gpus.gpus.front().name};
  return {static_cast<int64_t>(kDefaultGpuGiB * kGiB), "an H200 (no GPU visible)"};
}

// What `plan` prints, as a table or as JSON.
struct Plan {
  PlannedGpu gpu;
  int64_t usable = 0;  // usable_gpu_bytes(gpu.bytes)
  int64_t gpus_per_node = 0, nodes = 0;
  PlannedAttention attention;
  std::vector<FinetunePlanRow> rows;
};

// `plan --json`: the rows, and what a report needs to check runs against them.
nlohmann::json plan_json(const Config& config, const Plan& plan) {
  // The model planned, as the run results record it: what a report
  // comparing runs with this plan checks them against (the config's name
  // does not say which --set changed it).
  // So is what else sizes the memory: the micro-batch, the attention's
  // workspace (train.attention, train.deterministic) and the adapters.
  const nlohmann::json planned = config_to_json(config);
  // A schema as every other output has: report.py leaves a plan found in a
  // results folder out with a note (compare_finetune.sh writes its
  // plan-*.json beside its runs), where a plan without one stopped the report.
  nlohmann::json out = {{"schema", "trainbench.plan/v1"},
                        {"config", config.origin},
                        {"model", planned.at("model")},
                        {"train", {{"micro_batch", config.train.micro_batch},
                                   {"attention", config.train.attention},
                                   {"deterministic", config.train.deterministic}}},
                        {"lora", planned.at("lora")},
                        // every_steps: whether a job's checkpoints need shared storage
                        // (scripts/scale.sh asks before it submits one).
                        {"checkpoint", {{"include_base", config.checkpoint.include_base},
                                        {"every_steps", config.checkpoint.every_steps}}},
                        {"gpu_memory_bytes", plan.gpu.bytes},
                        {"usable_bytes", plan.usable},
                        {"gpus_per_node", plan.gpus_per_node},
                        {"nodes", plan.nodes},
                        {"attention", {{"kernel", plan.attention.kernel},
                                       {"basis", plan.attention.basis},
                                       {"assumed", plan.attention.assumed}}},
                        {"rows", nlohmann::json::array()}};
  for (const FinetunePlanRow& r : plan.rows)
    out["rows"].push_back({{"mode", r.mode},
                           {"gpus", r.gpus},
                           {"trainable_params", r.trainable_params},
                           {"parameter_bytes", r.memory.parameter_bytes},
                           {"gradient_bytes", r.memory.gradient_bytes},
                           {"optimizer_bytes", r.memory.optimizer_bytes},
                           {"activation_bytes", r.memory.activation_bytes},
                           {"workspace_bytes", r.memory.workspace_bytes},
                           {"total_bytes", r.memory.total_bytes()},
                           {"checkpoint_bytes", r.checkpoint_bytes},
                           {"staging_bytes", r.staging_bytes},
                           {"fits", r.fits}});
  return out;
}

// `plan`'s table, with what its columns mean.
void print_plan_table(const Config& config, const Plan& plan) {
  const ModelShape& m = config.model;
  std::printf("plan: %s — d_model %ld, %ld layers, vocab %ld, seq %ld, micro-batch %ld; lora rank %ld on %s\n",
              config.origin.c_str(), static_cast<long>(m.d_model), static_cast<long>(m.n_layers),
              static_cast<long>(m.vocab), static_cast<long>(m.seq_len),
              static_cast<long>(config.train.micro_batch), static_cast<long>(config.lora.rank),
              config.lora.targets.c_str());
  std::printf("GPU memory %s (%s), usable %s after the reserve for context, NCCL and allocator\n",
              human_bytes(static_cast<double>(plan.gpu.bytes)).c_str(), plan.gpu.source.c_str(),
              human_bytes(static_cast<double>(plan.usable)).c_str());
  std::printf("attention %s (%s)\n", plan.attention.kernel.c_str(), plan.attention.basis.c_str());
  std::printf("%-14s %5s %10s %10s %10s %10s %11s %10s %10s %10s  %s\n", "mode", "GPUs", "trainable",
              "params", "grads", "optimizer", "activations", "total", "checkpoint", "staging", "fits");
  for (const FinetunePlanRow& r : plan.rows)
    std::printf("%-14s %5ld %10s %10s %10s %10s %11s %10s %10s %10s  %s\n", r.mode.c_str(),
                static_cast<long>(r.gpus), human_count(static_cast<double>(r.trainable_params)).c_str(),
                human_bytes(static_cast<double>(r.memory.parameter_bytes)).c_str(),
                human_bytes(static_cast<double>(r.memory.gradient_bytes)).c_str(),
                human_bytes(static_cast<double>(r.memory.optimizer_bytes)).c_str(),
                human_bytes(static_cast<double>(r.memory.activation_bytes + r.memory.workspace_bytes)).c_str(),
                human_bytes(static_cast<double>(r.memory.total_bytes())).c_str(),
                human_bytes(static_cast<double>(r.checkpoint_bytes)).c_str(),
                human_bytes(static_cast<double>(r.staging_bytes)).c_str(), r.fits ? "yes" : "NO");
  std::printf("per GPU; activations include the backward workspace; ZeRO-1 shards AdamW over %ld GPUs; "
              "checkpoint: one checkpoint of the job, every rank's files; staging: the page-locked host memory "
              "a GPU's rank copies its share of a checkpoint into (%ld GPUs a node: %ld times that)\n",
              static_cast<long>(plan.gpus_per_node * plan.nodes), static_cast<long>(plan.gpus_per_node),
              static_cast<long>(plan.gpus_per_node));
  // A preset cut to a few layers of a larger model (h200-llama8b-4l) is
  // planned at the depth it runs; the full model's memory is one --set away.
  if (config.n_layers_full > m.n_layers)
    std::printf("planned at the config's %ld layers, not model.n_layers_full %ld: for the full model's memory, "
                "add --set model.n_layers=%ld\n",
                static_cast<long>(m.n_layers), static_cast<long>(config.n_layers_full),
                static_cast<long>(config.n_layers_full));
}

}  // namespace

int PlanCommand::run(const std::string& command_line) {
  const Options& o = *options_;
  if (o.gpus_per_node < 1)
    throw CommandError{kExitUserError, "--gpus-per-node: must be >= 1 (got " + std::to_string(o.gpus_per_node) + ")"};
  if (o.nodes < 1)
    throw CommandError{kExitUserError, "--nodes: must be >= 1 (got " + std::to_string(o.nodes) + ")"};
  if (o.gpu_memory_gib < 0 || (plan_->count("--gpu-memory") > 0 && o.gpu_memory_gib == 0))
    throw CommandError{kExitUserError, "--gpu-memory: must be > 0 GiB"};
  const Config config = load_planned_config(o.config, o.overrides);
  Plan plan;
  plan.gpu = planned_gpu(o.gpu_memory_gib);
  plan.usable = usable_gpu_bytes(plan.gpu.bytes);
  plan.gpus_per_node = o.gpus_per_node;
  plan.nodes = o.nodes;
  plan.rows = plan_finetune(config, o.gpus_per_node, o.nodes, plan.usable);
  plan.attention = planned_attention(config);
  if (o.json) {
    nlohmann::json out = plan_json(config, plan);
    // Which build planned it and how, as every other output says.
    out["version"] = trainbench_version();
    out["command"] = utf8_escaped(command_line);  // argv is bytes
    std::printf("%s\n", json_text(out, 2).c_str());
  } else {
    print_plan_table(config, plan);
  }
  return kExitOk;
}

}  // namespace trainbench
