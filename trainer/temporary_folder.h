// The temporary folders a command makes (the default run's synthetic shards
// and checkpoint folder, bench's scratch folders). The caller removes its
// folder when done, and interrupt_cleanup.h removes it on SIGINT/SIGTERM/SIGHUP;
// what neither covers is a process that dies by SIGKILL (the OOM killer,
// Slurm's kill after its grace period, a test's timeout). Each folder made
// in the system temporary directory therefore holds a lock file its owner
// keeps flock()ed for its lifetime; the kernel drops the lock when the
// owner dies, however it dies, and the next command that makes a folder of
// the same prefix there removes the folders nobody holds.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>  // std::move

namespace trainbench {

// "the temporary directory (TMPDIR=...)", or "(/tmp)" when TMPDIR is not
// set: how errors name the folder the user did not choose.
std::string temporary_directory_name();

// The file inside each folder its owner holds locked.
inline constexpr const char* kOwnerLockName = ".trainbench-owner";
// What interrupt_cleanup.h renames a folder to (its name and this) before it
// removes it, so that a writer still at work cannot re-create files in it.
inline constexpr std::string_view kInterruptedSuffix = ".interrupted";

// A new folder named prefix-XXXXXX under `parent` (the system temporary
// directory when empty), removed if the process is interrupted (SIGINT,
// SIGTERM, SIGHUP: interrupt_cleanup.h); the caller removes it otherwise. In the
// system temporary directory, the folders of this prefix whose owner died
// are removed first (remove_abandoned_folders). Throws std::runtime_error
// naming where it failed under `parent`; CommandError (exit 3, naming
// TMPDIR) when the system temporary directory is unusable.
std::string make_temporary_directory(const std::string& prefix, const std::string& parent = "");

// Removes `path` and what is in it, its owner lock file last and the folder
// itself after that: a process killed outright part-way (SIGKILL mid-removal
// of a large folder) leaves a folder whose lock file is still there, unheld,
// which the next sweep removes; removed first, as remove_all's directory
// order may have it, the rest would stay for good. Works on any folder (one
// without a lock file is simply removed). `before_each` is called with each
// entry of the folder just before it goes (tests stop the process there).
// Never throws; what cannot be removed stays.
void remove_temporary_folder(const std::string& path,
                             const std::function<void(const std::filesystem::path&)>& before_each = {});

// Removes `path` (remove_temporary_folder) when it goes out of scope, however
// the scope ends: the caller's "removes it otherwise". Never throws.
class FolderRemovedAtScopeEnd {
 public:
  explicit FolderRemovedAtScopeEnd(std::string path) : path_(std::move(path)) {}
  ~FolderRemovedAtScopeEnd();
  FolderRemovedAtScopeEnd(const FolderRemovedAtScopeEnd&) = delete;
  FolderRemovedAtScopeEnd& operator=(const FolderRemovedAtScopeEnd&) = delete;

 private:
  std::string path_;
};

// Removes the folders prefix-XXXXXX under `parent` that hold an owner lock
// file nobody holds; returns how many. Folders without one (made by an
// older trainbench, or on a filesystem without flock) and folders it cannot
// lock or remove (another user's) are left. Only local folders should be
// swept: a shared filesystem may keep flock per node, so a folder held on
// another node would look abandoned here. Never throws.
int remove_abandoned_folders(const std::string& parent, const std::string& prefix);

}  // namespace trainbench
