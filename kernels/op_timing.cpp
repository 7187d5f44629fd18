#include "kernels/op_timing.h"

namespace trainbench {

const char* op_kind_name(OpKind op) {
  static constexpr const char* kNames[] = {"embedding", "norm",     "gemm",     "lm_head", "rope",
                                           "attention", "swiglu",  "residual", "loss",    "optimizer"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(OpKind::kCount));
  return kNames[static_cast<size_t>(op)];
}

std::vector<OpTime> zero_op_times() {
  std::vector<OpTime> times(static_cast<size_t>(OpKind::kCount));
  for (size_t k = 0; k < times.size(); ++k) times[k].op = op_kind_name(static_cast<OpKind>(k));
  return times;
}

void HostOpTimer::set_enabled(bool on) {
  enabled_ = on;
  open_ = -1;
  seconds_.fill(0.0);
}

void HostOpTimer::close(Clock::time_point now) {
  if (open_ >= 0) seconds_[static_cast<size_t>(open_)] += std::chrono::duration<double>(now - since_).count();
}

void HostOpTimer::mark(OpKind op) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  close(now);
  open_ = static_cast<int>(op);
  since_ = now;
}

void HostOpTimer::stop() {
  if (!enabled_ || open_ < 0) return;
  close(Clock::now());
  open_ = -1;
}

std::vector<OpTime> HostOpTimer::take() {
  std::vector<OpTime> times = zero_op_times();
  for (size_t k = 0; k < times.size(); ++k) times[k].seconds = seconds_[k];
  seconds_.fill(0.0);
  return times;
}

}  // namespace trainbench
