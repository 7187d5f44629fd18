// Where the CUDA engine's compute time goes, by kind of op (report.op_times):
// the engine marks the start of each op group on its compute stream; one
// event per mark, and the interval from one mark to the next is the earlier
// op's. The intervals tile the forward, backward and optimizer brackets, so
// their sum is compute_s (less the gaps between brackets). Off by default:
// a mark then records nothing.
#pragma once

#include <cuda_runtime.h>  // cudaEvent_t, cudaStream_t

#include <cstddef>  // size_t
#include <vector>

#include "kernels/engine.h"      // OpTime
#include "kernels/op_timing.h"  // OpKind: the kinds, shared with the cpu engine

namespace trainbench::cuda {

class OpTimer {
 public:
  OpTimer() = default;
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Either way, what was recorded and not taken is dropped.
  void set_enabled(bool on) {
    enabled_ = on;
    used_ = 0;
  }
  // Starts `op` on `stream`, ending the op before it.
  void mark(OpKind op, cudaStream_t stream);
  // Ends the current op (the end of a bracket).
  void stop(cudaStream_t stream);
  // Seconds per kind since the last take (waits for the last event); every
  // kind, in OpKind order.
  std::vector<OpTime> take();

 private:
  void record(int op, cudaStream_t stream);
  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;  // grows; reused after each take
  std::vector<int> ops_;             // ops_[i]: the op event i starts, −1 for a stop
  size_t used_ = 0;
};

}  // namespace trainbench::cuda
