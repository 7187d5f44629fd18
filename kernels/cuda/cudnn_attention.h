// Causal attention as cuDNN's fused SDPA (its flash-attention engines, the
// kernels PyTorch's F.scaled_dot_product_attention takes on Hopper), built
// through the cuDNN frontend's graph API. It never materialises the
// batch·heads·T² probabilities: forward keeps one fp32 logsumexp per query row
// ("stats") for backward, which recomputes the scores tile by tile.
//
// Tensors stay in the engine's layout: q and the output are [batch, T, heads,
// head_dim] rows, k and v [batch, T, kv_heads, head_dim] (grouped-query
// attention when kv_heads < heads: cuDNN sums the group's dK and dV).
// Backward runs cuDNN's deterministic algorithm when asked
// (train.deterministic, the default), so a run repeats bit for bit (exact
// resume and the burn-in's golden step depend on it). On Hopper that
// algorithm keeps dP, B·H·T² bf16, in cuDNN's workspace and reads it back:
// without it cuDNN takes its fastest backward, which sums dQ with atomics in
// varying order, as PyTorch's SDPA backward does.
//
// Built only where the cuDNN headers and library and the cuDNN frontend's
// headers were found (CMake: TRAINBENCH_HAVE_CUDNN_ATTENTION); elsewhere
// make_cudnn_attention always says why not (cudnn_attention_none.cpp).
#pragma once

#include <cuda_runtime.h>  // cudaStream_t

#include <cstdint>  // int64_t
#include <memory>   // std::unique_ptr
#include <string>

#include "kernels/cuda/cuda_ops.h"  // bf16

namespace trainbench::cuda {

struct AttentionShape {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq_len = 0, head_dim = 0;
};

class CudnnAttention {
 public:
  virtual ~CudnnAttention() = default;
  // Device scratch cuDNN needs for forward or backward (the larger of the two);
  // the caller allocates it and passes it to both.
  virtual int64_t workspace_bytes() const = 0;
  // out = softmax(q·kᵀ·scale, causal)·v; stats[batch, heads, T] fp32.
  virtual void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* stats,
                       void* workspace) = 0;
  // d_q, d_k, d_v overwritten (not accumulated).
  virtual void backward(const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                        const bf16* d_out, const float* stats, bf16* d_q, bf16* d_k, bf16* d_v,
                        void* workspace) = 0;
  // "cuDNN 9.19.0 (frontend 1.32.0)": the library this process runs.
  virtual std::string library_version() const = 0;
};

// The forward and backward graphs for this shape, built for the current
// device and run on `stream`; nullptr with *why_not set when this build has no
// cuDNN attention or cuDNN cannot run these graphs here (unsupported shape,
// architecture or library version). Graph building takes well under a second
// and happens once per engine.
std::unique_ptr<CudnnAttention> make_cudnn_attention(const AttentionShape& shape, float scale,
                                                     bool deterministic_backward, cudaStream_t stream,
                                                     std::string* why_not);

// The frontend's checks of the forward and backward graphs for this shape on
// a GPU of compute capability sm_version (90: Hopper), without a GPU (CI):
// "" when they pass, else the frontend's message. Whether cuDNN's engines
// then run them is known only on the GPU (make_cudnn_attention).
std::string validate_cudnn_attention(const AttentionShape& shape, float scale, bool deterministic_backward,
                                     int sm_version);

}  // namespace trainbench::cuda
