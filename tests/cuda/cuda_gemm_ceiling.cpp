// The cuBLASLt bf16 GEMM ceiling of this GPU, for scripts/gpu_check.sh:
//   cuda_gemm_ceiling [M N K]...     (default: 8192 8192 8192)
// prints one JSON line per shape: {"m", "n", "k", "flops_per_s", "timed_flops_per_s", "gpu"}:
// flops_per_s with cuBLASLt's heuristic's first algorithm (what a
// train.deterministic run uses), timed_flops_per_s with the algorithm that
// timing its candidates chose (train.deterministic=false), side by side.
// Exit 3 when no GPU is visible (an environment failure, as the CLI's).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/lt_gemm.h"
#include "kernels/device_info.h"

int main(int argc, char** argv) {
  const trainbench::GpuInventory inventory = trainbench::query_gpus();
  if (inventory.gpus.empty()) {
    std::fprintf(stderr, "cuda_gemm_ceiling: no GPU: %s\n", inventory.why_none.c_str());
    return 3;
  }
  std::vector<long long> dims;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const long long value = std::strtoll(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || value <= 0) {
      std::fprintf(stderr, "cuda_gemm_ceiling: '%s' is not a positive size\n", argv[i]);
      return 2;
    }
    dims.push_back(value);
  }
  if (dims.empty()) dims = {8192, 8192, 8192};
  if (dims.size() % 3 != 0) {
    std::fprintf(stderr, "cuda_gemm_ceiling: sizes come in M N K triples\n");
    return 2;
  }
  try {
    using trainbench::cuda::LtGemm;
    LtGemm heuristic, timed(LtGemm::kDefaultWorkspaceBytes, /*time_candidates=*/true);
    for (size_t i = 0; i < dims.size(); i += 3) {
      const double flops =
          trainbench::cuda::measure_lt_gemm_flops(heuristic, dims[i], dims[i + 1], dims[i + 2], 2.0, nullptr);
      const double timed_flops =
          trainbench::cuda::measure_lt_gemm_flops(timed, dims[i], dims[i + 1], dims[i + 2], 2.0, nullptr);
      if (flops <= 0 || timed_flops <= 0) {
        std::fprintf(stderr, "cuda_gemm_ceiling: not enough free device memory for the operands of %lld x %lld x %lld\n",
                     dims[i], dims[i + 1], dims[i + 2]);
        return 3;
      }
      std::printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"flops_per_s\": %.6e, "
                  "\"timed_flops_per_s\": %.6e, \"gpu\": \"%s\"}\n",
                  dims[i], dims[i + 1], dims[i + 2], flops, timed_flops, inventory.gpus[0].name.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gemm_ceiling: %s\n", e.what());
    return 3;
  }
  return 0;
}
