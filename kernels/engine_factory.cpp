// Chooses the backend named by EngineOptions::device.
#include <algorithm>  // std::max, std::min
#include <cmath>      // std::sqrt: the attention scale cuDNN's graphs are checked with
#include <stdexcept>  // std::runtime_error when a backend is absent
#include <string>     // std::to_string

#include "kernels/cpu/cpu_engine.h"  // CpuEngine, plan_cpu_memory
#include "kernels/cuda/engine_sizes.h"  // plan_cuda_memory: host arithmetic, in every build
#include "kernels/device_info.h"        // cudnn_attention_build_info
#include "kernels/engine.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_engine.h"       // CudaEngine
#include "kernels/cuda/cudnn_attention.h"   // validate_cudnn_attention: the plan's attention
#endif

namespace trainbench {

#ifdef TRAINBENCH_HAVE_CUDA
std::string built_backends() { return "cpu,cuda"; }
#else
std::string built_backends() { return "cpu"; }
#endif

// Engines without a sharded optimizer (ZeRO-1) inherit these.
double TrainingEngine::gradient_sum_of_squares(int64_t, int64_t) {
  throw std::logic_error(std::string("the ") + backend_name() + " engine has no sharded optimizer (ZeRO-1)");
}
void TrainingEngine::optimizer_step_shard(const AdamWSettings&, int64_t, double) {
  throw std::logic_error(std::string("the ") + backend_name() + " engine has no sharded optimizer (ZeRO-1)");
}

ParameterLayout make_layout(const EngineOptions& options) {
  ParameterLayout layout(options.shape, options.lora);
  for (ParamKind kind : options.frozen) layout.set_trainable(kind, false);
  return layout;
}

int64_t padded_count(int64_t n, int64_t multiple) {
  return multiple > 1 ? (n + multiple - 1) / multiple * multiple : n;
}

EngineOptions::OptimizerShard resolve_optimizer_shard(const EngineOptions& options, int64_t trainable) {
  const int64_t begin = options.optimizer_shard.begin;
  const int64_t end = options.optimizer_shard.end < 0 ? trainable : options.optimizer_shard.end;
  if (begin < 0 || begin > end || end > trainable)
    throw std::invalid_argument("optimizer shard [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") is outside the " + std::to_string(trainable) + " trainable parameters");
  return {begin, end};
}

std::vector<ShardPiece> shard_pieces(const ParameterLayout& layout, int64_t begin, int64_t end) {
  std::vector<ShardPiece> pieces;
  for (const ParamTensor& t : layout.tensors()) {
    if (!t.trainable) continue;
    const int64_t lo = std::max(t.grad_offset, begin);
    const int64_t hi = std::min(t.grad_offset + t.numel, end);
    if (lo >= hi) continue;
    const ShardPiece piece{lo, hi, t.offset + (lo - t.grad_offset), t.is_matrix()};
    ShardPiece* last = pieces.empty() ? nullptr : &pieces.back();
    if (last != nullptr && last->hi == piece.lo && last->parameter + (last->hi - last->lo) == piece.parameter &&
        last->decay == piece.decay) {
      last->hi = piece.hi;  // contiguous in both buffers, same decay: one update
      continue;
    }
    pieces.push_back(piece);
  }
  return pieces;
}

namespace {
[[noreturn]] void throw_missing_backend(const std::string& device) {
  throw std::runtime_error("no '" + device + "' engine in this build (backends: " +
                           built_backends() + ")");
}
}  // namespace

MemoryPlan plan_engine_memory(const EngineOptions& options) {
  if (options.device == "cpu") return cpu::plan_cpu_memory(options);
#ifdef TRAINBENCH_HAVE_CUDA
  if (options.device == "cuda") return plan_cuda_engine_memory(options);
#endif
  throw_missing_backend(options.device);
}

std::vector<StateTensor> planned_state_tensors(const EngineOptions& options) {
  const ParameterLayout layout = make_layout(options);
  const int64_t total = layout.total_params(), trainable = layout.trainable_params();
  const EngineOptions::OptimizerShard shard = resolve_optimizer_shard(options, trainable);
  const int64_t moment_bytes = static_cast<int64_t>(sizeof(float)) * (shard.end - shard.begin);
  const bool lora = options.lora.enabled();
  const bool cuda = options.device == "cuda";
  // What CpuEngine::state_tensors and CudaEngine::state_tensors return (the
  // kernels tests compare them): the trained parameters' master, the CUDA
  // engine's bf16 copy of them, a LoRA base only when the checkpoint keeps
  // it, and the AdamW moments of this rank's shard.
  // Under LoRA the adapters: the CUDA engine's trainable parameters, the
  // cpu engine's block after base_params (the same elements).
  const int64_t masters = !lora ? total : cuda ? trainable : total - layout.base_params();
  std::vector<StateTensor> tensors;
  if (lora && options.lora_state_includes_base)
    tensors.push_back({cuda ? "base_bf16" : "base_fp32", (total - masters) * (cuda ? 2 : 4)});
  tensors.push_back({lora ? "lora_fp32" : "master_fp32", masters * 4});
  if (cuda) tensors.push_back({lora ? "lora_bf16" : "params_bf16", masters * 2});
  tensors.push_back({"adam_m", moment_bytes});
  tensors.push_back({"adam_v", moment_bytes});
  return tensors;
}

#ifdef TRAINBENCH_HAVE_CUDA
bool cuda_plan_assumes_cudnn() { return false; }
#else
bool cuda_plan_assumes_cudnn() { return true; }
#endif

std::string cudnn_attention_shape_refusal(const EngineOptions& options) {
  const int64_t head_dim = options.shape.head_dim();
#ifdef TRAINBENCH_HAVE_CUDA
  if (cudnn_attention_build_info().empty()) return "";  // nothing to check against
  // The rank's GPU where one is visible (its graphs differ by architecture:
  // an sm_80 refuses head dimensions Hopper runs), else Hopper's.
  int sm_version = 90;
  if (const GpuInventory gpus = query_gpus(); options.gpu_index >= 0 &&
                                              options.gpu_index < static_cast<int>(gpus.gpus.size())) {
    const GpuInfo& gpu = gpus.gpus[static_cast<size_t>(options.gpu_index)];
    sm_version = gpu.compute_major * 10 + gpu.compute_minor;
  }
  const ModelShape& s = options.shape;
  const cuda::AttentionShape attention{options.micro_batch, s.n_heads, s.n_kv_heads, s.seq_len, head_dim};
  const std::string refused = cuda::validate_cudnn_attention(
      attention, 1.0f / std::sqrt(static_cast<float>(head_dim)), options.deterministic, sm_version);
  if (!refused.empty())
    return "cuDNN's fused attention refuses this shape on sm_" + std::to_string(sm_version) + " (" + refused + ")";
#else
  if (head_dim % 8 != 0 || head_dim > 256)
    return "cuDNN's fused attention takes head dimensions that are multiples of 8 up to 256 (d_model / n_heads = " +
           std::to_string(head_dim) + ")";
#endif
  return "";
}

std::string cuda_plan_attention_fallback(const EngineOptions& options) {
  if (options.attention == "gemm") return "train.attention=gemm";
#ifdef TRAINBENCH_HAVE_CUDA
  if (cudnn_attention_build_info().empty()) return "this build has no cuDNN attention";
#endif
  return cudnn_attention_shape_refusal(options);
}

MemoryPlan plan_cuda_engine_memory(const EngineOptions& options) {
  return cuda::plan_cuda_memory(options, cuda_plan_attention_fallback(options).empty());
}

std::string cuda_engine_shape_problem(const ModelShape& shape) {
  if (shape.head_dim() <= kCudaMaxHeadDim) return "";
  return "head dimension d_model / n_heads = " + std::to_string(shape.head_dim()) + ": the cuda engine runs at most " +
         std::to_string(kCudaMaxHeadDim) + " (its RoPE keeps a head's angles in shared memory); raise model.n_heads";
}

std::unique_ptr<TrainingEngine> make_engine(const EngineOptions& options) {
  if (options.device == "cpu") return std::make_unique<cpu::CpuEngine>(options);
#ifdef TRAINBENCH_HAVE_CUDA
  if (options.device == "cuda") return std::make_unique<cuda::CudaEngine>(options);
#endif
  throw_missing_backend(options.device);
}

}  // namespace trainbench
