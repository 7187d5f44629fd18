// make_cudnn_attention for a build without the cuDNN frontend: attention runs
// as cuBLASLt GEMMs around a causal softmax (CudaEngine::attention_forward).
#include "kernels/cuda/cudnn_attention.h"

namespace trainbench::cuda {

std::unique_ptr<CudnnAttention> make_cudnn_attention(const AttentionShape&, float, bool, cudaStream_t,
                                                     std::string* why_not) {
  *why_not =
      "this build has no cuDNN attention (cuDNN or the cuDNN frontend headers were not found at "
      "configure time; scripts/setup.sh installs them)";
  return nullptr;
}

std::string validate_cudnn_attention(const AttentionShape&, float, bool, int) {
  return "this build has no cuDNN attention";
}

}  // namespace trainbench::cuda

namespace trainbench {

std::string cudnn_attention_build_info() { return ""; }

}  // namespace trainbench
