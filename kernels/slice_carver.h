// Hands out consecutive slices of one allocation: how every engine turns its
// one-buffer-per-kind allocations into named tensor views.
#pragma once

#include <cstdint>  // int64_t

namespace trainbench {

template <typename T>
class SliceCarver {
 public:
  // Every slice starts `alignment` elements after the allocation's start, a
  // multiple of it (1: packed back to back). A null base makes a counting
  // pass: take() returns null and used() is what the allocation must hold,
  // so an engine can size its buffers by the very carving that assigns them.
  explicit SliceCarver(T* base, int64_t alignment = 1) : base_(base), alignment_(alignment) {}
  T* take(int64_t count) {
    T* slice = base_ == nullptr ? nullptr : base_ + used_;
    used_ += (count + alignment_ - 1) / alignment_ * alignment_;
    return slice;
  }
  int64_t used() const { return used_; }

 private:
  T* base_;
  int64_t alignment_;
  int64_t used_ = 0;
};

}  // namespace trainbench
