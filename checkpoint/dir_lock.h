// STORAGE WRITE. One run per checkpoint folder. Two runs given the same
// checkpoint.dir (two jobs of one script, a retry started while the first
// still runs) wrote into each other's step_N.tmp: one committed a checkpoint
// whose files failed their checksums on resume, with exit 0, the other
// failed blaming the disk. The run's rank 0 holds a flock() on
// DIR/.trainbench-lock for the run's life; a second run is refused at start.
#pragma once

#include <string>

namespace trainbench {

// The lock file inside a checkpoint folder (never loaded, never removed:
// removing a lock file races with the next run taking it).
inline constexpr const char* kCheckpointLockName = ".trainbench-lock";

class CheckpointDirLock {
 public:
  CheckpointDirLock() = default;
  ~CheckpointDirLock() { release(); }
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  // Takes the lock of `dir` (an existing folder). Throws CheckpointError
  // naming the folder and the holder (pid and host it wrote) when another
  // process holds it. Where the filesystem has no flock (some network
  // filesystems), or the file cannot be made, the run goes on unlocked
  // (the lock guards against a mistake, it is not a requirement), and
  // unlocked_reason() says so for the run's warnings. flock is per node on
  // some shared filesystems: two runs on two nodes may not see each
  // other's lock.
  void acquire(const std::string& dir);
  void release();
  // release(), removing first the folder when it holds nothing but the
  // lock's file: for a run that made checkpoint.dir and failed before
  // writing anything there. Only after an acquire() that returned (the lock
  // taken, or none to take): a run refused the lock removes nothing, where
  // it removed the holder's lock file and folder when both runs had found
  // the folder absent. Removed while still held, so that a run opening the
  // file meanwhile is refused rather than handed a lock on a file going away.
  void release_removing_unused_folder();
  bool held() const { return fd_ >= 0; }
  // Why the last acquire() took no lock; "" when it took one.
  const std::string& unlocked_reason() const { return unlocked_reason_; }

 private:
  int fd_ = -1;
  std::string dir_;  // the folder of the last acquire() that returned; "" after release()
  std::string unlocked_reason_;
};

}  // namespace trainbench
