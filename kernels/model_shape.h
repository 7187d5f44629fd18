// The shape of the Llama-style decoder every backend trains, and the layout of
// its parameters in one flat buffer. Shared by kernels/cpu and kernels/cuda so
// that a parameter lives at the same offset in every backend, in checkpoints and
// in the gradient buckets.
#pragma once

#include <cstdint>  // int64_t
#include <string>   // ParamTensor::name
#include <vector>   // the tensor list

namespace trainbench {

struct ModelShape {
  int64_t vocab = 0;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;   // grouped-query attention: n_heads % n_kv_heads == 0
  int64_t ffn_hidden = 0;   // SwiGLU hidden width (gate and up projections)
  int64_t seq_len = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  int64_t heads_per_kv() const { return n_heads / n_kv_heads; }
};

// Which parameter a tensor is. Per-layer kinds repeat once per layer.
enum class ParamKind {
  kTokenEmbedding,  // [vocab, d_model]
  kAttnNorm,        // [d_model]
  kWq,              // [q_dim, d_model]      (PyTorch Linear layout: [out, in])
  kWk,              // [kv_dim, d_model]
  kWv,              // [kv_dim, d_model]
  kWo,              // [d_model, q_dim]
  kMlpNorm,         // [d_model]
  kWGate,           // [ffn_hidden, d_model]
  kWUp,             // [ffn_hidden, d_model]
  kWDown,           // [d_model, ffn_hidden]
  kFinalNorm,       // [d_model]
  kLmHead,          // [vocab, d_model]      (untied from the embedding)
  kLoraA,           // [rank, in]  of the projection in ParamTensor::target
  kLoraB,           // [out, rank]
};

const char* param_kind_name(ParamKind kind);

// The projections LoRA can adapt, in layer order: q, k, v, o, gate, up, down.
inline constexpr ParamKind kLoraTargetKinds[] = {ParamKind::kWq,    ParamKind::kWk,
                                                 ParamKind::kWv,    ParamKind::kWo,
                                                 ParamKind::kWGate, ParamKind::kWUp,
                                                 ParamKind::kWDown};
inline constexpr int kLoraTargetCount = 7;
// "q".."down" (config names, as MLPerf's Llama-2-70B LoRA lists them) to the
// kind and back; lora_target_slot is the kind's index in kLoraTargetKinds, or
// -1 for a kind LoRA cannot adapt.
const char* lora_target_name(ParamKind kind);
bool parse_lora_target(const std::string& name, ParamKind* kind);
int lora_target_slot(ParamKind kind);

// LoRA (Hu et al. 2021): every targeted projection W [out, in] of every layer
// gains y += (alpha / rank) · B·(A·x) with A [rank, in] (random) and B
// [out, rank] (zero); every base tensor is frozen. rank 0: no LoRA.
struct LoraSpec {
  int64_t rank = 0;
  double alpha = 32.0;
  std::vector<ParamKind> targets;  // subset of kLoraTargetKinds
  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
};

struct ParamTensor {
  std::string name;              // "layers.3.wq", "tok_embedding", ...
  ParamKind kind;
  int64_t layer = -1;            // -1 for tensors outside the layer stack
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t offset = 0;            // into the parameter buffer
  bool trainable = true;         // frozen tensors have no gradient or optimizer slot
  int64_t grad_offset = -1;      // into gradient / optimizer buffers; -1 when frozen
  ParamKind target = ParamKind::kWq;  // kLoraA / kLoraB: the projection adapted
  bool is_matrix() const { return shape.size() == 2; }
};

// Parameters in a fixed order: embedding, layer 0 .. n_layers-1, final norm,
// LM head; with LoRA, then the adapters, layer by layer (A then B per target),
// so they are one contiguous block of the parameter buffer — what a LoRA
// checkpoint saves. Gradients and optimizer state hold the trainable subset in
// the same order (with LoRA: the adapters alone, layer 0 first), so the
// gradient buffer can be cut into DDP buckets by offset.
class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelShape& shape, const LoraSpec& lora = {});

  // Frozen tensors lose their gradient slot; offsets are recomputed.
  void set_trainable(ParamKind kind, bool trainable);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor& get(ParamKind kind, int64_t layer = -1) const;
  // The A and B adapters of `target` in `layer`; nullptr when not adapted.
  struct LoraPair {
    const ParamTensor* a = nullptr;
    const ParamTensor* b = nullptr;
  };
  LoraPair lora(ParamKind target, int64_t layer) const;
  // Every adapter pair, layer by layer, targets in kLoraTargetKinds order.
  struct LoraAdapterTensors {
    int64_t layer;
    ParamKind target;
    const ParamTensor* a;
    const ParamTensor* b;
  };
  std::vector<LoraAdapterTensors> lora_adapters() const;
  // How many there are, without making the list (a loop bound that called
  // lora_adapters() made planning 65536 layers quadratic: minutes).
  int64_t lora_adapter_count() const { return (static_cast<int64_t>(tensors_.size()) - lora_begin_) / 2; }
  const LoraSpec& lora_spec() const { return lora_; }
  // Elements before the adapters: the base model (all of it without LoRA).
  int64_t base_params() const { return base_params_; }
  int64_t total_params() const { return total_params_; }
  int64_t trainable_params() const { return trainable_params_; }
  // Parameters that are not the token embedding (the N of the 6N rule).
  int64_t non_embedding_params() const;

 private:
  void assign_offsets();
  std::vector<ParamTensor> tensors_;
  int64_t layer_begin_ = 0;        // index of the first per-layer tensor
  int64_t tensors_per_layer_ = 0;
  int64_t total_params_ = 0;
  int64_t trainable_params_ = 0;
  int64_t base_params_ = 0;
  LoraSpec lora_;
  int64_t lora_begin_ = 0;  // index of the first adapter tensor
};

// Where the gradient buffer becomes final as backward walks from the LM head
// down to the embedding: after the head (final norm + LM head) and after each
// layer l, elements [from, trainable_params) are final. Frozen tensors are
// skipped; every engine reports these same values to GradientsReadyFn.
struct GradientReadiness {
  int64_t after_head = 0;
  std::vector<int64_t> after_layer;  // indexed by layer
};
GradientReadiness gradient_readiness(const ParameterLayout& layout, int64_t n_layers);

}  // namespace trainbench
