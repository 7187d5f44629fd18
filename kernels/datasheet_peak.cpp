#include "kernels/datasheet_peak.h"

namespace trainbench {

double datasheet_bf16_peak_flops(const std::string& gpu_name) {
  const auto has = [&gpu_name](const char* part) { return gpu_name.find(part) != std::string::npos; };
  // NVIDIA's datasheets, bf16 tensor core with sparsity halved: H100/H200
  // SXM (and GH200) 1,979 → 989; H100 and H200 NVL 1,671 → 835; H100 PCIe
  // 1,513 → 756; A100 (every form) 624 → 312.
  if (has("H100") || has("H200")) {
    if (has("NVL")) return 835e12;
    if (has("PCIe")) return 756e12;
    return 989e12;
  }
  if (has("A100")) return 312e12;
  return 0.0;
}

}  // namespace trainbench
