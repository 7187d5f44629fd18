// STORAGE READ. Which shards each reader thread of each rank reads, epoch by
// epoch. Every rank shuffles the whole list with the same seed per epoch,
// then, as webdataset's split_by_node followed by split_by_worker:
//   rank r takes  order[r], order[r + world], order[r + 2 world], ...
//   reader w of that rank takes every readers-th of those, starting at w.
// So each shard is read by exactly one reader of one rank per epoch, and the
// split depends only on (seed, epoch, world, readers).
#pragma once

#include <cstdint>  // int64_t, uint64_t
#include <vector>

namespace trainbench {

// A permutation of [0, shard_count) for this epoch: the same on every rank
// and every platform (own Fisher-Yates over splitmix64, not std::shuffle,
// whose algorithm the standard leaves open).
std::vector<int64_t> epoch_shard_order(int64_t shard_count, uint64_t seed, int64_t epoch);

// Indices into the shard list for reader `reader` of rank `rank`.
std::vector<int64_t> shards_for_reader(int64_t shard_count, uint64_t seed, int64_t epoch,
                                       int64_t rank, int64_t world, int64_t reader,
                                       int64_t readers);

// splitmix64: the generator behind every seeded choice of the loader. One
// word of state, so a position saves it exactly.
inline uint64_t splitmix64_next(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (Lemire's multiply-shift with rejection).
inline uint64_t splitmix64_below(uint64_t* state, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const unsigned __int128 product =
        static_cast<unsigned __int128>(splitmix64_next(state)) * bound;
    if (static_cast<uint64_t>(product) >= threshold) return static_cast<uint64_t>(product >> 64);
  }
}

}  // namespace trainbench
