#include "kernels/model_shape.h"

#include <algorithm>  // std::min, std::find
#include <stdexcept>  // std::out_of_range for a layout lookup that cannot succeed

namespace trainbench {

const char* param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::kTokenEmbedding: return "tok_embedding";
    case ParamKind::kAttnNorm: return "attn_norm";
    case ParamKind::kWq: return "wq";
    case ParamKind::kWk: return "wk";
    case ParamKind::kWv: return "wv";
    case ParamKind::kWo: return "wo";
    case ParamKind::kMlpNorm: return "mlp_norm";
    case ParamKind::kWGate: return "w_gate";
    case ParamKind::kWUp: return "w_up";
    case ParamKind::kWDown: return "w_down";
    case ParamKind::kFinalNorm: return "final_norm";
    case ParamKind::kLmHead: return "lm_head";
    case ParamKind::kLoraA: return "lora_A";
    case ParamKind::kLoraB: return "lora_B";
  }
  return "?";
}

namespace {
constexpr const char* kLoraTargetNames[kLoraTargetCount] = {"q", "k", "v", "o", "gate", "up", "down"};
}  // namespace

int lora_target_slot(ParamKind kind) {
  for (int i = 0; i < kLoraTargetCount; ++i)
    if (kLoraTargetKinds[i] == kind) return i;
  return -1;
}

const char* lora_target_name(ParamKind kind) {
  const int slot = lora_target_slot(kind);
  return slot < 0 ? "?" : kLoraTargetNames[slot];
}

bool parse_lora_target(const std::string& name, ParamKind* kind) {
  for (int i = 0; i < kLoraTargetCount; ++i)
    if (name == kLoraTargetNames[i]) {
      *kind = kLoraTargetKinds[i];
      return true;
    }
  return false;
}

namespace {
ParamTensor make_tensor(ParamKind kind, int64_t layer, std::vector<int64_t> shape) {
  ParamTensor t;
  t.kind = kind;
  t.layer = layer;
  t.name = layer >= 0 ? "layers." + std::to_string(layer) + "." + param_kind_name(kind)
                      : param_kind_name(kind);
  t.numel = 1;
  for (int64_t d : shape) t.numel *= d;
  t.shape = std::move(shape);
  return t;
}
}  // namespace

ParameterLayout::ParameterLayout(const ModelShape& s, const LoraSpec& lora) : lora_(lora) {
  const int64_t d = s.d_model;
  tensors_.push_back(make_tensor(ParamKind::kTokenEmbedding, -1, {s.vocab, d}));
  layer_begin_ = static_cast<int64_t>(tensors_.size());
  for (int64_t l = 0; l < s.n_layers; ++l) {
    tensors_.push_back(make_tensor(ParamKind::kAttnNorm, l, {d}));
    tensors_.push_back(make_tensor(ParamKind::kWq, l, {s.q_dim(), d}));
    tensors_.push_back(make_tensor(ParamKind::kWk, l, {s.kv_dim(), d}));
    tensors_.push_back(make_tensor(ParamKind::kWv, l, {s.kv_dim(), d}));
    tensors_.push_back(make_tensor(ParamKind::kWo, l, {d, s.q_dim()}));
    tensors_.push_back(make_tensor(ParamKind::kMlpNorm, l, {d}));
    tensors_.push_back(make_tensor(ParamKind::kWGate, l, {s.ffn_hidden, d}));
    tensors_.push_back(make_tensor(ParamKind::kWUp, l, {s.ffn_hidden, d}));
    tensors_.push_back(make_tensor(ParamKind::kWDown, l, {d, s.ffn_hidden}));
    if (l == 0) tensors_per_layer_ = static_cast<int64_t>(tensors_.size()) - layer_begin_;
  }
  tensors_.push_back(make_tensor(ParamKind::kFinalNorm, -1, {d}));
  tensors_.push_back(make_tensor(ParamKind::kLmHead, -1, {s.vocab, d}));
  lora_begin_ = static_cast<int64_t>(tensors_.size());
  if (lora_.enabled()) {
    for (ParamTensor& t : tensors_) t.trainable = false;
    for (int64_t l = 0; l < s.n_layers; ++l)
      for (ParamKind target : kLoraTargetKinds) {
        if (std::find(lora_.targets.begin(), lora_.targets.end(), target) == lora_.targets.end())
          continue;
        // Copies: the pushes below may move the tensor list.
        const ParamTensor& base = get(target, l);
        const std::string base_name = base.name;
        const int64_t out = base.shape[0], in = base.shape[1];
        for (ParamKind kind : {ParamKind::kLoraA, ParamKind::kLoraB}) {
          ParamTensor t = make_tensor(kind, l, kind == ParamKind::kLoraA
                                                   ? std::vector<int64_t>{lora_.rank, in}
                                                   : std::vector<int64_t>{out, lora_.rank});
          t.name = base_name + "." + param_kind_name(kind);
          t.target = target;
          tensors_.push_back(std::move(t));
        }
      }
  }
  assign_offsets();
}

void ParameterLayout::assign_offsets() {
  total_params_ = 0;
  trainable_params_ = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    ParamTensor& t = tensors_[i];
    if (static_cast<int64_t>(i) == lora_begin_) base_params_ = total_params_;
    t.offset = total_params_;
    total_params_ += t.numel;
    t.grad_offset = t.trainable ? trainable_params_ : -1;
    if (t.trainable) trainable_params_ += t.numel;
  }
  if (lora_begin_ >= static_cast<int64_t>(tensors_.size())) base_params_ = total_params_;
}

std::vector<ParameterLayout::LoraAdapterTensors> ParameterLayout::lora_adapters() const {
  // The adapter block holds A then B per (layer, target), in that order.
  std::vector<LoraAdapterTensors> adapters;
  for (size_t i = static_cast<size_t>(lora_begin_); i + 1 < tensors_.size(); i += 2)
    adapters.push_back({tensors_[i].layer, tensors_[i].target, &tensors_[i], &tensors_[i + 1]});
  return adapters;
}

ParameterLayout::LoraPair ParameterLayout::lora(ParamKind target, int64_t layer) const {
  // Few tensors per layer: a scan of the adapter block is cheap, and engines
  // resolve their views once.
  LoraPair pair;
  for (size_t i = static_cast<size_t>(lora_begin_); i < tensors_.size(); ++i) {
    const ParamTensor& t = tensors_[i];
    if (t.layer != layer || t.target != target) continue;
    (t.kind == ParamKind::kLoraA ? pair.a : pair.b) = &t;
  }
  return pair;
}

void ParameterLayout::set_trainable(ParamKind kind, bool trainable) {
  for (ParamTensor& t : tensors_)
    if (t.kind == kind) t.trainable = trainable;
  assign_offsets();
}

const ParamTensor& ParameterLayout::get(ParamKind kind, int64_t layer) const {
  if (kind == ParamKind::kLoraA || kind == ParamKind::kLoraB)
    throw std::invalid_argument("ParameterLayout::get: adapters are found with lora(target, layer)");
  const bool per_layer = kind != ParamKind::kTokenEmbedding && kind != ParamKind::kFinalNorm &&
                         kind != ParamKind::kLmHead;
  if (per_layer) {
    // Layer tensors are stored in blocks of tensors_per_layer_, in enum order.
    const int64_t index_in_layer =
        static_cast<int64_t>(kind) - static_cast<int64_t>(ParamKind::kAttnNorm);
    const int64_t i = layer_begin_ + layer * tensors_per_layer_ + index_in_layer;
    if (layer < 0 || i >= static_cast<int64_t>(tensors_.size()) || tensors_[i].layer != layer)
      throw std::out_of_range(std::string("no parameter ") + param_kind_name(kind) +
                              " in layer " + std::to_string(layer));
    return tensors_[i];
  }
  for (const ParamTensor& t : tensors_)
    if (t.kind == kind) return t;
  throw std::out_of_range(std::string("no parameter ") + param_kind_name(kind));
}

GradientReadiness gradient_readiness(const ParameterLayout& layout, int64_t n_layers) {
  const int64_t end = layout.trainable_params();
  auto first_trainable_where = [&](auto&& selected) {
    int64_t first = end;
    for (const ParamTensor& t : layout.tensors())
      if (t.trainable && selected(t)) first = std::min(first, t.grad_offset);
    return first;
  };
  GradientReadiness readiness;
  readiness.after_head = first_trainable_where([](const ParamTensor& t) {
    return t.kind == ParamKind::kFinalNorm || t.kind == ParamKind::kLmHead;
  });
  readiness.after_layer.resize(static_cast<size_t>(n_layers));
  for (int64_t l = 0; l < n_layers; ++l) {
    readiness.after_layer[l] = std::min(
        readiness.after_head, first_trainable_where([l](const ParamTensor& t) { return t.layer >= l; }));
  }
  return readiness;
}

int64_t ParameterLayout::non_embedding_params() const {
  return total_params_ - get(ParamKind::kTokenEmbedding).numel;
}

}  // namespace trainbench
