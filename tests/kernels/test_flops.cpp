// model_flops_per_token against a hand count and against 6N + 12·L·H·Q·T.
#include <gtest/gtest.h>

#include "kernels/datasheet_peak.h"
#include "kernels/flops.h"

namespace trainbench {
namespace {

TEST(Flops, MatchesAHandCountForOneConfig) {
  // head_dim 16, kv_dim 32
  const ModelShape s{.vocab = 1000, .d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 128, .seq_len = 32};
  const ParameterLayout layout(s);
  // Forward GEMM FLOPs per token, per layer: 2·(wq 64·64 + wk 32·64 + wv 32·64 + wo 64·64
  //   + gate 128·64 + up 128·64 + down 64·128) = 2·(4096+2048+2048+4096+8192·3) = 2·36864;
  // LM head 2·1000·64.  Attention forward per layer: QKᵀ 2·T·q_dim + P·V 2·T·q_dim = 4·32·64.
  const double gemm_forward = 2 * (2.0 * 36864) + 2.0 * 1000 * 64;
  const double attention_forward = 2 * (4.0 * 32 * 64);
  const FlopsPerToken flops = model_flops_per_token(s, layout);
  EXPECT_DOUBLE_EQ(flops.gemm_forward, gemm_forward);
  EXPECT_DOUBLE_EQ(flops.gemm_backward, 2 * gemm_forward);
  EXPECT_DOUBLE_EQ(flops.attention_forward, attention_forward);
  EXPECT_DOUBLE_EQ(flops.attention_backward, 2 * attention_forward);
  EXPECT_DOUBLE_EQ(flops.total(), 3 * (gemm_forward + attention_forward));
}

TEST(Flops, WithinFivePercentOfTheRuleOfThumbForAMultiHeadConfig) {
  // GPT-2-small-like shapes: the rule counts norm gains in N, we do not.
  ModelShape s{.vocab = 50257, .d_model = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12,
               .ffn_hidden = 3072, .seq_len = 1024};
  const ParameterLayout layout(s);
  const double ours = model_flops_per_token(s, layout).total();
  const double rule = rule_of_thumb_flops_per_token(s, layout);
  EXPECT_NEAR(ours / rule, 1.0, 0.05);
  EXPECT_NE(ours, rule);  // not the same formula: norms are in N, not in our GEMMs
}

TEST(Flops, FrozenWeightsSkipTheirWeightGradientGemm) {
  ModelShape s{.vocab = 256, .d_model = 32, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2,
               .ffn_hidden = 64, .seq_len = 16};
  ParameterLayout layout(s);
  const FlopsPerToken full = model_flops_per_token(s, layout);
  layout.set_trainable(ParamKind::kWq, false);
  const FlopsPerToken frozen = model_flops_per_token(s, layout);
  EXPECT_DOUBLE_EQ(full.gemm_backward - frozen.gemm_backward, 2.0 * 32 * 32);
  EXPECT_DOUBLE_EQ(full.gemm_forward, frozen.gemm_forward);
}

TEST(Flops, LoraCountsTheAdaptersAndNoWeightGradientOfTheBase) {
  // The hand-count shape above with LoRA rank 8 on q and v.
  const ModelShape s{.vocab = 1000, .d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 128, .seq_len = 32};
  const ParameterLayout layout(s, LoraSpec{8, 16.0, {ParamKind::kWq, ParamKind::kWv}});
  const double base_forward = 2 * (2.0 * 36864) + 2.0 * 1000 * 64;
  // Per layer: q's A 8·64 and B 64·8, v's A 8·64 and B 32·8.
  const double adapter_elements = 2 * (8 * 64 + 64 * 8 + 8 * 64 + 32 * 8);
  const FlopsPerToken flops = model_flops_per_token(s, layout);
  EXPECT_DOUBLE_EQ(flops.gemm_forward, base_forward + 2 * adapter_elements);
  // Backward: input gradients through every projection (frozen or not);
  // weight gradients of the adapters only.
  EXPECT_DOUBLE_EQ(flops.gemm_backward, base_forward + 4 * adapter_elements);
  EXPECT_DOUBLE_EQ(flops.attention_backward, 2 * flops.attention_forward);
  // Cheaper than full fine-tuning by about the base's weight-gradient GEMMs.
  const FlopsPerToken full = model_flops_per_token(s, ParameterLayout(s));
  EXPECT_DOUBLE_EQ(full.total() - flops.total(), base_forward - 6 * adapter_elements);
}

// MFU's peak by the device names CUDA reports. The NVL parts (H100 NVL,
// H200 NVL: 835 dense) were given the SXM figure, understating their MFU by
// 16%; an unknown GPU has none (MFU against the GEMM ceiling only).
TEST(DatasheetPeak, KnowsTheSxmNvlAndPcieParts) {
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA H200"), 989e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA GH200 480GB"), 989e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA H100 NVL"), 835e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA H200 NVL"), 835e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA A100 80GB PCIe"), 312e12);
  EXPECT_EQ(datasheet_bf16_peak_flops("NVIDIA L40S"), 0.0);
  EXPECT_EQ(datasheet_bf16_peak_flops(""), 0.0);
}

}  // namespace
}  // namespace trainbench
