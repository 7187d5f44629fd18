// The CUDA engine's views into its activation and scratch allocations, and
// how they are laid out. One carving (carve_engine_views in cuda_engine.cu)
// both sizes the allocations (run on null bases, it only counts) and assigns
// the views, so the memory plan is the allocation by construction.
#pragma once

#include <cstdint>  // int64_t
#include <vector>

#include "kernels/cuda/cuda_ops.h"  // bf16
#include "kernels/model_shape.h"    // ModelShape, ParameterLayout

namespace trainbench::cuda {

// Where every view starts, in bytes from its allocation's start (itself
// 256-byte aligned by cudaMalloc). 256 is the most alignment cuBLASLt's
// heuristics ask of an operand (lt_gemm.cu's common_alignment), and covers
// the ops' 16-byte packs and cuDNN's 16-byte tensors. Packed back to back,
// one slice of an odd count (B·H·T² probabilities at an odd T) left every
// later bf16 view 8-byte aligned: scalar paths in the ops, slower GEMMs.
inline constexpr int64_t kViewAlignmentBytes = 256;

struct LayerActivations {
  bf16* residual_in;    // [N, D]
  bf16* attn_norm_out;  // [N, D]
  float* attn_rstd;     // [N]
  bf16* q;              // [N, q_dim] after RoPE
  bf16* k;              // [N, kv_dim] after RoPE
  bf16* v;              // [N, kv_dim]
  bf16* probs;          // [B, H, T, T]; GEMM attention only
  float* attn_stats;    // [B, H, T] logsumexp; cuDNN attention only
  bf16* attn_out;       // [N, q_dim]
  bf16* residual_mid;   // [N, D]
  bf16* mlp_norm_out;   // [N, D]
  float* mlp_rstd;      // [N]
  bf16* gate;           // [N, F]
  bf16* up;             // [N, F]
  bf16* swiglu_out;     // [N, F]
};

struct FinalActivations {
  bf16* residual_out;  // [N, D]
  bf16* norm_out;      // [N, D]
  float* rstd;         // [N]
  bf16* logits;        // [N, logits_stride]; dlogits after backward
  float* losses;       // [N]
  float* logsumexp;    // [N]
};

struct Scratch {
  bf16* d_residual;  // [N, D]
  bf16* d_norm_out;  // [N, D]
  bf16* d_q;         // [N, q_dim]
  bf16* d_k;         // [N, kv_dim]
  bf16* d_v;         // [N, kv_dim]
  bf16* d_attn_out;  // [N, q_dim]
  bf16* d_probs;     // [B, H, T, T]; GEMM attention only
  bf16* d_swiglu;    // [N, F]
  bf16* d_gate;      // [N, F]
  bf16* d_up;        // [N, F]
  float* rmsnorm;    // rmsnorm_backward_scratch_floats
  double* sum_sq_partials;
  double* sum_sq;    // [1]
  float* grad_scale; // [1]
  float* grad_norm;  // [1]
  bf16* lora;        // [N, rank]: dy·B of one adapter
};

// The five allocations the views live in: all null for a counting pass.
struct EngineViewBases {
  bf16* activations = nullptr;       // bf16 activations kept for backward
  float* activation_stats = nullptr; // their fp32 row statistics
  bf16* scratch_bf16 = nullptr;      // backward's bf16 gradients of activations
  float* scratch_fp32 = nullptr;
  double* scratch_fp64 = nullptr;
};

// Elements each allocation must hold.
struct EngineViewSizes {
  int64_t activations = 0, activation_stats = 0, scratch_bf16 = 0, scratch_fp32 = 0, scratch_fp64 = 0;
};

struct EngineViews {
  std::vector<LayerActivations> layers;
  FinalActivations final_acts{};
  Scratch scratch{};
  std::vector<bf16*> lora_h;  // h = x·Aᵀ [N, rank] per adapter, in layout.lora_adapters() order
  EngineViewSizes sizes;      // what the carving used
};

// The views in carving order, each starting on kViewAlignmentBytes. With null
// bases (EngineViewBases{}) it only counts: the memory plan and the
// allocations take their sizes from that, and the constructor assigns the
// views from the same carving on the real bases. fused_attention: cuDNN's
// SDPA keeps one fp32 logsumexp per (head, query row) instead of the GEMM
// path's B·H·T² bf16 probabilities and their gradient (1 GiB each per layer
// at T = 4096, 32 heads).
EngineViews carve_engine_views(const ModelShape& shape, const ParameterLayout& layout, int64_t batch,
                               bool fused_attention, const EngineViewBases& bases);

}  // namespace trainbench::cuda
