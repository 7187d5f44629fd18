#include "tests/reference/torch_llama.h"

#include <algorithm>  // std::replace for module parameter names
#include <cmath>      // std::sqrt
#include <limits>     // -infinity for the causal mask
#include <stdexcept>  // std::invalid_argument for mismatched buffers
#include <string>     // parameter names

namespace trainbench::reference {

namespace F = torch::nn::functional;

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

RopeTables make_rope_tables(int64_t seq_len, int64_t head_dim, double theta) {
  // Angles in double, rounded once to float: the reference should not carry
  // more error than the engines it judges.
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor pair_index = torch::arange(head_dim / 2, f64);
  const torch::Tensor inverse_frequency = torch::pow(theta, -2.0 * pair_index / head_dim);
  const torch::Tensor positions = torch::arange(seq_len, f64);
  const torch::Tensor angles = torch::outer(positions, inverse_frequency);
  const torch::Tensor both_halves = torch::cat({angles, angles}, /*dim=*/-1);
  return {both_halves.cos().to(torch::kFloat32), both_halves.sin().to(torch::kFloat32)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& tables) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor first = x.narrow(-1, 0, half);
  const torch::Tensor second = x.narrow(-1, half, half);
  const torch::Tensor rotated_half = torch::cat({-second, first}, /*dim=*/-1);
  // Tables are [seq, head_dim]; x is [batch, seq, heads, head_dim].
  const torch::Tensor cos = tables.cos.unsqueeze(1);
  const torch::Tensor sin = tables.sin.unsqueeze(1);
  return x * cos + rotated_half * sin;
}

torch::Tensor causal_mask(int64_t seq_len) {
  return torch::ones({seq_len, seq_len}, torch::kBool).triu(/*diagonal=*/1);
}

AttentionResult causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, torch::Tensor mask) {
  const int64_t seq_len = q.size(1);
  const int64_t n_heads = q.size(2);
  const int64_t n_kv_heads = k.size(2);
  const int64_t head_dim = q.size(3);
  if (n_heads % n_kv_heads != 0)
    throw std::invalid_argument("causal_attention: n_kv_heads must divide n_heads");
  if (!mask.defined()) mask = causal_mask(seq_len);

  // [batch, heads, seq, head_dim]; each kv head serves a contiguous group of
  // query heads, which is what repeat_interleave along the head axis builds.
  const torch::Tensor q_heads = q.transpose(1, 2);
  torch::Tensor k_heads = k.transpose(1, 2);
  torch::Tensor v_heads = v.transpose(1, 2);
  if (n_kv_heads != n_heads) {
    k_heads = k_heads.repeat_interleave(n_heads / n_kv_heads, /*dim=*/1);
    v_heads = v_heads.repeat_interleave(n_heads / n_kv_heads, /*dim=*/1);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const torch::Tensor scores =
      torch::matmul(q_heads, k_heads.transpose(-2, -1)) * scale;
  const torch::Tensor masked =
      scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  torch::Tensor probs = torch::softmax(masked, /*dim=*/-1);
  torch::Tensor out = torch::matmul(probs, v_heads).transpose(1, 2);
  return {std::move(out), std::move(probs)};
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  return torch::silu(gate) * up;
}

torch::Tensor token_tensor(const int32_t* tokens, int64_t batch, int64_t seq_len) {
  return torch::from_blob(const_cast<int32_t*>(tokens), {batch, seq_len}, torch::kInt32)
      .to(torch::kInt64);
}

TorchLlama::TorchLlama(const ModelShape& shape, const std::vector<float>& flat_parameters)
    : TorchLlama(shape, ParameterLayout(shape), flat_parameters) {}

TorchLlama::TorchLlama(const ModelShape& shape, const ParameterLayout& layout,
                       const std::vector<float>& flat_parameters)
    : shape_(shape), layout_(layout) {
  if (static_cast<int64_t>(flat_parameters.size()) != layout_.total_params())
    throw std::invalid_argument("TorchLlama: " + std::to_string(flat_parameters.size()) +
                                " parameters given, the layout has " +
                                std::to_string(layout_.total_params()));
  for (const ParamTensor& t : layout_.tensors()) {
    torch::Tensor values =
        torch::from_blob(const_cast<float*>(flat_parameters.data() + t.offset), t.shape,
                         torch::kFloat32)
            .clone();
    // nn::Module names may not contain dots ("layers.0.wq" -> "layers_0_wq").
    std::string module_name = t.name;
    std::replace(module_name.begin(), module_name.end(), '.', '_');
    tensors_.push_back(t.trainable ? register_parameter(module_name, values)
                                   : register_buffer(module_name, values));
  }
  rope_ = make_rope_tables(shape_.seq_len, shape_.head_dim(), shape_.rope_theta);
  causal_mask_ = causal_mask(shape_.seq_len);
}

const torch::Tensor& TorchLlama::tensor(ParamKind kind, int64_t layer) const {
  return tensor_at(&layout_.get(kind, layer));
}

const torch::Tensor& TorchLlama::tensor_at(const ParamTensor* entry) const {
  return tensors_[static_cast<size_t>(entry - layout_.tensors().data())];
}

TorchLlama::ForwardResult TorchLlama::forward(const torch::Tensor& inputs,
                                              const torch::Tensor& targets) {
  const int64_t batch = inputs.size(0);
  const int64_t seq_len = inputs.size(1);
  TORCH_CHECK(seq_len <= shape_.seq_len, "sequence of ", seq_len,
              " tokens is longer than the model's seq_len ", shape_.seq_len);
  const int64_t n_heads = shape_.n_heads;
  const int64_t n_kv_heads = shape_.n_kv_heads;
  const int64_t head_dim = shape_.head_dim();
  const double eps = shape_.norm_eps;
  const RopeTables rope{rope_.cos.narrow(0, 0, seq_len), rope_.sin.narrow(0, 0, seq_len)};
  const torch::Tensor mask = causal_mask_.narrow(0, 0, seq_len).narrow(1, 0, seq_len);

  torch::Tensor x = F::embedding(inputs, tensor(ParamKind::kTokenEmbedding));  // [B, T, D]
  for (int64_t layer = 0; layer < shape_.n_layers; ++layer) {
    auto weight = [&](ParamKind kind) -> const torch::Tensor& { return tensor(kind, layer); };
    // W·x, plus scale · B·(A·x) where the layout adapts this projection (LoRA).
    auto project = [&](const torch::Tensor& in, ParamKind kind) {
      torch::Tensor y = F::linear(in, weight(kind));
      const ParameterLayout::LoraPair pair = layout_.lora(kind, layer);
      if (pair.a != nullptr)
        y = y + layout_.lora_spec().scale() *
                    F::linear(F::linear(in, tensor_at(pair.a)), tensor_at(pair.b));
      return y;
    };

    const torch::Tensor attn_in = rms_norm(x, weight(ParamKind::kAttnNorm), eps);
    const torch::Tensor q = apply_rope(
        project(attn_in, ParamKind::kWq).view({batch, seq_len, n_heads, head_dim}), rope);
    const torch::Tensor k = apply_rope(
        project(attn_in, ParamKind::kWk).view({batch, seq_len, n_kv_heads, head_dim}), rope);
    const torch::Tensor v =
        project(attn_in, ParamKind::kWv).view({batch, seq_len, n_kv_heads, head_dim});
    const torch::Tensor attn =
        causal_attention(q, k, v, mask).out.reshape({batch, seq_len, shape_.q_dim()});
    x = x + project(attn, ParamKind::kWo);

    const torch::Tensor mlp_in = rms_norm(x, weight(ParamKind::kMlpNorm), eps);
    const torch::Tensor hidden = swiglu(project(mlp_in, ParamKind::kWGate),
                                        project(mlp_in, ParamKind::kWUp));
    x = x + project(hidden, ParamKind::kWDown);
  }
  x = rms_norm(x, tensor(ParamKind::kFinalNorm), eps);
  torch::Tensor logits =
      F::linear(x, tensor(ParamKind::kLmHead)).view({batch * seq_len, shape_.vocab});
  torch::Tensor loss = F::cross_entropy(logits, targets.reshape({-1}));
  return {std::move(logits), std::move(loss)};
}

std::vector<float> TorchLlama::flat_parameters() const {
  std::vector<float> flat(layout_.total_params());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ParamTensor& t = layout_.tensors()[i];
    const torch::Tensor values = tensors_[i].detach().contiguous();
    std::copy_n(values.data_ptr<float>(), t.numel, flat.data() + t.offset);
  }
  return flat;
}

std::vector<float> TorchLlama::flat_gradients() const {
  std::vector<float> flat(layout_.trainable_params(), 0.0f);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ParamTensor& t = layout_.tensors()[i];
    if (!t.trainable || !tensors_[i].grad().defined()) continue;
    const torch::Tensor grad = tensors_[i].grad().contiguous();
    std::copy_n(grad.data_ptr<float>(), t.numel, flat.data() + t.grad_offset);
  }
  return flat;
}

std::vector<torch::Tensor> TorchLlama::trainable_tensors() const {
  std::vector<torch::Tensor> trainable;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (layout_.tensors()[i].trainable) trainable.push_back(tensors_[i]);
  return trainable;
}

std::unique_ptr<torch::optim::AdamW> TorchLlama::make_optimizer(
    const AdamWSettings& settings) const {
  torch::optim::AdamWOptions decayed(settings.lr);
  decayed.betas(std::make_tuple(settings.beta1, settings.beta2))
      .eps(settings.eps)
      .weight_decay(settings.weight_decay);
  torch::optim::AdamWOptions not_decayed = decayed;
  not_decayed.weight_decay(0.0);

  std::vector<torch::Tensor> matrices, vectors;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ParamTensor& t = layout_.tensors()[i];
    if (!t.trainable) continue;
    (t.is_matrix() ? matrices : vectors).push_back(tensors_[i]);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!matrices.empty())
    groups.emplace_back(matrices, std::make_unique<torch::optim::AdamWOptions>(decayed));
  if (!vectors.empty())
    groups.emplace_back(vectors, std::make_unique<torch::optim::AdamWOptions>(not_decayed));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), decayed);
}

double TorchLlama::clip_gradients(double max_norm) {
  const std::vector<torch::Tensor> trainable = trainable_tensors();
  if (max_norm > 0.0) return torch::nn::utils::clip_grad_norm_(trainable, max_norm);
  // Clipping disabled: the norm is still reported, as the engines do.
  double sum_of_squares = 0.0;
  for (const torch::Tensor& t : trainable)
    if (t.grad().defined())
      sum_of_squares += t.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  return std::sqrt(sum_of_squares);
}

}  // namespace trainbench::reference
