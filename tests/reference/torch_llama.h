// The trainbench model written a second time, in libtorch with autograd: the
// independent reference the CPU engine and its ops are checked against, and the
// PyTorch baseline torch_train_bench times. Parameters come from (and gradients
// go back to) the same flat fp32 buffers in ParameterLayout order that every
// trainbench backend uses, so a comparison is a loop over layout().tensors().
//
// Semantics (the contract the engines implement): token embedding; per layer
//   h  = x + Wo·attn(rope(Wq·rmsnorm(x)), rope(Wk·rmsnorm(x)), Wv·rmsnorm(x))
//   x' = h + Wdown·(silu(Wgate·rmsnorm2(h)) * Wup·rmsnorm2(h));
// final rmsnorm; untied LM head; mean cross-entropy over all tokens. With a
// LoRA layout every adapted projection W·x becomes W·x + (alpha/rank)·B·(A·x),
// as PEFT's LoraLayer computes it (dropout 0).
#pragma once

#include <cstdint>  // int64_t, int32_t token ids
#include <memory>   // std::unique_ptr<torch::optim::AdamW>
#include <vector>   // flat parameter and gradient buffers

#include <torch/torch.h>  // tensors, autograd, nn::Module, optim::AdamW

#include "kernels/engine.h"       // AdamWSettings
#include "kernels/model_shape.h"  // ModelShape, ParameterLayout, ParamKind

namespace trainbench::reference {

// --- Building blocks. Exposed so the op tests check each CPU op against the
// --- very formulation the reference model uses.

// y = x · rsqrt(mean(x², last dim) + eps) · weight
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// cos and sin of the rotary angles, [seq_len, head_dim], each half repeated so
// they line up with rotate_half: angle(t, i) = t · theta^(-2i/head_dim).
struct RopeTables {
  torch::Tensor cos, sin;
};
RopeTables make_rope_tables(int64_t seq_len, int64_t head_dim, double theta);

// Half-split rotary embedding (HF Llama rotate_half) of x[batch, seq, heads, head_dim].
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& tables);

// Causal grouped-query attention, scale 1/sqrt(head_dim). q[batch, seq, n_heads,
// head_dim], k and v [batch, seq, n_kv_heads, head_dim]; query head h reads kv
// head h / (n_heads / n_kv_heads). out[batch, seq, n_heads, head_dim]; probs
// [batch, n_heads, seq, seq] is the softmax (0 above the diagonal).
// causal_mask: bool [seq, seq], true above the diagonal (causal_mask(seq) when
// not given; a model builds it once).
struct AttentionResult {
  torch::Tensor out, probs;
};
torch::Tensor causal_mask(int64_t seq_len);
AttentionResult causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, torch::Tensor mask = {});

// silu(gate) · up
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// Token ids as the int64 tensor [batch, seq_len] libtorch's embedding and
// cross-entropy take.
torch::Tensor token_tensor(const int32_t* tokens, int64_t batch, int64_t seq_len);

// --- The model.

class TorchLlama : public torch::nn::Module {
 public:
  struct ForwardResult {
    torch::Tensor logits;  // [batch·seq_len, vocab]
    torch::Tensor loss;    // scalar: mean cross-entropy over every token
  };

  // flat_parameters: layout.total_params() floats in layout order (copied).
  // Frozen tensors of the layout get no gradient.
  TorchLlama(const ModelShape& shape, const std::vector<float>& flat_parameters);
  TorchLlama(const ModelShape& shape, const ParameterLayout& layout,
             const std::vector<float>& flat_parameters);

  // inputs and targets: int64 [batch, seq_len] with seq_len <= shape.seq_len.
  ForwardResult forward(const torch::Tensor& inputs, const torch::Tensor& targets);

  const ModelShape& shape() const { return shape_; }
  const ParameterLayout& layout() const { return layout_; }
  // The tensor of one layout entry (index into layout().tensors()).
  const torch::Tensor& tensor(size_t layout_index) const { return tensors_[layout_index]; }
  const torch::Tensor& tensor(ParamKind kind, int64_t layer = -1) const;
  // The tensor of a layout entry given by address (e.g. from layout().lora()).
  const torch::Tensor& tensor_at(const ParamTensor* entry) const;

  // Parameters in layout order (total_params floats).
  std::vector<float> flat_parameters() const;
  // Gradients of the trainable tensors at their grad_offset (trainable_params
  // floats); a tensor backward has not reached contributes zeros.
  std::vector<float> flat_gradients() const;
  std::vector<torch::Tensor> trainable_tensors() const;

  // torch::optim::AdamW over the trainable tensors in two groups, as the
  // engines apply it: matrices (embedding and LM head included) decay, norm
  // weights do not.
  std::unique_ptr<torch::optim::AdamW> make_optimizer(const AdamWSettings& settings) const;
  // Global L2 norm of the gradients before clipping; scales them down to
  // max_norm (torch::nn::utils::clip_grad_norm_) when max_norm > 0.
  double clip_gradients(double max_norm);

 private:
  ModelShape shape_;
  ParameterLayout layout_;
  std::vector<torch::Tensor> tensors_;  // layout order
  RopeTables rope_;                     // for shape.seq_len positions
  torch::Tensor causal_mask_;           // [seq_len, seq_len], true above the diagonal
};

}  // namespace trainbench::reference
