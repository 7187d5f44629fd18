#include "kernels/cuda/op_timer.h"

#include <utility>  // std::swap

#include "kernels/cuda/cuda_check.h"  // TRAINBENCH_CUDA_CHECK

namespace trainbench::cuda {

OpTimer::~OpTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);  // teardown: nothing to report
}

void OpTimer::record(int op, cudaStream_t stream) {
  if (used_ == events_.size()) {
    cudaEvent_t event = nullptr;
    TRAINBENCH_CUDA_CHECK(cudaEventCreate(&event));
    events_.push_back(event);
    ops_.push_back(-1);
  }
  TRAINBENCH_CUDA_CHECK(cudaEventRecord(events_[used_], stream));
  ops_[used_] = op;
  ++used_;
}

void OpTimer::mark(OpKind op, cudaStream_t stream) {
  if (enabled_) record(static_cast<int>(op), stream);
}

void OpTimer::stop(cudaStream_t stream) {
  // A stop right after a stop (or before any mark) closes nothing.
  if (enabled_ && used_ > 0 && ops_[used_ - 1] >= 0) record(-1, stream);
}

std::vector<OpTime> OpTimer::take() {
  std::vector<OpTime> times = zero_op_times();
  if (used_ == 0) return times;
  TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  for (size_t i = 0; i + 1 < used_; ++i) {
    if (ops_[i] < 0) continue;
    float ms = 0.0f;
    TRAINBENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    times[static_cast<size_t>(ops_[i])].seconds += ms * 1e-3;
  }
  // An op still open (no stop yet) carries over as the first mark.
  if (ops_[used_ - 1] >= 0) {
    std::swap(events_[0], events_[used_ - 1]);
    ops_[0] = ops_[used_ - 1];
    used_ = 1;
  } else {
    used_ = 0;
  }
  return times;
}

}  // namespace trainbench::cuda
