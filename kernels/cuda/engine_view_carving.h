// The CUDA engine's views into its activation and scratch allocations, and
// how they are laid out, generic in the 2-byte element type and free of CUDA
// headers: the engine carves them with __nv_bfloat16 (engine_views.h), the
// memory plan (engine_sizes.h) with a stand-in of the same size, in any
// build. One carving both sizes the allocations (run on null bases, it only
// counts) and assigns the views, so the memory plan is the allocation by
// construction.
#pragma once

#include <algorithm>  // std::max
#include <cstdint>    // int64_t
#include <vector>

#include "kernels/cuda/scratch_sizes.h"  // padded_leading_dimension, the ops' scratch sizes
#include "kernels/model_shape.h"         // ModelShape, ParameterLayout
#include "kernels/slice_carver.h"        // SliceCarver

namespace trainbench::cuda {

// Where every view starts, in bytes from its allocation's start (itself
// 256-byte aligned by cudaMalloc). 256 is the most alignment cuBLASLt's
// heuristics ask of an operand (lt_gemm.cu's common_alignment), and covers
// the ops' 16-byte packs and cuDNN's 16-byte tensors. Packed back to back,
// one slice of an odd count (B·H·T² probabilities at an odd T) left every
// later bf16 view 8-byte aligned: scalar paths in the ops, slower GEMMs.
inline constexpr int64_t kViewAlignmentBytes = 256;

template <typename Half>
struct LayerActivationsOf {
  Half* residual_in;    // [N, D]
  Half* attn_norm_out;  // [N, D]
  float* attn_rstd;     // [N]
  Half* q;              // [N, q_dim] after RoPE
  Half* k;              // [N, kv_dim] after RoPE
  Half* v;              // [N, kv_dim]
  Half* probs;          // [B, H, T, T]; GEMM attention only
  float* attn_stats;    // [B, H, T] logsumexp; cuDNN attention only
  Half* attn_out;       // [N, q_dim]
  Half* residual_mid;   // [N, D]
  Half* mlp_norm_out;   // [N, D]
  float* mlp_rstd;      // [N]
  Half* gate;           // [N, F]
  Half* up;             // [N, F]
  Half* swiglu_out;     // [N, F]
};

template <typename Half>
struct FinalActivationsOf {
  Half* residual_out;  // [N, D]
  Half* norm_out;      // [N, D]
  float* rstd;         // [N]
  Half* logits;        // [N, logits_stride]; dlogits after backward
  float* losses;       // [N]
  float* logsumexp;    // [N]
};

template <typename Half>
struct ScratchOf {
  Half* d_residual;  // [N, D]
  Half* d_norm_out;  // [N, D]
  Half* d_q;         // [N, q_dim]
  Half* d_k;         // [N, kv_dim]
  Half* d_v;         // [N, kv_dim]
  Half* d_attn_out;  // [N, q_dim]
  Half* d_probs;     // [B, H, T, T]; GEMM attention only
  Half* d_swiglu;    // [N, F]
  Half* d_gate;      // [N, F]
  Half* d_up;        // [N, F]
  float* rmsnorm;    // rmsnorm_backward_scratch_floats
  double* sum_sq_partials;
  double* sum_sq;    // [1]
  float* grad_scale; // [1]
  float* grad_norm;  // [1]
  Half* lora;        // [N, rank]: dy·B of one adapter
};

// The five allocations the views live in: all null for a counting pass.
template <typename Half>
struct EngineViewBasesOf {
  Half* activations = nullptr;       // bf16 activations kept for backward
  float* activation_stats = nullptr; // their fp32 row statistics
  Half* scratch_bf16 = nullptr;      // backward's bf16 gradients of activations
  float* scratch_fp32 = nullptr;
  double* scratch_fp64 = nullptr;
};

// Elements each allocation must hold.
struct EngineViewSizes {
  int64_t activations = 0, activation_stats = 0, scratch_bf16 = 0, scratch_fp32 = 0, scratch_fp64 = 0;
};

template <typename Half>
struct EngineViewsOf {
  std::vector<LayerActivationsOf<Half>> layers;
  FinalActivationsOf<Half> final_acts{};
  ScratchOf<Half> scratch{};
  std::vector<Half*> lora_h;  // h = x·Aᵀ [N, rank] per adapter, in layout.lora_adapters() order
  EngineViewSizes sizes;      // what the carving used
};

// The views in carving order, each starting on kViewAlignmentBytes. With null
// bases (EngineViewBasesOf<Half>{}) it only counts: the memory plan and the
// allocations take their sizes from that, and the constructor assigns the
// views from the same carving on the real bases. fused_attention: cuDNN's
// SDPA keeps one fp32 logsumexp per (head, query row) instead of the GEMM
// path's B·H·T² bf16 probabilities and their gradient (1 GiB each per layer
// at T = 4096, 32 heads).
// Half: bf16 in the engine, any 2-byte type for counting.
template <typename Half>
EngineViewsOf<Half> carve_engine_views_of(const ModelShape& s, const ParameterLayout& layout, int64_t batch,
                                          bool fused_attention, const EngineViewBasesOf<Half>& bases) {
  static_assert(sizeof(Half) == 2, "bf16 views");
  const int64_t n = batch * s.seq_len, d = s.d_model, f = s.ffn_hidden;
  const int64_t probs = batch * s.n_heads * s.seq_len * s.seq_len;
  SliceCarver<Half> act(bases.activations, kViewAlignmentBytes / sizeof(Half));
  SliceCarver<float> stats(bases.activation_stats, kViewAlignmentBytes / sizeof(float));
  SliceCarver<Half> sb(bases.scratch_bf16, kViewAlignmentBytes / sizeof(Half));
  SliceCarver<float> sf(bases.scratch_fp32, kViewAlignmentBytes / sizeof(float));
  SliceCarver<double> sd(bases.scratch_fp64, kViewAlignmentBytes / sizeof(double));
  EngineViewsOf<Half> v;
  v.layers.resize(s.n_layers);
  for (LayerActivationsOf<Half>& a : v.layers) {
    a.residual_in = act.take(n * d);
    a.attn_norm_out = act.take(n * d);
    a.attn_rstd = stats.take(n);
    a.q = act.take(n * s.q_dim());
    a.k = act.take(n * s.kv_dim());
    a.v = act.take(n * s.kv_dim());
    a.probs = fused_attention ? nullptr : act.take(probs);
    a.attn_stats = fused_attention ? stats.take(n * s.n_heads) : nullptr;
    a.attn_out = act.take(n * s.q_dim());
    a.residual_mid = act.take(n * d);
    a.mlp_norm_out = act.take(n * d);
    a.mlp_rstd = stats.take(n);
    a.gate = act.take(n * f);
    a.up = act.take(n * f);
    a.swiglu_out = act.take(n * f);
  }
  FinalActivationsOf<Half>& fa = v.final_acts;
  fa.residual_out = act.take(n * d);
  fa.norm_out = act.take(n * d);
  fa.logits = act.take(n * padded_leading_dimension(s.vocab));
  fa.rstd = stats.take(n);
  fa.losses = stats.take(n);
  fa.logsumexp = stats.take(n);

  ScratchOf<Half>& sc = v.scratch;
  sc.d_residual = sb.take(n * d);
  sc.d_norm_out = sb.take(n * d);
  sc.d_q = sb.take(n * s.q_dim());
  sc.d_attn_out = sb.take(n * s.q_dim());
  sc.d_k = sb.take(n * s.kv_dim());
  sc.d_v = sb.take(n * s.kv_dim());
  sc.d_probs = fused_attention ? nullptr : sb.take(probs);
  sc.d_swiglu = sb.take(n * f);
  sc.d_gate = sb.take(n * f);
  sc.d_up = sb.take(n * f);
  sc.rmsnorm = sf.take(rmsnorm_backward_scratch_floats(n, d));
  sc.grad_scale = sf.take(1);
  sc.grad_norm = sf.take(1);
  sc.sum_sq_partials = sd.take(sum_of_squares_scratch_doubles(std::max<int64_t>(layout.trainable_params(), 1)));
  sc.sum_sq = sd.take(1);

  const LoraSpec& spec = layout.lora_spec();
  sc.lora = spec.enabled() ? sb.take(n * spec.rank) : nullptr;
  for (int64_t i = 0; i < layout.lora_adapter_count(); ++i) v.lora_h.push_back(act.take(n * spec.rank));
  v.sizes = {act.used(), stats.used(), sb.used(), sf.used(), sd.used()};
  return v;
}

}  // namespace trainbench::cuda
