#include "kernels/flops.h"

namespace trainbench {

FlopsPerToken model_flops_per_token(const ModelShape& s, const ParameterLayout& layout) {
  FlopsPerToken flops;
  for (const ParamTensor& t : layout.tensors()) {
    // Every matrix but the embedding (a lookup, not a GEMM) is a projection.
    if (!t.is_matrix() || t.kind == ParamKind::kTokenEmbedding) continue;
    const double elements = static_cast<double>(t.numel);
    flops.gemm_forward += 2.0 * elements;
    flops.gemm_backward += 2.0 * elements;            // d_input = d_out · W
    if (t.trainable) flops.gemm_backward += 2.0 * elements;  // d_W = d_outᵀ · input
  }
  const double per_layer_attention = 2.0 * 2.0 * static_cast<double>(s.seq_len) * s.q_dim();
  flops.attention_forward = per_layer_attention * static_cast<double>(s.n_layers);
  flops.attention_backward = 2.0 * flops.attention_forward;
  return flops;
}

double rule_of_thumb_flops_per_token(const ModelShape& s, const ParameterLayout& layout) {
  return 6.0 * static_cast<double>(layout.non_embedding_params()) +
         12.0 * static_cast<double>(s.n_layers) * s.n_heads * s.head_dim() * s.seq_len;
}

}  // namespace trainbench
