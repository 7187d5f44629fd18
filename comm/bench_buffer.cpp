// Host-memory bench buffers and the choice between host and device ones.
#include "comm/bench_buffer.h"

#include <algorithm>  // std::fill, std::max
#include <limits>     // quiet_NaN: the separate buffer's stale host view

namespace trainbench {

namespace {

// The host backends: the collective works on the host view itself.
class InPlaceHostBuffer final : public BenchBuffer {
 public:
  explicit InPlaceHostBuffer(int64_t count) : values_(static_cast<size_t>(count)) {}
  float* data() override { return values_.data(); }
  std::vector<float>& host() override { return values_; }
  void to_collective() override {}
  void to_host() override {}
  void zero() override { std::fill(values_.begin(), values_.end(), 0.0f); }

 private:
  std::vector<float> values_;
};

class SeparateHostBuffer final : public BenchBuffer {
 public:
  explicit SeparateHostBuffer(int64_t count)
      : view_(static_cast<size_t>(count)), memory_(static_cast<size_t>(count)) {}
  float* data() override { return memory_.data(); }
  std::vector<float>& host() override { return view_; }
  void to_collective() override {
    memory_ = view_;
    std::fill(view_.begin(), view_.end(), std::numeric_limits<float>::quiet_NaN());
  }
  void to_host() override { view_ = memory_; }
  void zero() override { std::fill(memory_.begin(), memory_.end(), 0.0f); }

 private:
  std::vector<float> view_;
  std::vector<float> memory_;
};

}  // namespace

std::unique_ptr<BenchBuffer> make_bench_buffer(Communicator& comm, int64_t count) {
  if (comm.device_buffers()) return make_device_bench_buffer(comm, count);
  return std::make_unique<InPlaceHostBuffer>(count);
}

int64_t free_bench_buffer_bytes(const Communicator& comm, std::string* why) {
  if (!comm.device_buffers()) return -1;
  return free_device_bench_bytes(why);
}

std::string device_bench_room_shortfall(const Communicator& comm, int64_t bytes, int64_t host_room_bytes) {
  if (!comm.device_buffers()) return "";
  const auto mib = [](int64_t b) { return std::to_string(b >> 20) + " MiB"; };
  const std::string rank = std::to_string(comm.rank());
  std::string why;
  const int64_t free_bytes = free_device_bench_bytes(&why);
  if (free_bytes < 0) return "the free memory of rank " + rank + "'s GPU is unknown (" + why + ")";
  const int64_t room = std::max<int64_t>(0, free_bytes - kDeviceBenchReserveBytes);
  if (bytes > room)
    return "the buffers need " + mib(bytes) + " on the GPU of rank " + rank + ", which has " + mib(free_bytes) +
           " free: " + mib(room) + " once " + mib(kDeviceBenchReserveBytes) + " is kept for NCCL";
  if (host_room_bytes >= 0 && bytes > host_room_bytes)
    return "the buffers' host copies (for the data check) need " + mib(bytes) + " of host memory on rank " + rank +
           ", whose share of the host's available memory is " + mib(host_room_bytes);
  return "";
}

std::unique_ptr<BenchBuffer> make_separate_host_bench_buffer(int64_t count) {
  return std::make_unique<SeparateHostBuffer>(count);
}

}  // namespace trainbench
