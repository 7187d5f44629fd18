// Hands out consecutive slices of one allocation: how every engine turns its
// one-buffer-per-kind allocations into named tensor views.
#pragma once

#include <cstdint>  // int64_t

namespace trainbench {

template <typename T>
class SliceCarver {
 public:
  explicit SliceCarver(T* base) : next_(base) {}
  T* take(int64_t count) {
    T* slice = next_;
    next_ += count;
    return slice;
  }

 private:
  T* next_;
};

}  // namespace trainbench
