// Model FLOPs per token, counted from the GEMM shapes the engines run plus
// attention — the numerator of MFU. Conventions (as PaLM and the 6N + 12·L·H·Q·T
// rule of thumb): a multiply-add is 2 FLOPs; attention scores and the
// probability-weighted sum are counted over the full T×T square even though a
// causal kernel may skip the masked half; norms, RoPE, softmax, SwiGLU and the
// optimizer are not counted (they are O(D) per token, not O(D²)).
// Backward costs twice the forward GEMMs: the input gradient and the weight
// gradient; a frozen weight has no weight-gradient GEMM, so it costs 4 per
// element instead of 6 — "counts what it really computes".
#pragma once

#include "kernels/model_shape.h"  // ModelShape, ParameterLayout

namespace trainbench {

struct FlopsPerToken {
  double gemm_forward = 0;     // 2 × elements of every projection and the LM head
  double gemm_backward = 0;    // input gradients (+ weight gradients when trainable)
  double attention_forward = 0;   // QKᵀ and P·V: 4·T·q_dim per layer
  double attention_backward = 0;  // twice the forward
  double total() const {
    return gemm_forward + gemm_backward + attention_forward + attention_backward;
  }
};

FlopsPerToken model_flops_per_token(const ModelShape& shape, const ParameterLayout& layout);

// The rule of thumb, for comparison: 6·N + 12·L·H·Q·T with N the parameters
// that are not the token embedding.
double rule_of_thumb_flops_per_token(const ModelShape& shape, const ParameterLayout& layout);

}  // namespace trainbench
