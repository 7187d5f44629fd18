#include "kernels/cuda/engine_sizes.h"

#include <algorithm>  // std::max
#include <cstdint>    // uint16_t
#include <stdexcept>  // std::logic_error

#include "kernels/cuda/scratch_sizes.h"  // padded_leading_dimension, kGemmWorkspaceBytes

namespace trainbench::cuda {

namespace {

// bf16's storage: what the plan carves the views with (2 bytes, as __nv_bfloat16).
struct Bf16Storage {
  uint16_t bits;
};
static_assert(sizeof(Bf16Storage) == 2);

// cuDNN's SDPA workspace before its graphs exist (it is known only once they
// are built on a GPU): two fp32 values per (head, query row), and what the
// chosen backward keeps besides (below). The engine allocates what cuDNN
// asks for and its memory_plan() reports that.
int64_t estimated_cudnn_workspace_bytes(const ModelShape& s, int64_t batch, bool deterministic) {
  const int64_t n = batch * s.seq_len;
  const int64_t row_stats = 8 * n * s.n_heads;
  // The fastest backward sums dQ in an fp32 accumulator; the deterministic
  // one on Hopper instead keeps dP in the workspace, bf16, and computes dQ
  // from it with a GEMM (the cuDNN frontend's graph; its sizing pads the
  // queries to 64 and the keys to 128, an upper estimate of the backend's).
  if (!deterministic) return row_stats + 4 * n * s.q_dim();
  return row_stats + batch * s.n_heads * padded_count(s.seq_len, 64) * padded_count(s.seq_len, 128) * 2;
}

}  // namespace

MemoryPlan cuda_memory_plan(const EngineOptions& options, bool fused_attention,
                            int64_t attention_workspace_bytes) {
  const ParameterLayout layout = make_layout(options);
  const EngineSizes z = engine_sizes(options.shape, layout, options.micro_batch, fused_attention);
  MemoryPlan plan;
  // bf16 copy + fp32 master; the master and the gradients padded to
  // pad_buffers_to (ZeRO-1's world blocks, zero_padding_multiple), as the constructor allocates.
  plan.parameter_bytes =
      z.params * 2 + padded_count(z.master, options.pad_buffers_to) * 4 + z.lm_head_copy * 2;
  plan.gradient_bytes = gradient_buffer_elements(z, options.pad_buffers_to) * 4;
  // AdamW m and v over this rank's optimizer shard (all of it without ZeRO-1).
  const EngineOptions::OptimizerShard shard = resolve_optimizer_shard(options, z.trainable);
  plan.optimizer_bytes = (shard.end - shard.begin) * 8;
  plan.activation_bytes = z.views.activations * 2 + z.views.activation_stats * 4;
  plan.workspace_bytes = z.views.scratch_bf16 * 2 + z.views.scratch_fp32 * 4 + z.views.scratch_fp64 * 8 +
                         z.tokens * 4 + kGemmWorkspaceBytes +
                         attention_workspace_bytes;
  return plan;
}

EngineSizes engine_sizes(const ModelShape& s, const ParameterLayout& layout, int64_t batch,
                         bool fused_attention) {
  const int64_t n = batch * s.seq_len;
  EngineSizes z;
  z.params = layout.total_params();
  z.trainable = layout.trainable_params();
  z.master = layout.lora_spec().enabled() ? z.trainable : z.params;
  z.lm_head_rows = padded_leading_dimension(s.vocab);
  if (z.lm_head_rows > s.vocab) {
    z.lm_head_copy = z.lm_head_rows * s.d_model;
    const ParamTensor& head = layout.get(ParamKind::kLmHead);
    if (head.trainable) {
      // The padded rows' gradient runs past the head's: it must be the last
      // trainable tensor, which the layout makes it (LoRA freezes it).
      if (head.grad_offset + head.numel != z.trainable)
        throw std::logic_error("the padded LM head needs its gradient last in the gradient buffer");
      z.lm_head_grad_slack = (z.lm_head_rows - s.vocab) * s.d_model;
    }
  }
  // Counted with a 2-byte stand-in for bf16 (engine_views.h asserts the size).
  z.views = carve_engine_views_of<Bf16Storage>(s, layout, batch, fused_attention, {}).sizes;
  // Inputs and targets, then the inputs' rows grouped by token for the
  // embedding backward: rows [n], group offsets [n + 1], group tokens [n].
  z.tokens = 5 * n + 1;
  return z;
}

int64_t gradient_buffer_elements(const EngineSizes& z, int64_t pad_to) {
  return std::max({padded_count(z.trainable, pad_to), z.trainable + z.lm_head_grad_slack, int64_t{1}});
}

MemoryPlan plan_cuda_memory(const EngineOptions& options, bool cudnn_attention_available) {
  const bool fused = options.attention != "gemm" && cudnn_attention_available;
  const int64_t workspace =
      fused ? estimated_cudnn_workspace_bytes(options.shape, options.micro_batch, options.deterministic) : 0;
  return cuda_memory_plan(options, fused, workspace);
}

}  // namespace trainbench::cuda
