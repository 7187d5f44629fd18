// A call on the device failed: a CUDA error, a cuBLAS or cuDNN status. The
// GPU or its driver, not trainbench's logic, is what the user must look at
// (an uncorrectable ECC error, a GPU that fell off the bus, a wedged
// kernel): an environment failure, exit 3, as DESIGN's error policy has it.
// Mid-run it is the very thing a burn-in exists to find, so the run's steps
// are kept (trainer/partial_result.h). kernels/cuda's CudaError is one; the
// trainer catches this, which every build has.
#pragma once

#include <stdexcept>

namespace trainbench {

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainbench
