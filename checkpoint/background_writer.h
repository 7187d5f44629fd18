// STORAGE WRITE. The thread a rank's checkpoints are persisted on, so the
// step loop never waits for storage unless it asks to: jobs run one after
// another in submission order (a commit always after its own writes), and
// the first job that throws keeps its exception for the loop to collect.
// A job stuck in the kernel (a write to storage that stopped responding)
// cannot be cancelled: the owner waits with a deadline and then abandons
// the writer rather than joining it.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>   // std::exception_ptr
#include <functional>  // Job
#include <mutex>
#include <thread>

namespace trainbench {

class BackgroundWriter {
 public:
  using Job = std::function<void()>;
  BackgroundWriter();
  // Finishes the queued jobs, then joins. Never reached once abandoned:
  // see abandon().
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  void submit(Job job);
  // No job queued or running.
  bool idle() const;
  // Blocks until idle or until `seconds` have passed; true when idle.
  bool wait_idle_for(double seconds);
  // Gives up on the job running: the queued ones are dropped and the thread
  // is detached, left to finish the job if it ever returns. The thread
  // still uses this object, so its owner must not destroy it (nor what the
  // job touches): it is kept, as the caller keeps it, until the process
  // exits. idle() stays false while the abandoned job runs.
  void abandon();
  // The exception of the first job that failed since the last call, or null.
  std::exception_ptr take_error();

 private:
  void run();
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  bool running_job_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace trainbench
