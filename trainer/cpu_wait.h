// Whether this process had its CPUs to itself while it was measured. A
// thread that is ready to run but finds every CPU it may use busy waits in
// the scheduler's run queue; the kernel counts that wait per thread
// (/proc/self/task/ID/schedstat: time on a CPU, time waiting for one, in ns).
// Another process on the cores (a noisy neighbour, a forgotten job), or more
// threads than CPUs (train.threads and data.readers on a rank bound to fewer
// cores, ranks oversubscribed on a host), shows there and nowhere else: the
// CPU engine's OpenMP threads spin at each barrier for one that is waiting, and
// `tiny` beside four busy processes ran 17x slower with nothing in the result
// to say why.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace trainbench {

// From this share on, a run warns and a burn-in's row says so: on this
// project's 2-core host `tiny` read 0.05 idle, 0.36 beside one busy process
// (docs/metrics.md).
constexpr double kCpuWaitNotedShare = 0.25;

// "waited for a CPU 67% of the time they were ready to run".
std::string cpu_wait_words(double share);

// One thread's schedstat: nanoseconds on a CPU, and waiting for one.
struct ThreadCpuTimes {
  int64_t running_ns = 0, waiting_ns = 0;
};

// The first two fields of a schedstat line ("123 456 7\n"); false when the
// text does not hold them.
bool parse_schedstat(const std::string& text, ThreadCpuTimes* times);

class CpuWaitMeter {
 public:
  // Takes every thread's times now; the window starts here.
  void start();
  // Of the time this process's threads were ready to run since start(), the
  // share they spent waiting for a CPU (0-1): the threads alive at both ends
  // by their difference, those started since by their whole life; one that
  // ended in between left no figure to read. -1 where the kernel
  // keeps no schedstat (CONFIG_SCHED_INFO off) or nothing ran.
  double waiting_share() const;

 private:
  std::map<std::string, ThreadCpuTimes> at_start_;  // by "ID@start time"
  bool known_ = false;
};

}  // namespace trainbench
