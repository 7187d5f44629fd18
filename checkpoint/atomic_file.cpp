#include "checkpoint/atomic_file.h"

#include <fcntl.h>     // open
#include <stdlib.h>    // mkostemp
#include <sys/stat.h>  // lstat, fchmod
#include <unistd.h>    // write, fsync, close, readlink

#include <climits>  // PATH_MAX

#include <cerrno>   // errno
#include <cstdio>   // std::rename, std::remove
#include <cstring>  // std::strerror
#include <fstream>  // /proc/self/status: the umask

namespace trainbench {

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& path, bool replaced = false) {
  throw AtomicWriteError(what + " " + path + ": " + std::strerror(errno), replaced);
}

// The process's umask, read rather than set (umask(2) sets it for every
// thread); 022 where /proc does not say.
mode_t process_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  return 022;
}
}  // namespace

std::string replaced_file(const std::string& path) {
  std::string current = path;
  // Linux's own limit on links followed in one lookup (ELOOP).
  for (int hops = 0; hops <= 40; ++hops) {
    struct stat link {};
    if (::lstat(current.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return current;
    std::string target(static_cast<size_t>(link.st_size > 0 ? link.st_size : PATH_MAX), '\0');
    const ssize_t n = ::readlink(current.c_str(), target.data(), target.size());
    if (n < 0) fail("cannot read the link", current);
    if (n == 0) return current;  // no target to follow (Linux makes none such)
    target.resize(static_cast<size_t>(n));
    current = target.front() == '/' || current.find('/') == std::string::npos
                  ? target
                  : parent_directory(current) + "/" + target;
  }
  errno = ELOOP;
  fail("cannot follow the links of", path);
}

std::string atomic_write_temporary_template(const std::string& path) { return path + ".tmp.XXXXXX"; }

void write_file_atomically(const std::string& named, const std::string& contents) {
  const std::string path = replaced_file(named);
  std::string temp = atomic_write_temporary_template(path);
  int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) fail("cannot create", temp);
  // mkostemp makes it 0600: made as open(0644) makes a file, under the umask,
  // so that results and manifests stay readable by whom they were. Best
  // effort: a filesystem without modes (vfat) refuses it and loses nothing.
  (void)::fchmod(fd, 0644 & ~process_umask());
  // Any failure after the temporary exists removes it, keeping errno for the message.
  auto abandon = [&](const std::string& what, const std::string& subject) {
    const int saved = errno;
    if (fd >= 0) ::close(fd);
    std::remove(temp.c_str());
    errno = saved;
    fail(what, subject);
  };
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) abandon("cannot write", temp);
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) abandon("cannot fsync", temp);
  const int close_status = ::close(fd);
  fd = -1;
  if (close_status != 0) abandon("cannot close", temp);
  if (std::rename(temp.c_str(), path.c_str()) != 0) abandon("cannot rename " + temp + " to", path);

  // The rename is durable only once the directory entry is on disk.
  const std::string dir = parent_directory(path);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail("cannot open directory", dir, true);
  const int sync_status = ::fsync(dir_fd);
  const int saved = errno;
  ::close(dir_fd);
  errno = saved;
  if (sync_status != 0) fail("cannot fsync directory", dir, true);
}

}  // namespace trainbench
