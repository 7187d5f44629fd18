#include "trainer/temporary_folder.h"

#include <fcntl.h>     // open
#include <stdlib.h>    // mkdtemp
#include <sys/file.h>  // flock
#include <unistd.h>    // close, getpid, rmdir

#include <cerrno>      // errno: why mkdtemp failed
#include <cstring>     // std::strerror
#include <cstdlib>     // std::getenv: TMPDIR, named in errors
#include <filesystem>
#include <map>         // the lock descriptors held, by folder
#include <mutex>
#include <stdexcept>
#include <system_error>

#include "trainer/cli.h"                // CommandError: exit 3 for an unusable TMPDIR
#include "trainer/interrupt_cleanup.h"  // make_removed_on_interrupt

namespace trainbench {

namespace fs = std::filesystem;

namespace {

// mkdtemp's six random characters.
constexpr size_t kRandomSuffix = 6;

// The owner lock descriptors this process holds, by folder, so that the
// folder's removal can close its own: out of descriptors (ulimit -n), the
// one the lock held was the one removing the folder needed, and a failed
// run left its empty temporary folders behind.
struct HeldLocks {
  std::mutex mutex;
  std::map<std::string, int> descriptors;
};
HeldLocks& held_locks() {
  static HeldLocks* locks = new HeldLocks;  // never destroyed: removals may run while the process exits
  return *locks;
}

void release_owner_lock(const std::string& folder) {
  HeldLocks& locks = held_locks();
  std::lock_guard<std::mutex> guard(locks.mutex);
  // Under the name it was made with, or the one interrupt_cleanup renames it
  // to before removing it.
  const std::string made =
      folder.ends_with(kInterruptedSuffix) ? folder.substr(0, folder.size() - kInterruptedSuffix.size()) : folder;
  auto held = locks.descriptors.find(folder);
  if (held == locks.descriptors.end()) held = locks.descriptors.find(made);
  if (held == locks.descriptors.end()) return;
  ::close(held->second);
  locks.descriptors.erase(held);
}

// Creates folder/kOwnerLockName already locked: the file is made and
// locked under a name of its own, then renamed in, so that a sweeper never
// meets the lock file before its lock. The descriptor stays open for the
// life of the folder, on purpose: closing it would drop the lock. (A
// command makes at most a few folders, so the descriptors are a handful.)
// On a filesystem without flock the folder simply gets no lock file and
// is never swept.
void hold_owner_lock(const std::string& folder) {
  const std::string staging = folder + "/" + kOwnerLockName + "." + std::to_string(getpid());
  const int fd = ::open(staging.c_str(), O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 || ::rename(staging.c_str(), (folder + "/" + kOwnerLockName).c_str()) != 0) {
    ::unlink(staging.c_str());
    ::close(fd);
    return;
  }
  HeldLocks& locks = held_locks();
  std::lock_guard<std::mutex> guard(locks.mutex);
  locks.descriptors[folder] = fd;
}

// True when nobody holds folder's lock file: its owner is gone. The lock
// taken to find out is released as the descriptor closes; a second sweeper
// racing for the same folder loses the flock or the rename.
bool owner_is_gone(const fs::path& folder) {
  const int fd = ::open((folder / kOwnerLockName).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;  // no lock file (an older trainbench), or not ours to read
  const bool gone = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return gone;
}

// "prefix-XXXXXX", or one of the names a removal renames it to first:
// ".interrupted" (interrupt_cleanup.cpp) or ".abandoned-PID" (below). A
// process killed again while removing leaves the renamed folder, its lock
// file inside and unheld.
bool is_temporary_folder_name(const std::string& name, const std::string& prefix) {
  const size_t base = prefix.size() + 1 + kRandomSuffix;
  if (name.size() < base || name.compare(0, prefix.size(), prefix) != 0 || name[prefix.size()] != '-') return false;
  const std::string suffix = name.substr(base);
  if (suffix.empty() || suffix == kInterruptedSuffix) return true;
  const std::string abandoned = ".abandoned-";
  return suffix.size() > abandoned.size() && suffix.compare(0, abandoned.size(), abandoned) == 0 &&
         suffix.find_first_not_of("0123456789", abandoned.size()) == std::string::npos;
}

}  // namespace

int remove_abandoned_folders(const std::string& parent, const std::string& prefix) {
  int removed = 0;
  std::error_code error;
  for (fs::directory_iterator it(parent, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (!is_temporary_folder_name(name, prefix)) continue;
    std::error_code ignored;
    if (!it->is_directory(ignored) || it->is_symlink(ignored) || !owner_is_gone(it->path())) continue;
    // Renamed away first: a name no live command uses, and no second
    // sweeper removes the same folder.
    const fs::path doomed = it->path().parent_path() / (name.substr(0, prefix.size() + 1 + kRandomSuffix) +
                                                         ".abandoned-" + std::to_string(getpid()));
    fs::rename(it->path(), doomed, ignored);
    if (ignored) continue;
    remove_temporary_folder(doomed.string());
    ++removed;
  }
  return removed;
}

std::string temporary_directory_name() {
  const char* tmpdir = std::getenv("TMPDIR");
  return tmpdir != nullptr && *tmpdir != '\0' ? "the temporary directory (TMPDIR=" + std::string(tmpdir) + ")"
                                              : "the temporary directory (/tmp)";
}

std::string make_temporary_directory(const std::string& prefix, const std::string& parent) {
  const bool system_temporary = parent.empty();
  fs::path under = parent;
  std::string named = parent;
  if (system_temporary) {
    // The system's: a broken one is the environment's fault, named as the
    // user can mend it (exit 3).
    named = temporary_directory_name();
    std::error_code error;
    // An empty TMPDIR is unset, as for mktemp and Python's tempfile;
    // libstdc++ took "" for the folder and said /tmp was unusable.
    const char* tmpdir = std::getenv("TMPDIR");
    if (tmpdir != nullptr && *tmpdir == '\0') {
      under = "/tmp";
      if (!fs::is_directory(under, error) && !error) error = std::make_error_code(std::errc::not_a_directory);
    } else {
      under = fs::temp_directory_path(error);
    }
    if (error)
      throw CommandError{kExitEnvironmentError,
                         named + " is unusable: " + error.message() + "; set TMPDIR to a writable folder"};
    remove_abandoned_folders(under.string(), prefix);
  }
  // Every caller removes its folder at exit; an interrupted process as well.
  std::string pattern = (under / (prefix + "-XXXXXX")).string();
  int error = 0;
  const std::string made = make_removed_on_interrupt([&]() {
    if (mkdtemp(pattern.data()) != nullptr) return pattern;
    error = errno;
    return std::string();
  });
  if (made.empty()) {
    const std::string why = std::strerror(error);
    if (!system_temporary) throw std::runtime_error("cannot create a folder under " + parent + ": " + why);
    throw CommandError{kExitEnvironmentError,
                       named + ": cannot create a folder there: " + why + "; set TMPDIR to a writable folder"};
  }
  if (system_temporary) hold_owner_lock(pattern);
  return pattern;
}

void remove_temporary_folder(const std::string& path,
                             const std::function<void(const fs::path&)>& before_each) {
  std::error_code ignored;
  if (!fs::is_directory(fs::symlink_status(path, ignored))) {
    fs::remove(path, ignored);  // a file, a link, or nothing: nothing inside to order
    return;
  }
  const fs::path lock_file = fs::path(path) / kOwnerLockName;
  std::error_code error;
  for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
    if (it->path().filename() == kOwnerLockName) continue;
    if (before_each) before_each(it->path());
    fs::remove_all(it->path(), ignored);
  }
  if (before_each && fs::exists(fs::symlink_status(lock_file, ignored))) before_each(lock_file);
  fs::remove(lock_file, ignored);
  release_owner_lock(path);
  std::error_code error_removing;
  fs::remove_all(path, error_removing);  // the folder, and whatever a writer put in meanwhile
  // remove_all lists the folder first, which takes a descriptor; an empty
  // folder goes without one (ulimit -n: the lock file could not be made).
  if (error_removing) ::rmdir(path.c_str());
}

FolderRemovedAtScopeEnd::~FolderRemovedAtScopeEnd() { remove_temporary_folder(path_); }

}  // namespace trainbench
