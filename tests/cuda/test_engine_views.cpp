// The CUDA engine's activation and scratch views (engine_views.h), laid out on
// host memory: no GPU needed. Every view starts on 256 bytes whatever the
// shape, lies inside its allocation, overlaps no other view, and the counting
// pass sizes the allocations to exactly what the real carving uses.
#include <gtest/gtest.h>

#include <algorithm>  // std::sort
#include <cstdint>
#include <cstdlib>    // std::aligned_alloc, std::free
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/engine_views.h"
#include "kernels/cuda/lt_gemm.h"  // padded_leading_dimension: the logits' rows

namespace trainbench::cuda {
namespace {

// Host memory aligned like cudaMalloc's (256 bytes).
struct AlignedBytes {
  explicit AlignedBytes(int64_t bytes)
      : data(static_cast<unsigned char*>(std::aligned_alloc(256, (std::max<int64_t>(bytes, 1) + 255) / 256 * 256)),
             &std::free),
        size(bytes) {}
  std::unique_ptr<unsigned char, decltype(&std::free)> data;
  int64_t size;
};

struct View {
  std::string name;
  const void* begin;
  int64_t bytes;
};

// test_cuda_engine's grouped-query shape: T = 37 makes B·H·T² odd, which
// packed back to back left every later bf16 view 8-byte aligned.
ModelShape odd_shape() {
  ModelShape s;
  s.vocab = 101;
  s.d_model = 96;
  s.n_layers = 2;
  s.n_heads = 6;
  s.n_kv_heads = 2;
  s.ffn_hidden = 136;
  s.seq_len = 37;
  return s;
}

std::vector<View> all_views(const EngineViews& v, const ModelShape& s, int64_t batch, const LoraSpec& lora) {
  const int64_t n = batch * s.seq_len, d = s.d_model, f = s.ffn_hidden, p = batch * s.n_heads * s.seq_len * s.seq_len;
  std::vector<View> views;
  auto add = [&](const std::string& name, const void* at, int64_t bytes) {
    if (at != nullptr) views.push_back({name, at, bytes});
  };
  for (size_t l = 0; l < v.layers.size(); ++l) {
    const LayerActivations& a = v.layers[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    add(at + "residual_in", a.residual_in, 2 * n * d);
    add(at + "attn_norm_out", a.attn_norm_out, 2 * n * d);
    add(at + "attn_rstd", a.attn_rstd, 4 * n);
    add(at + "q", a.q, 2 * n * s.q_dim());
    add(at + "k", a.k, 2 * n * s.kv_dim());
    add(at + "v", a.v, 2 * n * s.kv_dim());
    add(at + "probs", a.probs, 2 * p);
    add(at + "attn_stats", a.attn_stats, 4 * n * s.n_heads);
    add(at + "attn_out", a.attn_out, 2 * n * s.q_dim());
    add(at + "residual_mid", a.residual_mid, 2 * n * d);
    add(at + "mlp_norm_out", a.mlp_norm_out, 2 * n * d);
    add(at + "mlp_rstd", a.mlp_rstd, 4 * n);
    add(at + "gate", a.gate, 2 * n * f);
    add(at + "up", a.up, 2 * n * f);
    add(at + "swiglu_out", a.swiglu_out, 2 * n * f);
  }
  const FinalActivations& fa = v.final_acts;
  add("residual_out", fa.residual_out, 2 * n * d);
  add("norm_out", fa.norm_out, 2 * n * d);
  add("final rstd", fa.rstd, 4 * n);
  add("logits", fa.logits, 2 * n * padded_leading_dimension(s.vocab));
  add("losses", fa.losses, 4 * n);
  add("logsumexp", fa.logsumexp, 4 * n);
  const Scratch& sc = v.scratch;
  add("d_residual", sc.d_residual, 2 * n * d);
  add("d_norm_out", sc.d_norm_out, 2 * n * d);
  add("d_q", sc.d_q, 2 * n * s.q_dim());
  add("d_k", sc.d_k, 2 * n * s.kv_dim());
  add("d_v", sc.d_v, 2 * n * s.kv_dim());
  add("d_attn_out", sc.d_attn_out, 2 * n * s.q_dim());
  add("d_probs", sc.d_probs, 2 * p);
  add("d_swiglu", sc.d_swiglu, 2 * n * f);
  add("d_gate", sc.d_gate, 2 * n * f);
  add("d_up", sc.d_up, 2 * n * f);
  add("rmsnorm scratch", sc.rmsnorm, 4);  // its size is the ops' business; at least one float
  add("sum_sq_partials", sc.sum_sq_partials, 8);
  add("sum_sq", sc.sum_sq, 8);
  add("grad_scale", sc.grad_scale, 4);
  add("grad_norm", sc.grad_norm, 4);
  add("lora scratch", sc.lora, 2 * n * lora.rank);
  for (size_t i = 0; i < v.lora_h.size(); ++i) add("lora h " + std::to_string(i), v.lora_h[i], 2 * n * lora.rank);
  return views;
}

void expect_aligned_disjoint_and_inside(const ModelShape& shape, int64_t batch, const LoraSpec& lora,
                                        bool fused_attention) {
  const ParameterLayout layout(shape, lora);
  const EngineViews counted = carve_engine_views(shape, layout, batch, fused_attention, EngineViewBases{});
  const EngineViewSizes& z = counted.sizes;
  AlignedBytes act(z.activations * 2), stats(z.activation_stats * 4), sb(z.scratch_bf16 * 2),
      sf(z.scratch_fp32 * 4), sd(z.scratch_fp64 * 8);
  const EngineViewBases bases{reinterpret_cast<bf16*>(act.data.get()), reinterpret_cast<float*>(stats.data.get()),
                              reinterpret_cast<bf16*>(sb.data.get()), reinterpret_cast<float*>(sf.data.get()),
                              reinterpret_cast<double*>(sd.data.get())};
  const EngineViews real = carve_engine_views(shape, layout, batch, fused_attention, bases);
  EXPECT_EQ(real.sizes.activations, z.activations);
  EXPECT_EQ(real.sizes.activation_stats, z.activation_stats);
  EXPECT_EQ(real.sizes.scratch_bf16, z.scratch_bf16);
  EXPECT_EQ(real.sizes.scratch_fp32, z.scratch_fp32);
  EXPECT_EQ(real.sizes.scratch_fp64, z.scratch_fp64);
  EXPECT_EQ(real.lora_h.size(), layout.lora_adapters().size());
  for (const LayerActivations& a : real.layers) {
    EXPECT_EQ(a.probs == nullptr, fused_attention);
    EXPECT_EQ(a.attn_stats == nullptr, !fused_attention);
  }
  EXPECT_EQ(real.scratch.d_probs == nullptr, fused_attention);
  EXPECT_EQ(real.scratch.lora == nullptr, !lora.enabled());

  const AlignedBytes* buffers[] = {&act, &stats, &sb, &sf, &sd};
  std::vector<View> views = all_views(real, shape, batch, lora);
  std::sort(views.begin(), views.end(), [](const View& a, const View& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < views.size(); ++i) {
    const View& v = views[i];
    const auto* p = static_cast<const unsigned char*>(v.begin);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kViewAlignmentBytes, 0u) << v.name;
    const AlignedBytes* home = nullptr;
    for (const AlignedBytes* b : buffers)
      if (p >= b->data.get() && p < b->data.get() + b->size) home = b;
    ASSERT_NE(home, nullptr) << v.name << " lies in none of the allocations";
    EXPECT_LE(p + v.bytes, home->data.get() + home->size) << v.name << " runs past its allocation";
    if (i + 1 < views.size() && views[i + 1].begin < home->data.get() + home->size) {
      EXPECT_LE(p + v.bytes, static_cast<const unsigned char*>(views[i + 1].begin))
          << v.name << " overlaps " << views[i + 1].name;
    }
  }
}

TEST(EngineViews, EveryViewIsAlignedInsideItsAllocationAndDisjointAtAnOddLength) {
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "cuDNN attention" : "GEMM attention");
    expect_aligned_disjoint_and_inside(odd_shape(), 3, LoraSpec{}, fused);
  }
}

TEST(EngineViews, LoraAdaptersGetTheirOwnAlignedViews) {
  LoraSpec lora;
  lora.rank = 3;  // an odd rank: n·rank is odd too
  lora.targets = {ParamKind::kWq, ParamKind::kWv, ParamKind::kWDown};
  expect_aligned_disjoint_and_inside(odd_shape(), 1, lora, false);
}

// The alignment's cost: at most one 256-byte gap per view, nothing at the
// presets' shapes, where every slice is a multiple of 256 bytes already.
TEST(EngineViews, AlignmentAddsAtMostOneGapPerView) {
  const ModelShape s = odd_shape();
  const ParameterLayout layout(s);
  const int64_t batch = 3, n = batch * s.seq_len;
  const EngineViewSizes z = carve_engine_views(s, layout, batch, false, EngineViewBases{}).sizes;
  const int64_t packed = s.n_layers * (4 * n * s.d_model + 2 * n * s.q_dim() + 2 * n * s.kv_dim() +
                                       batch * s.n_heads * s.seq_len * s.seq_len + 3 * n * s.ffn_hidden) +
                         2 * n * s.d_model + n * 128;  // the logits' rows: 101 padded to 128
  const int64_t views = s.n_layers * 12 + 3;
  EXPECT_GE(z.activations, packed);
  EXPECT_LE(z.activations, packed + views * (kViewAlignmentBytes / 2));
  EXPECT_GT(z.activations, packed) << "T = 37 should have needed gaps";

  ModelShape preset = s;  // h200-gpt2-124m's widths at a short length: all multiples of 256 bytes
  preset.vocab = 50257;
  preset.d_model = 768;
  preset.n_heads = preset.n_kv_heads = 12;
  preset.ffn_hidden = 3072;
  preset.seq_len = 128;
  const int64_t np = 2 * preset.seq_len;
  const EngineViewSizes zp = carve_engine_views(preset, ParameterLayout(preset), 2, false, EngineViewBases{}).sizes;
  EXPECT_EQ(zp.activations, preset.n_layers * (8 * np * 768 + 2 * 12 * 128 * 128 + 3 * np * 3072) +
                                2 * np * 768 + np * 50304);
}

}  // namespace
}  // namespace trainbench::cuda
