// ZeRO-1's cut of the gradient buffer (zero_optimizer.h): the shards tile the
// trainable elements in rank order, every non-empty one starts on 256 bytes,
// and the padded buffers hold `world` whole blocks.
#include <gtest/gtest.h>

#include <algorithm>  // std::min
#include <cstdint>

#include "trainer/zero_optimizer.h"

namespace trainbench {
namespace {

TEST(ZeroShard, ShardsTileTheElementsAndStartOn256Bytes) {
  // 1,923,125,248: h200-llama8b-4l's parameters. Over 24 ranks (3 nodes of
  // 8) the plain ceil(e / world) blocks were 80,130,219 elements, odd: every
  // rank but the first had an unaligned shard.
  for (const int64_t elements : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{164160},
                                 int64_t{1923125248}}) {
    for (const int world : {1, 2, 3, 4, 8, 16, 24}) {
      SCOPED_TRACE(std::to_string(elements) + " elements over " + std::to_string(world) + " ranks");
      const int64_t padded = zero_padded_elements(elements, world);
      EXPECT_EQ(padded % zero_padding_multiple(world), 0);
      EXPECT_GE(padded, elements);
      EXPECT_LT(padded - elements, zero_padding_multiple(world));
      const int64_t block = padded / world;
      int64_t next = 0;
      for (int rank = 0; rank < world; ++rank) {
        const EngineOptions::OptimizerShard shard = zero_shard(elements, rank, world);
        EXPECT_EQ(shard.begin, next) << "rank " << rank;
        EXPECT_EQ(shard.begin, std::min<int64_t>(rank * block, elements)) << "rank " << rank;
        EXPECT_LE(shard.end - shard.begin, block) << "rank " << rank;
        if (shard.end > shard.begin) {
          EXPECT_EQ(shard.begin * static_cast<int64_t>(sizeof(float)) % 256, 0) << "rank " << rank;
        }
        next = shard.end;
      }
      EXPECT_EQ(next, elements);
    }
  }
}

TEST(ZeroShard, BlocksAreTheCeilingRoundedUpTo64Elements) {
  // 164160 / 16 = 10260, rounded up to 64: 10304.
  EXPECT_EQ(zero_padded_elements(164160, 16), 16 * 10304);
  const EngineOptions::OptimizerShard second = zero_shard(164160, 1, 16);
  EXPECT_EQ(second.begin, 10304);
  EXPECT_EQ(second.end, 2 * 10304);
  const EngineOptions::OptimizerShard last = zero_shard(164160, 15, 16);
  EXPECT_EQ(last.begin, 15 * 10304);
  EXPECT_EQ(last.end, 164160);
  // Fewer elements than blocks: the later ranks' shards are empty.
  const EngineOptions::OptimizerShard empty = zero_shard(100, 3, 4);
  EXPECT_EQ(empty.begin, 100);
  EXPECT_EQ(empty.end, 100);
}

}  // namespace
}  // namespace trainbench
