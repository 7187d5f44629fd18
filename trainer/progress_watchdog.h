// A rank that stops making progress while not waiting for a peer is stuck in
// its own work (a hung GPU, a storage call that never returns) and is the one
// to blame: a thread of its own ends the job (Communicator::abort) naming it,
// before its peers, waiting for it in a collective, time out after
// comm.timeout_s naming no one. Time spent waiting for a peer
// (Communicator::waiting_since) is not counted: that is the peer's delay.
// Burn-in's hang watch and StorageWatchdog (trainer/hung_storage.h) are two
// uses.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>  // std::pair: the exit code and the message

#include "comm/communicator.h"

namespace trainbench {

class ProgressWatchdog {
 public:
  // The exit code and the one-line message the job ends with, once the rank
  // has been `stuck_s` without progress doing `what`.
  using Expired = std::function<std::pair<int, std::string>(double stuck_s, const std::string& what)>;
  // Armed from the start. Where no thread can be had (a process or memory
  // limit) it watches nothing, rather than the run failing on it.
  ProgressWatchdog(Communicator& comm, double limit_s, std::string what, Expired expired);
  ~ProgressWatchdog();
  ProgressWatchdog(const ProgressWatchdog&) = delete;
  ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

  // The rank moved on: `what` it is doing now, for the message ("" keeps it).
  void progress(const std::string& what = "");
  // Off while something bounded by its own waits runs; on again counts from now.
  void arm(bool armed);

 private:
  using Clock = std::chrono::steady_clock;
  void watch();

  Communicator& comm_;
  const Clock::duration limit_;
  const Expired expired_;
  std::mutex mutex_;
  std::condition_variable wake_;
  Clock::time_point last_progress_;
  std::string what_;
  bool armed_ = true, stop_ = false;
  std::thread thread_;
};

}  // namespace trainbench
