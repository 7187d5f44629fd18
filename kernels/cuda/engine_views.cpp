#include "kernels/cuda/engine_views.h"

#include <algorithm>  // std::max

#include "kernels/cuda/lt_gemm.h"   // padded_leading_dimension: the logits' rows
#include "kernels/slice_carver.h"  // SliceCarver

namespace trainbench::cuda {

EngineViews carve_engine_views(const ModelShape& s, const ParameterLayout& layout, int64_t batch,
                               bool fused_attention, const EngineViewBases& bases) {
  const int64_t n = batch * s.seq_len, d = s.d_model, f = s.ffn_hidden;
  const int64_t probs = batch * s.n_heads * s.seq_len * s.seq_len;
  SliceCarver<bf16> act(bases.activations, kViewAlignmentBytes / sizeof(bf16));
  SliceCarver<float> stats(bases.activation_stats, kViewAlignmentBytes / sizeof(float));
  SliceCarver<bf16> sb(bases.scratch_bf16, kViewAlignmentBytes / sizeof(bf16));
  SliceCarver<float> sf(bases.scratch_fp32, kViewAlignmentBytes / sizeof(float));
  SliceCarver<double> sd(bases.scratch_fp64, kViewAlignmentBytes / sizeof(double));
  EngineViews v;
  v.layers.resize(s.n_layers);
  for (LayerActivations& a : v.layers) {
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
  FinalActivations& fa = v.final_acts;
  fa.residual_out = act.take(n * d);
  fa.norm_out = act.take(n * d);
  fa.logits = act.take(n * padded_leading_dimension(s.vocab));
  fa.rstd = stats.take(n);
  fa.losses = stats.take(n);
  fa.logsumexp = stats.take(n);

  Scratch& sc = v.scratch;
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
  for (size_t i = 0; i < layout.lora_adapters().size(); ++i) v.lora_h.push_back(act.take(n * spec.rank));
  v.sizes = {act.used(), stats.used(), sb.used(), sf.used(), sd.used()};
  return v;
}

}  // namespace trainbench::cuda
