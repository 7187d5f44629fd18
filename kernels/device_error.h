// A call on the device failed: a CUDA error, a cuBLAS or cuDNN status. The
// GPU or its driver, not trainbench's logic, is what the user must look at
// (an uncorrectable ECC error, a GPU that fell off the bus, a wedged
// kernel): an environment failure, exit 3, as DESIGN's error policy has it.
// Mid-run it is the very thing a burn-in exists to find, so the run's steps
// are kept (trainer/partial_result.h). kernels/cuda's CudaError is one; the
// trainer catches this, which every build has.
#pragma once

#include <stdexcept>
#include <string>

namespace trainbench {

class DeviceError : public std::runtime_error {
 public:
  explicit DeviceError(const std::string& what, bool device_fault = true)
      : std::runtime_error(what), device_fault_(device_fault) {}
  // False for what the device's libraries cannot do or the device cannot
  // hold (no cuBLASLt algorithm for a shape, a plan larger than its free
  // memory): still exit 3, but not the GPU failing, so burn-in does not
  // fail it for that.
  bool device_fault() const { return device_fault_; }

 private:
  bool device_fault_;
};

}  // namespace trainbench
