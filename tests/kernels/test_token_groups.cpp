// group_rows_by_token: the CUDA engine's embedding backward adds each
// token's rows in row order from these groups, so they must hold every row
// once, in its token's group, in increasing order; and the scratch must come
// back zero for the next micro-batch.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/token_groups.h"

namespace trainbench {
namespace {

struct Grouped {
  std::vector<int32_t> rows, offsets, tokens;
};

Grouped group(const std::vector<int32_t>& tokens, int64_t vocab, std::vector<int32_t>& scratch) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  Grouped g{std::vector<int32_t>(n, -7), std::vector<int32_t>(n + 1, -7), std::vector<int32_t>(n, -7)};
  const int64_t count = group_rows_by_token(tokens.data(), n, vocab, g.rows.data(), g.offsets.data(),
                                            g.tokens.data(), scratch);
  g.offsets.resize(count + 1);
  g.tokens.resize(count);
  return g;
}

TEST(TokenGroups, AHandExample) {
  std::vector<int32_t> scratch;
  const Grouped g = group({5, 2, 5, 0, 2, 5}, 8, scratch);
  EXPECT_EQ(g.tokens, (std::vector<int32_t>{5, 2, 0}));  // order of first appearance
  EXPECT_EQ(g.offsets, (std::vector<int32_t>{0, 3, 5, 6}));
  EXPECT_EQ(g.rows, (std::vector<int32_t>{0, 2, 5, 1, 4, 3}));
  EXPECT_EQ(scratch, std::vector<int32_t>(8, 0));
}

TEST(TokenGroups, EveryRowOnceInItsTokensGroupInRowOrder) {
  std::mt19937 rng(3);
  std::vector<int32_t> scratch;
  for (const int64_t vocab : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{128256}}) {
    std::uniform_int_distribution<int32_t> uniform(0, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> tokens(4099);
    for (int32_t& t : tokens) t = uniform(rng);
    const Grouped g = group(tokens, vocab, scratch);  // the scratch reused from the last vocab
    std::vector<int> seen(tokens.size(), 0);
    std::vector<int> groups_of_token(static_cast<size_t>(vocab), 0);
    ASSERT_EQ(g.offsets.front(), 0);
    ASSERT_EQ(g.offsets.back(), static_cast<int32_t>(tokens.size()));
    for (size_t k = 0; k < g.tokens.size(); ++k) {
      ++groups_of_token[static_cast<size_t>(g.tokens[k])];
      ASSERT_LT(g.offsets[k], g.offsets[k + 1]) << "empty group " << k;
      for (int32_t i = g.offsets[k]; i < g.offsets[k + 1]; ++i) {
        const int32_t row = g.rows[static_cast<size_t>(i)];
        EXPECT_EQ(tokens[static_cast<size_t>(row)], g.tokens[k]) << "row " << row;
        ++seen[static_cast<size_t>(row)];
        if (i > g.offsets[k]) {
          EXPECT_LT(g.rows[static_cast<size_t>(i) - 1], row) << "group " << k;
        }
      }
    }
    for (size_t r = 0; r < seen.size(); ++r) EXPECT_EQ(seen[r], 1) << "row " << r;
    for (int v : groups_of_token) EXPECT_LE(v, 1) << "a token split over two groups";
    if (vocab == 1) {
      EXPECT_EQ(g.tokens.size(), 1u);
    }
    for (int32_t s : scratch) ASSERT_EQ(s, 0) << "scratch not left zero (vocab " << vocab << ")";
  }
}

TEST(TokenGroups, ATokenOutsideTheVocabularyNamesItsRowAndLeavesTheScratchZero) {
  std::vector<int32_t> scratch;
  const std::vector<int32_t> tokens{1, 2, 9, 3};
  std::vector<int32_t> rows(4), offsets(5), group_tokens(4);
  try {
    group_rows_by_token(tokens.data(), 4, 8, rows.data(), offsets.data(), group_tokens.data(), scratch);
    FAIL() << "token 9 with vocab 8 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token 9 at row 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(scratch, std::vector<int32_t>(8, 0));
  const std::vector<int32_t> negative{0, -1};
  EXPECT_THROW(group_rows_by_token(negative.data(), 2, 8, rows.data(), offsets.data(), group_tokens.data(), scratch),
               std::invalid_argument);
  EXPECT_EQ(scratch, std::vector<int32_t>(8, 0));
}

}  // namespace
}  // namespace trainbench
