#include "dataloader/token_packer.h"

#include <algorithm>  // std::min, std::copy_n
#include <utility>    // std::move

namespace trainbench {

TokenPacker::TokenPacker(int64_t seq_len, int32_t eos_token)
    : window_tokens_(seq_len + 1), eos_token_(eos_token) {
  state_.partial.reserve(static_cast<size_t>(window_tokens_));
}

bool TokenPacker::needs_sample() const {
  if (state_.eos_pending) return false;
  return state_.current == nullptr ||
         state_.offset >= static_cast<int64_t>(state_.current->size());
}

void TokenPacker::feed(SharedTokens sample) {
  state_.current = std::move(sample);
  state_.offset = 0;
  state_.eos_pending = true;  // placed once the sample's tokens are in
}

bool TokenPacker::fill_window(int32_t* window) {
  std::vector<int32_t>& partial = state_.partial;
  while (static_cast<int64_t>(partial.size()) < window_tokens_) {
    const int64_t need = window_tokens_ - static_cast<int64_t>(partial.size());
    const int64_t left = state_.current == nullptr
                             ? 0
                             : static_cast<int64_t>(state_.current->size()) - state_.offset;
    if (left > 0) {
      const int64_t take = std::min(need, left);
      const int32_t* from = state_.current->data() + state_.offset;
      partial.insert(partial.end(), from, from + take);
      state_.offset += take;
    } else if (state_.eos_pending) {
      partial.push_back(eos_token_);
      state_.eos_pending = false;
      state_.current.reset();  // its tokens are all placed: let the sample go
      state_.offset = 0;
    } else {
      return false;
    }
  }
  std::copy_n(partial.data(), window_tokens_, window);
  // The window's last token opens the next window.
  partial.front() = partial.back();
  partial.resize(1);
  return true;
}

}  // namespace trainbench
