// A build without the NCCL backend (TRAINBENCH_NCCL=OFF, no CUDA backend, or
// AUTO with no nccl.h/libnccl found): there is no device-buffer communicator,
// so a multi-rank CUDA run says why instead of starting.
#include <stdexcept>  // std::logic_error: no communicator takes device buffers here

#include "comm/bench_buffer.h"
#include "comm/communicator.h"

namespace trainbench {

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, int, double) {
  return nullptr;
}

std::string nccl_version() { return ""; }

std::unique_ptr<BenchBuffer> make_device_bench_buffer(Communicator&, int64_t) {
  throw std::logic_error("make_device_bench_buffer: this build has no device-buffer communicator");
}

int64_t free_device_bench_bytes(std::string* why) {
  if (why != nullptr) *why = "this build has no device-buffer communicator";
  return -1;
}

}  // namespace trainbench
