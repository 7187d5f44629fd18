// ParameterLayout: counts, offsets and frozen tensors, checked by hand.
#include <gtest/gtest.h>

#include "kernels/model_shape.h"

namespace trainbench {
namespace {

ModelShape small_gqa_shape() {
  ModelShape s{.vocab = 100, .d_model = 16, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
               .ffn_hidden = 40, .seq_len = 8};
  return s;
}

TEST(ParameterLayout, CountsMatchAHandCount) {
  const ModelShape s = small_gqa_shape();
  const ParameterLayout layout(s);
  // head_dim 4, q_dim 16, kv_dim 8.
  const int64_t per_layer = 16            // attn norm
                            + 16 * 16     // wq
                            + 2 * 8 * 16  // wk, wv
                            + 16 * 16     // wo
                            + 16          // mlp norm
                            + 3 * 40 * 16;  // gate, up, down
  const int64_t expected = 100 * 16 + 3 * per_layer + 16 + 100 * 16;
  EXPECT_EQ(layout.total_params(), expected);
  EXPECT_EQ(layout.trainable_params(), expected);
  EXPECT_EQ(layout.non_embedding_params(), expected - 100 * 16);
  EXPECT_EQ(layout.tensors().size(), 1u + 3u * 9u + 2u);
}

TEST(ParameterLayout, TensorsAreContiguousInOrder) {
  const ParameterLayout layout(small_gqa_shape());
  int64_t offset = 0;
  for (const ParamTensor& t : layout.tensors()) {
    EXPECT_EQ(t.offset, offset) << t.name;
    EXPECT_EQ(t.grad_offset, offset) << t.name;
    offset += t.numel;
  }
  EXPECT_EQ(layout.get(ParamKind::kWk, 2).name, "layers.2.wk");
  EXPECT_EQ(layout.get(ParamKind::kWk, 2).shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(layout.get(ParamKind::kLmHead).name, "lm_head");
  EXPECT_THROW(layout.get(ParamKind::kWq, 3), std::out_of_range);
}

TEST(ParameterLayout, FrozenTensorsLoseTheirGradientSlot) {
  ParameterLayout layout(small_gqa_shape());
  const int64_t total = layout.total_params();
  layout.set_trainable(ParamKind::kWq, false);
  layout.set_trainable(ParamKind::kTokenEmbedding, false);
  EXPECT_EQ(layout.total_params(), total);
  EXPECT_EQ(layout.trainable_params(), total - 3 * 16 * 16 - 100 * 16);
  int64_t grad_offset = 0;
  for (const ParamTensor& t : layout.tensors()) {
    if (!t.trainable) {
      EXPECT_EQ(t.grad_offset, -1) << t.name;
      continue;
    }
    EXPECT_EQ(t.grad_offset, grad_offset) << t.name;
    grad_offset += t.numel;
  }
}

TEST(ParameterLayout, LoraAddsAdaptersAfterTheFrozenBaseInLayerOrder) {
  const ModelShape s{.vocab = 100, .d_model = 32, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 48, .seq_len = 8};
  const ParameterLayout full(s);
  const ParameterLayout layout(s, LoraSpec{4, 8.0, {ParamKind::kWk, ParamKind::kWDown}});
  // The base keeps its offsets (same weights from the same seed) and is frozen.
  EXPECT_EQ(layout.base_params(), full.total_params());
  for (const ParamTensor& t : full.tensors()) {
    const ParamTensor& same = t.layer >= 0 ? layout.get(t.kind, t.layer) : layout.get(t.kind);
    EXPECT_EQ(same.offset, t.offset) << t.name;
    EXPECT_FALSE(same.trainable) << t.name;
  }
  // Adapters: k [16 ← 32] and down [32 ← 48] per layer, A [4, in] then B [out, 4].
  const int64_t per_layer = 4 * 32 + 16 * 4 + 4 * 48 + 32 * 4;
  EXPECT_EQ(layout.trainable_params(), 3 * per_layer);
  EXPECT_EQ(layout.total_params(), full.total_params() + 3 * per_layer);
  int64_t next_offset = layout.base_params(), next_grad = 0;
  for (int64_t l = 0; l < 3; ++l)
    for (ParamKind target : {ParamKind::kWk, ParamKind::kWDown}) {
      const ParameterLayout::LoraPair pair = layout.lora(target, l);
      ASSERT_NE(pair.a, nullptr);
      ASSERT_NE(pair.b, nullptr);
      const ParamTensor& base = layout.get(target, l);
      EXPECT_EQ(pair.a->shape, (std::vector<int64_t>{4, base.shape[1]}));
      EXPECT_EQ(pair.b->shape, (std::vector<int64_t>{base.shape[0], 4}));
      EXPECT_EQ(pair.a->name, base.name + ".lora_A");
      for (const ParamTensor* t : {pair.a, pair.b}) {
        EXPECT_EQ(t->offset, next_offset) << t->name;   // one contiguous block
        EXPECT_EQ(t->grad_offset, next_grad) << t->name;  // layer 0 first
        EXPECT_TRUE(t->trainable);
        next_offset += t->numel;
        next_grad += t->numel;
      }
      EXPECT_EQ(layout.lora(ParamKind::kWq, l).a, nullptr);
    }
  // Backward's readiness: nothing above the layers trains; layer l's
  // gradients are final once layer l is done.
  const GradientReadiness r = gradient_readiness(layout, 3);
  EXPECT_EQ(r.after_head, layout.trainable_params());
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(r.after_layer[l], l * per_layer) << l;
}

TEST(ParameterLayout, LoraTargetNamesRoundTrip) {
  for (ParamKind kind : kLoraTargetKinds) {
    ParamKind parsed;
    ASSERT_TRUE(parse_lora_target(lora_target_name(kind), &parsed));
    EXPECT_EQ(parsed, kind);
  }
  ParamKind unused;
  EXPECT_FALSE(parse_lora_target("wq", &unused));
  EXPECT_EQ(lora_target_slot(ParamKind::kLmHead), -1);
}

}  // namespace
}  // namespace trainbench

namespace trainbench {
namespace {

TEST(GradientReadiness, SuffixStartsAtEachPointSkippingFrozenTensors) {
  ParameterLayout layout(small_gqa_shape());
  GradientReadiness r = gradient_readiness(layout, 3);
  EXPECT_EQ(r.after_head, layout.get(ParamKind::kFinalNorm).grad_offset);
  ASSERT_EQ(r.after_layer.size(), 3u);
  for (int64_t l = 0; l < 3; ++l)
    EXPECT_EQ(r.after_layer[l], layout.get(ParamKind::kAttnNorm, l).grad_offset) << l;

  // Frozen head and attention norms: readiness moves to the next trainable tensor.
  layout.set_trainable(ParamKind::kFinalNorm, false);
  layout.set_trainable(ParamKind::kLmHead, false);
  layout.set_trainable(ParamKind::kAttnNorm, false);
  r = gradient_readiness(layout, 3);
  EXPECT_EQ(r.after_head, layout.trainable_params()) << "nothing trainable after the last layer";
  for (int64_t l = 0; l < 3; ++l)
    EXPECT_EQ(r.after_layer[l], layout.get(ParamKind::kWq, l).grad_offset) << l;
}

}  // namespace
}  // namespace trainbench
