// query_gpus from the CUDA runtime. Without a driver cudaGetDeviceCount
// returns an error ("driver version is insufficient" / "no CUDA-capable
// device"): that is reported as "no GPU", never as a crash.
#include <cuda_runtime.h>  // cudaGetDeviceCount, cudaGetDeviceProperties

#include "kernels/device_info.h"

namespace trainbench {

namespace {
std::string cuda_version_string(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}
}  // namespace

std::string cuda_build_info() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
         std::to_string((CUDART_VERSION % 1000) / 10) + ", " + TRAINBENCH_CUDA_ARCHITECTURES;
}

GpuInventory query_gpus() {
  GpuInventory inventory;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    inventory.runtime_version = cuda_version_string(runtime);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess)
    inventory.driver_version = cuda_version_string(driver);

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    inventory.why_none = std::string("CUDA reports no usable GPU: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later CUDA calls are unaffected
    return inventory;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const cudaError_t prop_status = cudaGetDeviceProperties(&prop, i);
    if (prop_status != cudaSuccess) {
      inventory.why_none = std::string("cudaGetDeviceProperties(") + std::to_string(i) +
                           ") failed: " + cudaGetErrorString(prop_status);
      continue;
    }
    GpuInfo gpu;
    gpu.index = i;
    gpu.name = prop.name;
    gpu.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    gpu.compute_major = prop.major;
    gpu.compute_minor = prop.minor;
    unsigned char uuid[16];
    static_assert(sizeof(prop.uuid.bytes) == sizeof(uuid));
    for (int b = 0; b < 16; ++b) uuid[b] = static_cast<unsigned char>(prop.uuid.bytes[b]);
    gpu.uuid = gpu_uuid_text(uuid);
    gpu.pci_bus_id = pci_bus_id_text(prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    inventory.gpus.push_back(gpu);
  }
  if (inventory.gpus.empty() && inventory.why_none.empty()) inventory.why_none = "no GPU visible";
  return inventory;
}

}  // namespace trainbench
