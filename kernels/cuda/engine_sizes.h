// What the CUDA engine allocates, as host arithmetic with no CUDA header:
// the engine sizes its buffers from it, and its memory plan is computed from
// it, so the plan is the allocation; in a build without CUDA it still gives
// `trainbench plan` the CUDA engine's per-GPU memory (on a login node).
#pragma once

#include <cstdint>  // int64_t

#include "kernels/cuda/engine_view_carving.h"  // EngineViewSizes
#include "kernels/engine.h"                    // EngineOptions, MemoryPlan
#include "kernels/model_shape.h"               // ModelShape, ParameterLayout

namespace trainbench::cuda {

// Sizes, in elements, of everything the engine allocates; the memory plan and
// the constructor both use them, so the plan is what is allocated.
struct EngineSizes {
  int64_t params = 0, trainable = 0;
  EngineViewSizes views;  // carve_engine_views' allocations
  int64_t tokens = 0;
  int64_t master = 0;  // fp32 master weights: all parameters, or the adapters under LoRA
  // The LM head's GEMMs run on vocab rounded up to 64 rows (llm.c's padded
  // vocabulary): an odd vocabulary (GPT-2's 50257) takes cuBLASLt off its
  // fast kernels (96 vs 800 TFLOP/s measured on an H200, docs/perf.md). The
  // layout keeps `vocab` rows; the engine keeps a zero-padded bf16 copy of the
  // head for the GEMMs, and room after the head's gradient (the last trainable
  // tensor) for the padded rows' weight gradient, which is exactly zero.
  int64_t lm_head_rows = 0;       // vocab rounded up to 64
  int64_t lm_head_copy = 0;       // bf16 elements of the padded copy; 0 when vocab is a multiple of 64
  int64_t lm_head_grad_slack = 0; // fp32 elements after the gradient buffer for the padded rows
};

EngineSizes engine_sizes(const ModelShape& s, const ParameterLayout& layout, int64_t batch,
                         bool fused_attention);

// The gradient buffer: trainable elements padded for ZeRO-1, and at least
// room for the padded LM head's weight gradient.
int64_t gradient_buffer_elements(const EngineSizes& z, int64_t pad_to);

// The plan of an engine with these options whose attention is cuDNN's
// (fused_attention, with its workspace) or the GEMM path.
MemoryPlan cuda_memory_plan(const EngineOptions& options, bool fused_attention,
                            int64_t attention_workspace_bytes);

// The plan before an engine exists (trainbench plan, the CLI's fit check):
// cuDNN attention wherever `cudnn_attention_available` and options.attention
// allow it, with an estimated cuDNN workspace. The engine's own
// memory_plan() counts what it chose and cuDNN's real workspace.
MemoryPlan plan_cuda_memory(const EngineOptions& options, bool cudnn_attention_available);

}  // namespace trainbench::cuda
