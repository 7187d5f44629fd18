// open_gpu_health for builds without the CUDA sources.
#include "kernels/gpu_health.h"

namespace trainbench {

std::unique_ptr<GpuHealthProbe> open_gpu_health(int /*cuda_device*/, std::string* why_not) {
  if (why_not) *why_not = "built without CUDA: no GPU health sampling";
  return nullptr;
}

}  // namespace trainbench
