// Initialisation is deterministic, thread-count independent and has the
// documented statistics.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/parameter_init.h"

namespace trainbench {
namespace {

ModelShape init_shape() {
  ModelShape s{.vocab = 512, .d_model = 128, .n_layers = 8, .n_heads = 4, .n_kv_heads = 4,
               .ffn_hidden = 256, .seq_len = 16};
  return s;
}

TEST(ParameterInit, SameSeedSameWeightsOnAnyThreadCount) {
  const ModelShape s = init_shape();
  const ParameterLayout layout(s);
  std::vector<float> one(layout.total_params()), many(layout.total_params());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  init_parameters_host(layout, s.n_layers, 7, one.data());
  omp_set_num_threads(4);
  init_parameters_host(layout, s.n_layers, 7, many.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, many);
  std::vector<float> other(layout.total_params());
  init_parameters_host(layout, s.n_layers, 8, other.data());
  EXPECT_NE(one, other);
}

TEST(ParameterInit, StatisticsPerKind) {
  const ModelShape s = init_shape();
  const ParameterLayout layout(s);
  std::vector<float> p(layout.total_params());
  init_parameters_host(layout, s.n_layers, 3, p.data());
  auto stddev_of = [&](const ParamTensor& t) {
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      sum += p[t.offset + i];
      sum_sq += static_cast<double>(p[t.offset + i]) * p[t.offset + i];
    }
    const double mean = sum / t.numel;
    EXPECT_NEAR(mean, 0.0, 0.002) << t.name;
    return std::sqrt(sum_sq / t.numel - mean * mean);
  };
  EXPECT_NEAR(stddev_of(layout.get(ParamKind::kTokenEmbedding)), 0.02, 0.001);
  EXPECT_NEAR(stddev_of(layout.get(ParamKind::kWGate, 0)), 0.02, 0.001);
  EXPECT_NEAR(stddev_of(layout.get(ParamKind::kWDown, 0)), 0.02 / std::sqrt(16.0), 0.0005);
  const ParamTensor& norm = layout.get(ParamKind::kMlpNorm, 5);
  for (int64_t i = 0; i < norm.numel; ++i) ASSERT_EQ(p[norm.offset + i], 1.0f);
}

TEST(ParameterInit, LoraBaseMatchesTheFullModelAndAdaptersStartAsPeftDoes) {
  const ModelShape s{.vocab = 64, .d_model = 32, .n_layers = 2, .n_heads = 2, .n_kv_heads = 2,
                     .ffn_hidden = 64, .seq_len = 8};
  const ParameterLayout full(s);
  const ParameterLayout lora(s, LoraSpec{4, 8.0, {ParamKind::kWq, ParamKind::kWUp}});
  std::vector<float> a(full.total_params()), b(lora.total_params());
  init_parameters_host(full, s.n_layers, 9, a.data());
  init_parameters_host(lora, s.n_layers, 9, b.data());
  for (int64_t i = 0; i < full.total_params(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  for (const ParamTensor& t : lora.tensors()) {
    if (t.kind != ParamKind::kLoraA && t.kind != ParamKind::kLoraB) continue;
    double sum_sq = 0, max_abs = 0;
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      sum_sq += static_cast<double>(b[i]) * b[i];
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(b[i])));
    }
    if (t.kind == ParamKind::kLoraB) {
      EXPECT_EQ(sum_sq, 0.0) << t.name << " must start at zero";
    } else {
      // U(−1/√in, 1/√in): bounded, variance 1/(3·in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));
      EXPECT_LE(max_abs, bound) << t.name;
      EXPECT_NEAR(sum_sq / t.numel, bound * bound / 3, 0.3 * bound * bound / 3) << t.name;
    }
  }
}

}  // namespace
}  // namespace trainbench
