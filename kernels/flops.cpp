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

double datasheet_bf16_peak_flops(const std::string& gpu_name) {
  const auto has = [&gpu_name](const char* part) { return gpu_name.find(part) != std::string::npos; };
  // NVIDIA's datasheets, bf16 tensor core with sparsity halved: H100/H200
  // SXM (and GH200) 1,979 → 989; H100 and H200 NVL 1,671 → 835; H100 PCIe
  // 1,513 → 756; A100 (every form) 624 → 312.
  if (has("H100") || has("H200")) {
    if (has("NVL")) return 835e12;
    if (has("PCIe")) return 756e12;
    return 989e12;
  }
  if (has("A100")) return 312e12;
  return 0.0;
}

}  // namespace trainbench
