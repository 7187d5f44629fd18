// `trainbench plan [CONFIG] [--set k=v]... [--gpus-per-node N] [--gpu-memory GiB]
//  [--nodes M] [--json]`: the per-GPU memory of full fine-tuning (DDP, and
// ZeRO-1 over every GPU of the job) and of LoRA on one node, for the config's
// model shape and batch, without allocating anything — and which of them fits.
// The figures are the CUDA engine's own memory plan (plan_cuda_engine_memory),
// the numbers `run` checks before it allocates; a build without the CUDA
// engine plans too (on a login node), assuming cuDNN attention.
#pragma once

#include <cstdint>  // int64_t
#include <memory>   // std::unique_ptr
#include <string>
#include <vector>

#include "kernels/engine.h"  // MemoryPlan
#include "trainer/config.h"

namespace CLI {
class App;
}

namespace trainbench {

// One way to train the config's model: where its per-GPU memory goes.
struct FinetunePlanRow {
  std::string mode;          // "full (DDP)", "full (ZeRO-1)", "lora"
  int64_t gpus = 1;          // GPUs it runs on (ZeRO-1 shards over them)
  int64_t trainable_params = 0;
  MemoryPlan memory;         // per GPU
  int64_t checkpoint_bytes = 0;  // one checkpoint of the whole job (what its ranks write)
  // Page-locked host memory rank 0 stages its checkpoints in: its slice of
  // the state held alike and its own ZeRO-1 shard, as the Checkpointer lays
  // them out (rank_staging_bytes). A node holds GPUs-per-node times this.
  int64_t staging_bytes = 0;
  bool fits = false;             // memory.total_bytes() <= usable GPU memory
};

// The rows for `config`'s shape and micro-batch: full DDP and ZeRO-1 over
// gpus_per_node × nodes GPUs, LoRA (the config's lora section, whatever
// train.mode says) on one node of gpus_per_node. usable_bytes: what a GPU
// offers the engine (its memory less the reserve, usable_gpu_bytes).
// Throws ConfigError for a lora section `run` would refuse.
std::vector<FinetunePlanRow> plan_finetune(const Config& config, int64_t gpus_per_node,
                                           int64_t nodes, int64_t usable_bytes);

// The attention the plan counts: "cudnn-sdpa" or "gemm", and on what basis
// (built, asked for, or assumed in a build without the CUDA engine).
struct PlannedAttention {
  std::string kernel;
  std::string basis;
  bool assumed = false;
};
PlannedAttention planned_attention(const Config& config);

// GPU memory less what the engine cannot have: the CUDA context, NCCL's
// buffers and the allocator's slack, taken as max(2 GiB, 5 %).
int64_t usable_gpu_bytes(int64_t gpu_bytes);

class PlanCommand {
 public:
  explicit PlanCommand(CLI::App& app);
  ~PlanCommand();
  bool parsed() const;
  int run(const std::string& command_line);

 private:
  CLI::App* plan_ = nullptr;
  struct Options;
  std::unique_ptr<Options> options_;
};

}  // namespace trainbench
