// ParameterLayout: counts, offsets and frozen tensors, checked by hand.
#include <gtest/gtest.h>

#include <algorithm>  // std::max
#include <vector>

#include "kernels/engine.h"  // shard_pieces
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
  // One adapter pair per (layer, target), counted without the list.
  EXPECT_EQ(layout.lora_adapter_count(), 3 * 2);
  EXPECT_EQ(layout.lora_adapter_count(), static_cast<int64_t>(layout.lora_adapters().size()));
  EXPECT_EQ(full.lora_adapter_count(), 0);
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

// ---- optimizer pieces ----

ModelShape gpt2_small() {
  return ModelShape{.vocab = 50257, .d_model = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
                    .ffn_hidden = 3072, .seq_len = 1024};
}

// Every trainable element exactly once, in order, each with its tensor's
// parameter offset and decay, and no two neighbours left that could be one.
void expect_pieces_cover(const ParameterLayout& layout, int64_t begin, int64_t end) {
  const std::vector<ShardPiece> pieces = shard_pieces(layout, begin, end);
  int64_t next = begin;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    ASSERT_EQ(p.lo, next) << "piece " << i;
    ASSERT_LT(p.lo, p.hi) << "piece " << i;
    next = p.hi;
    for (const ParamTensor& t : layout.tensors()) {  // every tensor the piece touches agrees with it
      if (!t.trainable || t.grad_offset + t.numel <= p.lo || t.grad_offset >= p.hi) continue;
      const int64_t from = std::max(p.lo, t.grad_offset);
      EXPECT_EQ(p.parameter + (from - p.lo), t.offset + (from - t.grad_offset)) << "piece " << i;
      EXPECT_EQ(p.decay, t.is_matrix()) << "piece " << i;
    }
    if (i > 0) {
      const ShardPiece& q = pieces[i - 1];
      EXPECT_FALSE(q.decay == p.decay && q.parameter + (q.hi - q.lo) == p.parameter) << "pieces " << i - 1 << ", " << i;
    }
  }
  EXPECT_EQ(next, end);
}

TEST(ShardPieces, ContiguousTensorsWithTheSameDecayAreOnePiece) {
  const ParameterLayout layout(gpt2_small());
  const std::vector<ShardPiece> pieces = shard_pieces(layout, 0, layout.trainable_params());
  // Embedding; per layer the attention norm, q..o, the MLP norm, gate..down; final norm, head.
  EXPECT_EQ(pieces.size(), size_t{1 + 4 * 12 + 2});
  EXPECT_EQ(layout.tensors().size(), size_t{1 + 9 * 12 + 2});
  expect_pieces_cover(layout, 0, layout.trainable_params());
  // A ZeRO-1 shard boundary cuts wherever it falls.
  const int64_t third = layout.trainable_params() / 3;
  expect_pieces_cover(layout, third, 2 * third + 7);
}

TEST(ShardPieces, AFrozenTensorKeepsItsNeighboursApart) {
  // wk frozen: wq and wv are neighbours in the gradient buffer, not in the parameters.
  ModelShape shape = gpt2_small();
  shape.n_layers = 2;
  ParameterLayout layout(shape);
  layout.set_trainable(ParamKind::kWk, false);
  expect_pieces_cover(layout, 0, layout.trainable_params());
  EXPECT_EQ(shard_pieces(layout, 0, layout.trainable_params()).size(), size_t{1 + 5 * 2 + 2});
}

}  // namespace
}  // namespace trainbench
