// A micro-batch's rows grouped by token id, for the CUDA engine's embedding
// backward: one thread per (group, column) adds the group's rows in row order
// into that token's gradient row. Without the grouping each column is one
// thread walking all n rows (the only way to add repeated tokens in a fixed
// order without atomics), d threads in all: 3 blocks at GPT-2's d_model.
// Built on the host, where the tokens are anyway, in O(n).
#pragma once

#include <cstdint>  // int32_t, int64_t
#include <vector>

namespace trainbench {

// Writes, for the n tokens (each in [0, vocab)):
//   group_tokens[g]            the token of group g, groups in order of first appearance;
//   group_offsets[g], [g + 1]  where group g's rows start and end in `rows` (offsets[count] = n);
//   rows[...]                  row indices, each group's in increasing order.
// Returns the number of groups. `scratch` is vocab entries of zero (resized
// when smaller) and is left zero. Throws std::invalid_argument, naming the row,
// for a token outside [0, vocab).
int64_t group_rows_by_token(const int32_t* tokens, int64_t n, int64_t vocab, int32_t* rows,
                            int32_t* group_offsets, int32_t* group_tokens, std::vector<int32_t>& scratch);

}  // namespace trainbench
