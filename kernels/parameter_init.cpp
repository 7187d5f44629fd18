#include "kernels/parameter_init.h"

#include <algorithm>  // std::fill_n
#include <cmath>      // std::sqrt, std::log, std::cos

namespace trainbench {

namespace {
// splitmix64: a strong 64-bit mixer; two outputs per index feed Box–Muller.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double to_unit_open(uint64_t bits) {  // (0, 1]
  return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}
}  // namespace

double counter_uniform(uint64_t seed, uint64_t index) {
  return to_unit_open(splitmix64(splitmix64(seed ^ 0x94D049BB133111EBull) + index)) -
         1.0 / 9007199254740992.0;  // [0, 1)
}

float counter_normal(uint64_t seed, uint64_t index) {
  const uint64_t base = splitmix64(seed ^ 0xD1B54A32D192ED03ull) + 2 * index;
  const double u1 = to_unit_open(splitmix64(base));
  const double u2 = to_unit_open(splitmix64(base + 1));
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void init_parameters_host(const ParameterLayout& layout, int64_t n_layers, uint64_t seed,
                          float* params) {
  constexpr float kStd = 0.02f;
  const float residual_std = kStd / std::sqrt(2.0f * static_cast<float>(n_layers));
  for (const ParamTensor& t : layout.tensors()) {
    float* dst = params + t.offset;
    if (t.kind == ParamKind::kLoraB) {  // zero: training starts from the base model
      std::fill_n(dst, t.numel, 0.0f);
      continue;
    }
    if (t.kind == ParamKind::kLoraA) {
      // PEFT's default, kaiming_uniform(a = √5): U(−1/√in, 1/√in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < t.numel; ++i)
        dst[i] = static_cast<float>(bound * (2.0 * counter_uniform(seed, static_cast<uint64_t>(t.offset + i)) - 1.0));
      continue;
    }
    if (!t.is_matrix()) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < t.numel; ++i) dst[i] = 1.0f;
      continue;
    }
    const bool residual_out = t.kind == ParamKind::kWo || t.kind == ParamKind::kWDown;
    const float std_dev = residual_out ? residual_std : kStd;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < t.numel; ++i)
      dst[i] = std_dev * counter_normal(seed, static_cast<uint64_t>(t.offset + i));
  }
}

}  // namespace trainbench
