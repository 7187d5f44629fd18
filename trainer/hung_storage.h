// STORAGE WRITE / READ. Storage that stopped responding (an NFS server gone,
// a dead disk behind a hard mount) leaves a mkdir, an fsync, a flock or a
// read in the kernel, never returning and impossible to cancel. Two ways to
// bound such a call: run it on a thread that is let go past a deadline
// (run_for_at_most: for work whose result may be dropped), or end the job
// (StorageWatchdog: for work on the run's own state).
//
// StorageWatchdog bounds the storage calls that run on the main thread:
// checkpoint.dir's check and lock before step 1 (the default folder's
// making too), the look for another run's checkpoints in it, a resume's
// reads, the free-space check, the write-rate measurement, the probe that
// --out can be written and the filesystem queries (checkpoint.timeout_s),
// and the listing of data.shards (data.timeout_s).
// (The checkpoint writes themselves run on the writer thread, bounded by the
// Checkpointer's own waits.) One rank hung there for ever before step 1, and
// a job's peers timed out in a collective naming no one. While a
// StorageWatchdog lives, a thread of its own (where one can be had) ends the
// job past its limit (Communicator::abort, exit 3) with a line
// naming the rank and what it was doing. Time the rank spends waiting for a
// peer in a collective does not count: that is the peer's delay, not this
// storage's (ProgressWatchdog).
#pragma once

#include <chrono>
#include <functional>  // run_for_at_most's work
#include <string>

#include "comm/communicator.h"
#include "trainer/progress_watchdog.h"

namespace trainbench {

// Runs `work` on a thread of its own and waits for it `longest` at most,
// then lets it go: `work` must own what it touches (capture by value, or a
// shared_ptr), since it may finish after the caller has moved on. True when
// it finished. Unbounded where no thread can be had.
bool run_for_at_most(std::chrono::milliseconds longest, const std::function<void()>& work);

class StorageWatchdog {
 public:
  // `doing`: what the rank is doing, for the message ("checking that
  // checkpoint.dir /ckpt is writable"); `limit_s`: the key `limit_key`'s
  // value (checkpoint.timeout_s; data.timeout_s for the shard listing).
  StorageWatchdog(Communicator& comm, double limit_s, std::string doing,
                  const std::string& limit_key = "checkpoint.timeout_s");

 private:
  ProgressWatchdog watchdog_;
};

}  // namespace trainbench
