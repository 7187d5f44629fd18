// query_gpus for builds without the CUDA sources.
#include "kernels/device_info.h"

namespace trainbench {

std::string cuda_build_info() { return ""; }
std::string cudnn_attention_build_info() { return ""; }

GpuInventory query_gpus() {
  GpuInventory inventory;
  inventory.why_none = "built without CUDA (TRAINBENCH_CUDA=OFF or no nvcc at build time)";
  return inventory;
}

}  // namespace trainbench
