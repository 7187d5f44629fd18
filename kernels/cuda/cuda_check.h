// Every CUDA runtime and cuBLAS(Lt) call goes through these checks: a failure
// throws CudaError naming the call, its file and line and the library's own
// message, which the CLI turns into exit code 3 (an environment failure).
#pragma once

#include <cublasLt.h>      // cublasStatus_t
#include <cuda_runtime.h>  // cudaError_t, cudaGetErrorString

#include <stdexcept>
#include <string>

#include "kernels/device_error.h"  // DeviceError: exit 3, wherever it ends the run

namespace trainbench::cuda {

class CudaError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                  ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

}  // namespace trainbench::cuda

#define TRAINBENCH_CUDA_CHECK(call) ::trainbench::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define TRAINBENCH_CUBLAS_CHECK(call) \
  ::trainbench::cuda::check_cublas((call), #call, __FILE__, __LINE__)
