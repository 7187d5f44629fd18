// The GPUs this process can see, for the environment section of the results
// and for `train.device: auto`. Built from the CUDA runtime when the CUDA
// sources are compiled; otherwise it reports that CUDA was not built.
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <vector>

namespace trainbench {

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
  // Which physical GPU, as nvidia-smi and DCGM name it: the index depends on
  // CUDA_VISIBLE_DEVICES, these do not ("" where unknown).
  std::string uuid;        // "GPU-8f0e9c64-1c57-3f4b-a9d2-0c5b1e7a6f10"
  std::string pci_bus_id;  // "00000000:19:00.0"
};

// The text nvidia-smi prints for a GPU's 16-byte UUID and for its PCI
// domain, bus and device (cudaDeviceProp's uuid, pciDomainID, pciBusID,
// pciDeviceID). An all-zero UUID is none: "".
std::string gpu_uuid_text(const unsigned char (&bytes)[16]);
std::string pci_bus_id_text(int domain, int bus, int device);

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string driver_version;   // e.g. "13.0"; empty when no driver
  std::string runtime_version;  // CUDA runtime the binary was built with; empty without CUDA
  std::string why_none;         // when gpus is empty: "built without CUDA", "no driver: ..."
};

// "CUDA 13.0, sm_80 sm_90" when the CUDA sources were compiled into this
// binary, "" otherwise.
std::string cuda_build_info();
// The cuDNN and frontend headers the CUDA engine's fused attention was
// compiled against ("cuDNN 9.19.0 headers, frontend 1.32.0"), "" when it was
// not built (kernels/cuda/cudnn_attention.h).
std::string cudnn_attention_build_info();

// Never throws and never aborts: a machine with no driver or no GPU is a
// normal answer (an empty list with the reason).
GpuInventory query_gpus();

}  // namespace trainbench
