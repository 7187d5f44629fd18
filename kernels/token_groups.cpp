#include "kernels/token_groups.h"

#include <stdexcept>  // std::invalid_argument
#include <string>

namespace trainbench {

int64_t group_rows_by_token(const int32_t* tokens, int64_t n, int64_t vocab, int32_t* rows,
                            int32_t* group_offsets, int32_t* group_tokens, std::vector<int32_t>& scratch) {
  if (static_cast<int64_t>(scratch.size()) < vocab) scratch.assign(static_cast<size_t>(vocab), 0);
  // Pass 1: occurrences per token (scratch[t] > 0).
  for (int64_t r = 0; r < n; ++r) {
    const int32_t t = tokens[r];
    if (t < 0 || t >= vocab) {
      for (int64_t back = 0; back < r; ++back) scratch[static_cast<size_t>(tokens[back])] = 0;
      throw std::invalid_argument("token " + std::to_string(t) + " at row " + std::to_string(r) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    ++scratch[static_cast<size_t>(t)];
  }
  // Pass 2: a group per token at its first appearance; scratch[t] becomes
  // −(next write position) − 1, negative, so a seen token is not opened again.
  int64_t groups = 0;
  int32_t position = 0;
  for (int64_t r = 0; r < n; ++r) {
    int32_t& entry = scratch[static_cast<size_t>(tokens[r])];
    if (entry <= 0) continue;
    group_tokens[groups] = tokens[r];
    group_offsets[groups] = position;
    ++groups;
    const int32_t count = entry;
    entry = -position - 1;
    position += count;
  }
  group_offsets[groups] = static_cast<int32_t>(n);
  // Pass 3: rows in order into their group's next slot.
  for (int64_t r = 0; r < n; ++r) {
    int32_t& entry = scratch[static_cast<size_t>(tokens[r])];
    rows[-entry - 1] = static_cast<int32_t>(r);
    --entry;
  }
  for (int64_t g = 0; g < groups; ++g) scratch[static_cast<size_t>(group_tokens[g])] = 0;
  return groups;
}

}  // namespace trainbench
