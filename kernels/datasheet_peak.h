// MFU's denominator for the GPUs people train on. Host code in the
// library both engines link (trainbench_kernels_host): the CUDA engine reads
// it, and the CUDA library is linked after trainbench_kernels.
#pragma once

#include <string>

namespace trainbench {

// MFU's denominator: the datasheet dense bf16 peak (tensor cores, without
// sparsity) of a GPU by its CUDA device name, in FLOP/s; 0 for a GPU not
// known here (MFU is then against the measured GEMM ceiling only). The NVL
// (PCIe, 400 W) parts are not the SXM ones: "NVIDIA H100 NVL" and "NVIDIA
// H200 NVL" are 835e12, not 989e12.
double datasheet_bf16_peak_flops(const std::string& gpu_name);

}  // namespace trainbench
