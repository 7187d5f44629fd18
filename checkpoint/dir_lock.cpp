#include "checkpoint/dir_lock.h"

#include <fcntl.h>     // open
#include <sys/file.h>  // flock
#include <sys/stat.h>  // fstat, stat: the file locked is the one named; mkdir
#include <unistd.h>    // read, write, ftruncate, close, getpid, gethostname

#include <cerrno>
#include <cstring>     // std::strerror
#include <filesystem>  // the unused folder's removal
#include <string>

#include "checkpoint/checkpoint_files.h"  // CheckpointError
#include "checkpoint/checkpoint_io.h"     // without_trailing_slashes

namespace trainbench {

namespace io = checkpoint_io;

namespace {

// "pid 1234 on node07": what the holder wrote, for the refusal. Its first
// line: read while a holder writes its name over a longer earlier one, the
// rest is that one's tail.
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t got = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : std::string();
  holder = holder.substr(0, holder.find('\n'));
  while (!holder.empty() && holder.back() == '\0') holder.pop_back();
  return holder.empty() ? "another process" : holder;
}

}  // namespace

void CheckpointDirLock::acquire(const std::string& dir) {
  release();
  unlocked_reason_.clear();
  const std::string path = io::without_trailing_slashes(dir) + "/" + kCheckpointLockName;
  // The run goes on unlocked where there is no lock to take: said, since a
  // second run given this folder is then not refused.
  auto unlocked = [&](const std::string& why, int error) {
    unlocked_reason_ = "checkpoint.dir " + dir + " is not locked against a second run (" + why + " " + path + ": " +
                       std::strerror(error) + "): give each run its own checkpoint.dir";
  };
  int fd = -1;
  // A lock on a file its holder removed as the lock was taken (a run that
  // made the folder and failed removes it, lock file and all, while holding
  // it) guards nothing: the file at `path` must still be the one locked.
  for (int attempt = 0; attempt < 3; ++attempt) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    // The folder itself removed so (made for this run a moment ago): it is
    // made again, as it was made, where the run went on unlocked ("cannot open").
    if (fd < 0 && errno == ENOENT && attempt < 2) {
      if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) continue;
      errno = ENOENT;  // open's, for the message
    }
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) break;
    struct stat locked{}, named{};
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &named) == 0 && locked.st_dev == named.st_dev &&
        locked.st_ino == named.st_ino)
      break;
    ::close(fd);  // removed, or replaced, while we locked it: again
    fd = -1;
  }
  if (fd < 0) {  // a read-only folder fails the writability check before this
    unlocked("cannot open", errno);
    dir_ = dir;
    return;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      const std::string holder = holder_of(fd);
      ::close(fd);
      // On a shared filesystem a holder on a node that died can keep the
      // lock (NFS, until the server notices): the way out is said.
      throw CheckpointError("checkpoint.dir " + dir + " is in use by another trainbench run (" + holder +
                            "): two runs writing one folder commit each other's files; give each run its "
                            "own checkpoint.dir (if that process is gone, its node down, remove " + path + ")");
    }
    ::close(fd);  // no flock here (ENOLCK, EOPNOTSUPP)
    unlocked("flock", error);
    dir_ = dir;
    return;
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string holder = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  // Written over the earlier name, then cut to length: truncated first, a
  // run refused in between read an empty file ("another process"). The
  // holder's name is a courtesy for the refusal; the lock holds without it.
  // Not written (a full disk): no name rather than an earlier holder's,
  // which a refused run would name as alive.
  const bool written = ::pwrite(fd, holder.data(), holder.size(), 0) == static_cast<ssize_t>(holder.size());
  (void)::ftruncate(fd, written ? static_cast<off_t>(holder.size()) : 0);
  fd_ = fd;
  dir_ = dir;
}

void CheckpointDirLock::release() {
  dir_.clear();
  if (fd_ < 0) return;
  ::close(fd_);  // drops the lock
  fd_ = -1;
}

void CheckpointDirLock::release_removing_unused_folder() {
  if (!dir_.empty()) {
    std::error_code error;
    bool unused = true;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, error))
      if (entry.path().filename() != kCheckpointLockName) unused = false;
    if (unused && !error) {
      std::filesystem::remove(std::filesystem::path(dir_) / kCheckpointLockName, error);
      std::filesystem::remove(dir_, error);
    }
  }
  release();
}

}  // namespace trainbench
