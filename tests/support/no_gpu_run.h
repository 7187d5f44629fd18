// When a test of the real binary on the CUDA engine may skip: only when the
// run's own exit-3 line says no GPU run is possible here at all. Any other
// exit 3 on a GPU machine (GPU memory exhausted, a cuDNN or NCCL failure, a
// full disk) is the failure the test exists to catch, not a skip: the GPU
// CLI tests skipped on every exit 3, so a broken GPU run read as "skipped".
#pragma once

#include <string>

#include "tests/support/run_command.h"

namespace trainbench::testing {

inline bool no_gpu_run_possible(const CommandResult& run) {
  if (run.exit_code != 3) return false;
  // trainer/cli.cpp's lines: a build without the cuda engine, the device
  // inventory's why_none (kernels/cuda/device_info.cu, device_info_none.cpp),
  // and comm/nccl_unavailable.cpp's build without NCCL.
  for (const char* reason : {"train.device=cuda: no 'cuda' engine in this build",
                             "train.device=cuda: CUDA reports no usable GPU", "train.device=cuda: no GPU visible",
                             "train.device=cuda: built without CUDA",
                             "comm.backend=nccl: this build has no NCCL backend"})
    if (run.err.rfind(std::string("trainbench: ") + reason, 0) == 0) return true;
  return false;
}

}  // namespace trainbench::testing
