// Order statistics for per-step timings (median, p10, p90), as numpy's
// default linear interpolation computes them.
#pragma once

#include <algorithm>  // std::sort
#include <cmath>      // std::floor
#include <vector>

namespace trainbench {

// q in [0, 1]; an empty input gives 0.
inline double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + (values[above] - values[below]) * fraction;
}

inline double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

}  // namespace trainbench
