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
  bool held() const { return fd_ >= 0; }
  // Why the last acquire() took no lock; "" when it took one.
  const std::string& unlocked_reason() const { return unlocked_reason_; }

 private:
  int fd_ = -1;
  std::string unlocked_reason_;
};

}  // namespace trainbench
