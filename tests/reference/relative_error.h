// The one error measure the reference tests use: ‖actual − expected‖₂ / ‖expected‖₂,
// accumulated in double. A NaN anywhere in `actual` (a poisoned element the
// code under test never wrote) makes the result NaN, which fails every `<=`.
#pragma once

#include <cmath>    // std::sqrt
#include <cstdint>  // int64_t

#include <torch/torch.h>  // the tensor overload

namespace trainbench::reference {

// When `expected` is all zeros the absolute norm of `actual` is returned, so an
// exact-zero expectation is still checked.
inline double relative_error(const float* actual, const float* expected, int64_t count) {
  double diff_squared = 0.0;
  double expected_squared = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double diff = static_cast<double>(actual[i]) - static_cast<double>(expected[i]);
    diff_squared += diff * diff;
    expected_squared += static_cast<double>(expected[i]) * static_cast<double>(expected[i]);
  }
  if (expected_squared == 0.0) return std::sqrt(diff_squared);
  return std::sqrt(diff_squared / expected_squared);
}

inline double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const torch::Tensor a = actual.detach().to(torch::kFloat32).contiguous();
  const torch::Tensor e = expected.detach().to(torch::kFloat32).contiguous();
  TORCH_CHECK(a.numel() == e.numel(), "relative_error: ", a.numel(), " vs ", e.numel(),
              " elements");
  return relative_error(a.data_ptr<float>(), e.data_ptr<float>(), a.numel());
}

}  // namespace trainbench::reference
