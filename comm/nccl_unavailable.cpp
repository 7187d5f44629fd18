// A build without the NCCL backend (TRAINBENCH_NCCL=OFF, no CUDA backend, or
// AUTO with no nccl.h/libnccl found): there is no device-buffer communicator,
// so a multi-rank CUDA run says why instead of starting.
#include "comm/communicator.h"

namespace trainbench {

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, int, double) {
  return nullptr;
}

std::string nccl_version() { return ""; }

}  // namespace trainbench
