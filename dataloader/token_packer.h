// STORAGE READ. Packs samples' tokens into training windows of seq_len + 1
// tokens across sample boundaries, an EOS separator after every sample, as
// llm.c and torchtitan do: no padding, no token dropped. Consecutive windows
// share one token (llm.c's layout): the last target of a window is the first
// input of the next, so every token is predicted exactly once.
#pragma once

#include <cstdint>  // int32_t, int64_t
#include <memory>   // std::shared_ptr
#include <vector>

namespace trainbench {

// One sample's token ids, immutable once decoded: shared between the shuffle
// buffer, the packer and the position snapshots without copying.
using SharedTokens = std::shared_ptr<const std::vector<int32_t>>;

// Everything needed to continue packing exactly where it stopped.
struct PackerState {
  std::vector<int32_t> partial;  // the window being filled (< seq_len + 1 tokens)
  SharedTokens current;          // sample being consumed (may be null)
  int64_t offset = 0;            // next token of `current` to take
  bool eos_pending = false;      // `current` is used up but its separator is not yet placed
};

class TokenPacker {
 public:
  TokenPacker(int64_t seq_len, int32_t eos_token);

  // True when the current sample (and its separator) is used up.
  bool needs_sample() const;
  // Starts packing the next sample; call only when needs_sample().
  void feed(SharedTokens sample);
  // Writes seq_len + 1 tokens to `window` when enough are in; false means
  // feed another sample first.
  bool fill_window(int32_t* window);

  const PackerState& state() const { return state_; }
  void restore(PackerState state) { state_ = std::move(state); }

 private:
  int64_t window_tokens_;  // seq_len + 1
  int32_t eos_token_;
  PackerState state_;
};

}  // namespace trainbench
