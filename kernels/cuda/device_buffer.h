// Owning device and pinned-host allocations. One allocation per kind of state
// (DESIGN.md): the engine carves named tensor views out of each. Never managed
// memory: every byte's placement is explicit.
#pragma once

#include <cuda_runtime.h>  // cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost

#include <cstddef>  // size_t
#include <utility>  // std::exchange

#include "kernels/cuda/cuda_check.h"  // TRAINBENCH_CUDA_CHECK

namespace trainbench::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count > 0) TRAINBENCH_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* get() const { return data_; }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  void release() {
    // A destructor must not throw; a failing cudaFree here means the context
    // is already gone, and the error has been reported by the call that broke it.
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
  }
  T* data_ = nullptr;
  size_t count_ = 0;
};

// Page-locked host memory: the staging area for asynchronous copies (batches
// in, checkpoints out).
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count) : count_(count) {
    if (count > 0) TRAINBENCH_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      if (data_ != nullptr) cudaFreeHost(data_);
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  T* get() const { return data_; }
  size_t count() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace trainbench::cuda
