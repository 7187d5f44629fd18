#include "checkpoint/atomic_file.h"

#include <fcntl.h>       // open
#include <sys/random.h>  // getrandom: the temporary's name
#include <sys/stat.h>    // lstat
#include <unistd.h>      // write, fsync, close, readlink

#include <climits>  // PATH_MAX

#include <atomic>   // the test hook's one pause
#include <cerrno>   // errno
#include <chrono>   // the test hook's pause
#include <cstdint>  // the random name's bits
#include <cstdio>   // std::rename, std::remove
#include <cstdlib>  // std::getenv, std::atol: the test hook
#include <cstring>  // std::strerror
#include <ctime>    // clock_gettime: the name's fallback randomness
#include <mutex>    // the temporaries being written
#include <set>
#include <thread>   // the test hook's pause

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

// A new file at PATH.tmp.<6 random characters>, made O_EXCL with mode 0644
// as open makes it (under the umask, or a folder's default ACL): mkostemp's
// name without its 0600. Sets `temp` to its name; -1 with errno when none
// could be made. O_EXCL settles a clash; the randomness only makes one rare
// (the clock's nanoseconds where getrandom has nothing yet, early at boot).
int create_temporary_beside(const std::string& path, std::string& temp) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  constexpr size_t kRandom = 6;  // the template's XXXXXX
  const std::string stem = atomic_write_temporary_template(path);
  for (int attempt = 0; attempt < 100; ++attempt) {
    uint64_t random = 0;
    if (::getrandom(&random, sizeof random, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof random)) {
      timespec now{};
      ::clock_gettime(CLOCK_REALTIME, &now);
      random = static_cast<uint64_t>(now.tv_nsec) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(attempt);
    }
    temp = stem.substr(0, stem.size() - kRandom);
    for (size_t i = 0; i < kRandom; ++i, random /= sizeof kAlphabet - 1)
      temp += kAlphabet[random % (sizeof kAlphabet - 1)];
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;  // errno is EEXIST
}

// The temporaries being written, for a signal's cleanup: a result or
// `latest` cut off by SIGTERM between its creation and its rename stayed
// as PATH.tmp.XXXXXX beside it for good. Listed once created, unlisted once
// renamed or removed. Never destroyed: the signal's cleanup thread may run
// during the exit.
std::mutex& unfinished_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::set<std::string>& unfinished() {
  static auto* paths = new std::set<std::string>;
  return *paths;
}
// Those a signal came during (cancel_unfinished_atomic_writes), under the
// same mutex: not to be renamed into place.
std::set<std::string>& cancelled() {
  static auto* paths = new std::set<std::string>;
  return *paths;
}
bool cancelled_by_a_signal(const std::string& temp) {
  const std::lock_guard<std::mutex> lock(unfinished_mutex());
  return cancelled().count(temp) > 0;
}

// Lists (or unlists) a temporary for the signal's cleanup. A temporary the
// cleanup removes while its write goes on fails that write's rename, or
// goes after the rename: either way none stays, and the process is ending.
void list_unfinished(const std::string& temp, bool listed) {
  const std::lock_guard<std::mutex> lock(unfinished_mutex());
  if (listed)
    unfinished().insert(temp);
  else
    unfinished().erase(temp);
}

// Test hook: a pause between creating the process's first temporary and
// writing it, so a test can land a signal there (the first only: the
// signal's own partial result is written at once).
void test_write_delay() {
  static const long delay_ms = []() {
    const char* value = std::getenv("TRAINBENCH_TEST_ATOMIC_WRITE_DELAY_MS");
    return value != nullptr ? std::atol(value) : 0L;
  }();
  static std::atomic<bool> paused{false};
  if (delay_ms > 0 && !paused.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
}
}  // namespace

void cancel_unfinished_atomic_writes() {
  const std::lock_guard<std::mutex> lock(unfinished_mutex());
  cancelled().insert(unfinished().begin(), unfinished().end());
}

void remove_unfinished_atomic_writes() {
  // Locked for good: the process is ending by the signal. A writer that
  // would list or unlist a temporary waits here until the end.
  unfinished_mutex().lock();
  for (const std::string& temp : unfinished()) ::unlink(temp.c_str());
}

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
  std::string temp;
  // The file calls outside the lock: one on storage that hangs (a `latest`
  // given up after checkpoint.timeout_s) held every other write, the result's
  // on healthy storage too, and the signal's cleanup. A signal between the
  // creation and the listing leaves that temporary (as a SIGKILL would).
  int fd = create_temporary_beside(path, temp);
  if (fd < 0) fail("cannot create", temp);
  list_unfinished(temp, true);
  test_write_delay();
  // Any failure after the temporary exists removes it, keeping errno for the message.
  auto abandon = [&](const std::string& what, const std::string& subject) {
    const int saved = errno;
    if (fd >= 0) ::close(fd);
    std::remove(temp.c_str());
    list_unfinished(temp, false);
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
  // A signal came while it was written: the earlier file stays, and the
  // process ends by the signal, whose cleanup removes the temporary. The
  // rename went on while the cleanup wrote the partial result, and a run
  // left its new result and the partial one beside it. (A signal between
  // this check and the rename, microseconds, still lets the file land.)
  if (cancelled_by_a_signal(temp))
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  if (std::rename(temp.c_str(), path.c_str()) != 0) abandon("cannot rename " + temp + " to", path);
  list_unfinished(temp, false);

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
