// Bench buffers on the GPU, for the NCCL backend: the communicator's current
// CUDA device (it set it when it was made, on this thread), which the buffer
// keeps and sets again for each of its calls, so that a thread whose current
// device is another (CUDA's default, GPU 0) cannot put them on the wrong GPU. Every copy and
// memset is followed by a device synchronize, outside the timed loop: the
// communicator's stream is non-blocking, so it would not wait for work on
// the legacy default stream, and a pageable-memory copy may return before
// its DMA has landed.
#include <cuda_runtime.h>

#include <string>

#include "comm/bench_buffer.h"

namespace trainbench {

namespace {

std::string mib(int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

class DeviceBenchBuffer final : public BenchBuffer {
 public:
  DeviceBenchBuffer(Communicator& comm, int64_t count) : comm_(comm), view_(static_cast<size_t>(count)) {
    const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
    if (bytes == 0) return;
    check(cudaGetDevice(&device_), "cudaGetDevice");
    void* memory = nullptr;
    const cudaError_t result = cudaMalloc(&memory, static_cast<size_t>(bytes));
    if (result != cudaSuccess) {
      std::string why;
      const int64_t free_bytes = free_device_bench_bytes(&why);
      comm_.abort(3, "comm: a collective benchmark's buffer of " + mib(bytes) + " on the GPU of rank " +
                         std::to_string(comm_.rank()) + ": cudaMalloc: " + cudaGetErrorString(result) +
                         (free_bytes >= 0 ? " (" + mib(free_bytes) + " free)" : " (" + why + ")"));
    }
    memory_ = static_cast<float*>(memory);
  }
  ~DeviceBenchBuffer() override {
    if (memory_ == nullptr) return;
    on_its_device();
    check(cudaFree(memory_), "cudaFree");
  }

  float* data() override { return memory_; }
  std::vector<float>& host() override { return view_; }
  void to_collective() override {
    if (memory_ == nullptr) return;
    on_its_device();
    check(cudaMemcpy(memory_, view_.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the copy to the GPU");
  }
  void to_host() override {
    if (memory_ == nullptr) return;
    on_its_device();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the copy to the host");
    check(cudaMemcpy(view_.data(), memory_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
  }
  void zero() override {
    if (memory_ == nullptr) return;
    on_its_device();
    check(cudaMemset(memory_, 0, bytes()), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after cudaMemset");
  }

 private:
  size_t bytes() const { return view_.size() * sizeof(float); }
  void on_its_device() { check(cudaSetDevice(device_), "cudaSetDevice"); }
  void check(cudaError_t result, const char* call) {
    if (result == cudaSuccess) return;
    comm_.abort(3, std::string("comm: a collective benchmark's buffer on the GPU of rank ") +
                       std::to_string(comm_.rank()) + ": " + call + ": " + cudaGetErrorString(result));
  }

  Communicator& comm_;
  std::vector<float> view_;
  float* memory_ = nullptr;
  int device_ = 0;  // the CUDA device current when it was made: the communicator's
};

}  // namespace

std::unique_ptr<BenchBuffer> make_device_bench_buffer(Communicator& comm, int64_t count) {
  return std::make_unique<DeviceBenchBuffer>(comm, count);
}

int64_t free_device_bench_bytes(std::string* why) {
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t result = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (result != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaMemGetInfo: ") + cudaGetErrorString(result);
    return -1;
  }
  return static_cast<int64_t>(free_bytes);
}

}  // namespace trainbench
