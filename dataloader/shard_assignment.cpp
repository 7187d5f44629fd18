#include "dataloader/shard_assignment.h"

#include <cstddef>  // size_t
#include <numeric>  // std::iota
#include <utility>  // std::swap

namespace trainbench {

std::vector<int64_t> epoch_shard_order(int64_t shard_count, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(shard_count));
  std::iota(order.begin(), order.end(), 0);
  // Seed and epoch mixed through one splitmix step each so that nearby seeds
  // and epochs give unrelated orders.
  uint64_t state = seed;
  state = splitmix64_next(&state) ^ static_cast<uint64_t>(epoch);
  for (int64_t i = shard_count - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64_below(&state, static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> shards_for_reader(int64_t shard_count, uint64_t seed, int64_t epoch,
                                       int64_t rank, int64_t world, int64_t reader,
                                       int64_t readers) {
  const std::vector<int64_t> order = epoch_shard_order(shard_count, seed, epoch);
  std::vector<int64_t> mine;
  int64_t position_on_rank = 0;  // index among this rank's shards
  for (int64_t i = rank; i < shard_count; i += world, ++position_on_rank)
    if (position_on_rank % readers == reader) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace trainbench
