// Random token batches for engine tests, owning their storage.
#pragma once

#include <cstdint>  // int32_t
#include <random>   // std::mt19937
#include <vector>

#include "kernels/engine.h"  // EngineOptions, TokenBatch

namespace trainbench::testing {

struct Tokens {
  std::vector<int32_t> inputs, targets;
  TokenBatch batch(const EngineOptions& o) const {
    return TokenBatch{inputs.data(), targets.data(), o.micro_batch, o.shape.seq_len};
  }
};

// micro_batch · seq_len uniform token ids in [0, vocab) for inputs and targets.
inline Tokens random_tokens(const EngineOptions& o, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(o.shape.vocab - 1));
  Tokens t;
  for (int64_t i = 0; i < o.micro_batch * o.shape.seq_len; ++i) {
    t.inputs.push_back(token(rng));
    t.targets.push_back(token(rng));
  }
  return t;
}

}  // namespace trainbench::testing
