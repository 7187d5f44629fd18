// The one error measure every comparison test uses: ‖actual − expected‖₂ /
// ‖expected‖₂, accumulated in double. A NaN anywhere in `actual` (a poisoned
// element the code under test never wrote) makes the result NaN, which fails
// every `<=`.
#pragma once

#include <cmath>    // std::sqrt, NAN
#include <cstdint>  // int64_t
#include <vector>

namespace trainbench::testing {

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

// Vectors of different sizes compare as NaN: never within a tolerance.
inline double relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return NAN;
  return relative_error(actual.data(), expected.data(), static_cast<int64_t>(actual.size()));
}

}  // namespace trainbench::testing
