// The kinds of op report.op_times breaks compute_s into, shared by the
// engines, and the host-clock timer the CPU engine marks them with (the CUDA
// engine's, with events, is kernels/cuda/op_timer.h). An engine marks where
// each kind of op starts; the interval from one mark to the next (or to the
// end of the engine call, stop()) is the earlier op's, so the intervals tile
// the engine's compute brackets and add up to compute_s.
#pragma once

#include <array>
#include <chrono>
#include <vector>

#include "kernels/engine.h"  // OpTime

namespace trainbench {

enum class OpKind {
  kEmbedding,
  kNorm,       // RMSNorm forward and backward (on CUDA with the residual adds fused in)
  kGemm,       // the layers' projections (and their LoRA adapters)
  kLmHead,     // the LM head's GEMMs (and the CUDA engine's padded copy)
  kRope,
  kAttention,  // Q·Kᵀ, softmax, P·V or cuDNN's SDPA, and their backward
  kSwiglu,
  kResidual,   // the residual adds where they run on their own (the CPU engine)
  kLoss,       // softmax + cross-entropy and dlogits
  kOptimizer,  // gradient norm, clipping and AdamW (and the CPU engine's zeroing of the gradients)
  kCount
};

const char* op_kind_name(OpKind op);
// Every kind at zero seconds, in OpKind order.
std::vector<OpTime> zero_op_times();

class HostOpTimer {
 public:
  void set_enabled(bool on);
  void mark(OpKind op);
  void stop();
  // Seconds per kind since the last take; an op still open goes on counting.
  std::vector<OpTime> take();

 private:
  using Clock = std::chrono::steady_clock;
  void close(Clock::time_point now);
  bool enabled_ = false;
  int open_ = -1;  // the op being timed, −1 between engine calls
  Clock::time_point since_;
  std::array<double, static_cast<size_t>(OpKind::kCount)> seconds_{};
};

}  // namespace trainbench
