// The commit half of a checkpoint (rank 0): manifest, rename, `latest`,
// retention; and what a crashed or given-up checkpoint leaves to clean.
#include <stdio.h>     // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)
#include <fcntl.h>     // AT_FDCWD
#include <sys/stat.h>  // stat
#include <time.h>      // gmtime_r

#include <algorithm>   // std::sort, std::any_of, std::find: the run's own steps
#include <cerrno>      // errno
#include <cstring>     // std::strerror
#include <exception>   // std::exception_ptr: the first failed removal, thrown after the rest
#include <filesystem>  // directory_iterator
#include <system_error>

#include "checkpoint/atomic_file.h"  // write_file_atomically for `latest`
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_io.h"  // fail_write, fsync_directory, write_synced_file, ...

namespace trainbench {

namespace io = checkpoint_io;
namespace fs = std::filesystem;
using io::parse_step_name;
using io::StepName;

namespace {

std::string utc_now_iso8601() {
  const time_t now = ::time(nullptr);
  struct tm utc {};
  char text[32] = "unknown";
  if (::gmtime_r(&now, &utc) != nullptr) ::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

bool path_exists(const std::string& path) {
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0) return true;
  if (errno == ENOENT) return false;
  io::fail_write("cannot stat", path, errno);
}

// Renames first, then deletes: a crash halfway through a deletion leaves a
// step_M.old (cleaned by the next commit), never a step_M that looks
// committed but has lost files.
void remove_checkpoint_folder(const std::string& folder) {
  std::string doomed = folder;
  if (parse_step_name(fs::path(folder).filename().string()).suffix.empty()) {
    doomed = folder + ".old";
    if (path_exists(doomed)) io::remove_folder(doomed);
    if (::rename(folder.c_str(), doomed.c_str()) != 0) io::fail_write("cannot rename " + folder + " to", doomed, errno);
  }
  io::remove_folder(doomed);
}

// After the commit of `step`: removes leftovers (step_M.tmp, step_M.old,
// step_M without a manifest, for M <= step — a later step may be in
// flight) and all but the newest `keep` committed checkpoints up to
// `step`. Never step_`step`, which `latest` names (just written, so not read
// back: a read could only fail here, past the commit point), nor a step of
// the run a rewind left (CommitRequest::resumed_step).
void apply_retention(const std::string& dir, int64_t step, int64_t keep, int64_t resumed_step,
                     const std::vector<int64_t>& own_steps) {
  const std::string latest = "step_" + std::to_string(step);
  std::vector<CommittedCheckpoint> committed;
  std::vector<std::string> stale;
  std::error_code error;
  // increment(error): a listing that breaks off is an error code, not a throw.
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    std::error_code ignored;
    // A `latest` replacement or a writability probe that a killed process
    // left. Only one untouched for a minute: a second run starting on this
    // folder probes it before it takes the lock (and where there is no
    // flock, two runs write here at once). Best effort, as litter is.
    if (name.starts_with("latest.tmp.") || name.starts_with(io::kWriteProbePrefix)) {
      struct stat status {};
      if (::lstat(entry.path().c_str(), &status) == 0 && S_ISREG(status.st_mode) &&
          status.st_mtime < ::time(nullptr) - 60)
        fs::remove(entry.path(), ignored);
      continue;
    }
    const StepName parsed = parse_step_name(name);
    if (parsed.step < 0 || parsed.step > step) continue;
    if (!entry.is_directory(ignored)) continue;
    const std::string folder = dir + "/" + name;
    if (name == latest) {
      committed.push_back({parsed.step, folder});  // counts towards `keep`, never removed
    } else if (!parsed.suffix.empty()) {
      stale.push_back(folder);
    } else if (path_exists(folder + "/manifest.json")) {
      const bool left_run = resumed_step >= 0 && parsed.step > resumed_step &&
                            std::find(own_steps.begin(), own_steps.end(), parsed.step) == own_steps.end();
      if (!left_run) committed.push_back({parsed.step, folder});
    } else if (parsed.step < step) {
      stale.push_back(folder);
    }
  }
  if (error) io::fail_write("cannot list checkpoint.dir", dir, error.value());
  // Every removal is tried, and the first failure thrown after: one folder
  // that cannot go (a mount point, an immutable file) stopped every later
  // one, commit after commit, and the checkpoints past `keep` filled the disk.
  std::exception_ptr first_failure;
  const auto remove = [&first_failure](const std::string& folder) {
    try {
      remove_checkpoint_folder(folder);
    } catch (const std::exception&) {
      if (!first_failure) first_failure = std::current_exception();
    }
  };
  for (const std::string& folder : stale) remove(folder);
  if (keep > 0) {
    std::sort(committed.begin(), committed.end(),
              [](const CommittedCheckpoint& a, const CommittedCheckpoint& b) { return a.step > b.step; });
    for (size_t i = static_cast<size_t>(keep); i < committed.size(); ++i)
      if (fs::path(committed[i].folder).filename() != latest) remove(committed[i].folder);
  }
  if (first_failure) std::rethrow_exception(first_failure);
}

// Puts `pending` in place of an existing `committed` folder (a resumed run
// checkpointing a step it has checkpointed before). RENAME_EXCHANGE swaps
// the two in one step, so step_N is complete at every instant; the old
// one ends up under the pending name and retention removes it. Where the
// filesystem cannot exchange (NFS, Lustre: EINVAL), the old one is renamed
// away first — a crash between the two renames leaves no step_N.
void replace_committed(const std::string& pending, const std::string& committed) {
  if (::renameat2(AT_FDCWD, pending.c_str(), AT_FDCWD, committed.c_str(), RENAME_EXCHANGE) == 0) return;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    io::fail_write("cannot exchange " + pending + " with", committed, errno);
  const std::string aside = committed + ".old";
  if (path_exists(aside)) io::remove_folder(aside);
  if (::rename(committed.c_str(), aside.c_str()) != 0)
    io::fail_write("cannot rename " + committed + " to", aside, errno);
  if (::rename(pending.c_str(), committed.c_str()) != 0) {
    const int error = errno;
    ::rename(aside.c_str(), committed.c_str());  // the step `latest` may name comes back (best effort)
    io::fail_write("cannot rename " + pending + " to", committed, error);
  }
}

// `latest` could not be written: the step is not committed after all. Its
// folder goes back to being pending (the trainer removes a checkpoint it
// gives up), and one it replaced comes back, so the folder holds what
// `latest` names and a listing does not offer the step as committed. Best
// effort: the error being reported matters more.
void undo_commit_rename(const std::string& pending, const std::string& committed, bool replaced) {
  const std::string aside = committed + ".old";
  if (!replaced) {
    ::rename(committed.c_str(), pending.c_str());
  } else if (path_exists(pending)) {  // exchanged: the old checkpoint is in pending
    ::renameat2(AT_FDCWD, pending.c_str(), AT_FDCWD, committed.c_str(), RENAME_EXCHANGE);
  } else if (path_exists(aside) && ::rename(committed.c_str(), pending.c_str()) == 0) {
    ::rename(aside.c_str(), committed.c_str());
  }
}

// The places one commit works on, and how its errors name the step.
struct CommitPaths {
  std::string pending;    // step_N.tmp, the ranks' files and records
  std::string committed;  // step_N
  std::string dir;        // checkpoint.dir, "." where empty
  std::string step_text;  // "checkpoint step N"
};

// Every rank's files, as the ranks recorded them and as the manifest lists them.
struct RankRecords {
  nlohmann::json ranks = nlohmann::json::array();  // the manifest's "ranks"
  std::vector<std::vector<FileRecord>> of_rank;    // indexed by rank
  int64_t total_bytes = 0;
};

// Rank `rank`'s record, each file checked to be there at its recorded size,
// added to `records`.
void add_rank_record(const CommitPaths& paths, int rank, RankRecords& records) {
  const std::string record_path = paths.pending + "/" + rank_record_name(rank);
  if (!path_exists(record_path))
    throw CheckpointWriteError(paths.step_text + ": no record from rank " + std::to_string(rank) + " (" +
                                   record_path + " is missing)",
                               false);
  nlohmann::json files = nlohmann::json::array();
  try {
    const nlohmann::json entries = nlohmann::json::parse(io::read_small_file(record_path, "checkpoint record"));
    for (const nlohmann::json& entry : entries) {
      const FileRecord record = io::file_record_from_json(entry);
      const std::string file = paths.pending + "/" + record.name;
      struct stat status {};
      if (::stat(file.c_str(), &status) != 0) io::fail_write("rank " + std::to_string(rank) + " recorded", file, errno);
      if (status.st_size != record.bytes)
        throw CheckpointWriteError("checkpoint file " + file + ": " + std::to_string(status.st_size) +
                                       " bytes on disk, but rank " + std::to_string(rank) + " recorded " +
                                       std::to_string(record.bytes),
                                   false);
      records.total_bytes += record.bytes;
      files.push_back(io::file_record_to_json(record));
      records.of_rank[static_cast<size_t>(rank)].push_back(record);
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointWriteError("checkpoint record " + record_path + ": " + io::json_error_text(e), false);
  } catch (const CheckpointError& e) {
    throw CheckpointWriteError(e.what(), false);
  }
  records.ranks.push_back({{"rank", rank}, {"files", files}});
}

// Every rank's record, each file checked to be there at its recorded size:
// a manifest must never name a file that is not complete on disk.
RankRecords read_rank_records(const CommitPaths& paths, int world_size) {
  RankRecords records;
  records.of_rank.resize(static_cast<size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) add_rank_record(paths, rank, records);
  return records;
}

// The slices of each image held alike must put it back together: a
// checkpoint a resume could not read is never committed (nor `latest`
// moved to it, nor older ones retired for it).
void check_slices_fit_together(const std::vector<std::vector<FileRecord>>& records_of, const std::string& step_text) {
  for (size_t index = 0; index < records_of.front().size(); ++index) {
    if (records_of.front()[index].image_bytes == 0) continue;
    std::vector<FileRecord> slices;
    for (const std::vector<FileRecord>& rank : records_of)
      slices.push_back(index < rank.size() ? rank[index] : FileRecord{});
    const std::string problem = slices_problem(slices, index);
    if (!problem.empty()) throw CheckpointWriteError(step_text + ": " + problem, false);
  }
  for (size_t rank = 1; rank < records_of.size(); ++rank)
    for (size_t index = 0; index < records_of[rank].size(); ++index)
      if (records_of[rank][index].image_bytes > 0 &&
          (index >= records_of.front().size() || records_of.front()[index].image_bytes == 0))
        throw CheckpointWriteError(step_text + ": rank " + std::to_string(rank) + "'s " +
                                       records_of[rank][index].name + " is a slice of an image rank 0 wrote whole",
                                   false);
}

nlohmann::json build_manifest(const CommitRequest& request, const RankRecords& records) {
  nlohmann::json versions = request.versions.is_object() ? request.versions : nlohmann::json::object();
  versions["xxhash"] = io::xxhash_version();
  // Any rank's slices are rank 0's too (refused above otherwise).
  const bool sliced = std::any_of(records.of_rank.front().begin(), records.of_rank.front().end(),
                                  [](const FileRecord& record) { return record.image_bytes > 0; });
  return {
      {"schema", sliced ? kSlicedCheckpointSchema : kCheckpointSchema},
      {"step", request.step},
      {"world_size", request.world_size},
      {"created", utc_now_iso8601()},
      {"config", request.config},
      {"versions", versions},
      {"extra", request.extra},
      {"ranks", records.ranks},
      {"total_bytes", records.total_bytes},
  };
}

void write_manifest(const std::string& pending, const nlohmann::json& manifest) {
  // Never throws on a string that is not UTF-8 (the config's are escaped
  // already; a version string need not be): U+FFFD for its bad bytes.
  io::write_synced_file(pending + "/manifest.json",
                        manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  io::fsync_directory(pending);
}

// step_N.tmp becomes step_N, durably. Returns whether it replaced a
// step_N there already (what undo_commit_rename needs to know).
bool rename_to_committed(const CommitPaths& paths) {
  const bool replaced = path_exists(paths.committed);
  if (replaced) {
    replace_committed(paths.pending, paths.committed);
  } else if (::rename(paths.pending.c_str(), paths.committed.c_str()) != 0) {
    io::fail_write("cannot rename " + paths.pending + " to", paths.committed, errno);
  }
  try {
    io::fsync_directory(paths.dir);
  } catch (const CheckpointWriteError&) {
    // Not committed: `latest` was never written. Left in place, step_N
    // read as committed to a listing (the next run's refusal and its
    // resume hints), and the failure's own words called it the intact
    // previous checkpoint.
    undo_commit_rename(paths.pending, paths.committed, replaced);
    throw;
  }
  return replaced;
}

// Writes `latest`, naming step N. Returns false where it does but not
// durably (said in `warnings`, or thrown where there are none): then
// retention must not run.
bool write_latest(const CommitRequest& request, const CommitPaths& paths, bool replaced, CommitWarnings* warnings) {
  try {
    write_file_atomically(paths.dir + "/latest", "step_" + std::to_string(request.step) + "\n");
  } catch (const AtomicWriteError& e) {
    const std::string message = e.what();
    if (e.replaced) {
      // `latest` names this step already: undoing the rename would leave it
      // naming a folder that is gone. Committed, not yet durable; the older
      // checkpoints stay, for the `latest` a power loss may bring back.
      const std::string durability = paths.step_text + " is committed, but " + message +
                                     ": a power loss may bring back the previous `latest`; older checkpoints are kept";
      if (warnings == nullptr) throw CheckpointWriteError(durability, false);
      warnings->durability = durability;
      return false;
    }
    const bool disk_full = message.ends_with(std::strerror(ENOSPC)) || message.ends_with(std::strerror(EDQUOT)) ||
                           message.ends_with(std::strerror(EFBIG));
    undo_commit_rename(paths.pending, paths.committed, replaced);
    try {
      io::fsync_directory(paths.dir);
    } catch (const CheckpointWriteError&) {
    }
    throw CheckpointWriteError(message, disk_full);
  }
  return true;
}

void retire_old_checkpoints(const CommitRequest& request, const CommitPaths& paths, CommitWarnings* warnings) {
  // Past the commit point any failure (a folder that cannot be removed, a
  // listing that breaks off, whatever is thrown) leaves the step committed.
  try {
    apply_retention(paths.dir, request.step, request.keep, request.resumed_step, request.own_steps);
  } catch (const std::exception& e) {
    const std::string retention = paths.step_text + " is committed, but removing an old one failed: " + e.what();
    if (warnings == nullptr) {
      const auto* write_error = dynamic_cast<const CheckpointWriteError*>(&e);
      throw CheckpointWriteError(retention, write_error != nullptr && write_error->disk_full);
    }
    warnings->retention = retention;
  }
}

}  // namespace

nlohmann::json commit_checkpoint(const CommitRequest& request, CommitWarnings* warnings) {
  if (request.world_size < 1)
    throw std::invalid_argument("commit_checkpoint: world_size " + std::to_string(request.world_size));
  const CommitPaths paths{pending_folder(request.dir, request.step), committed_folder(request.dir, request.step),
                          request.dir.empty() ? "." : io::without_trailing_slashes(request.dir),
                          "checkpoint step " + std::to_string(request.step)};

  const RankRecords records = read_rank_records(paths, request.world_size);
  check_slices_fit_together(records.of_rank, paths.step_text);
  const nlohmann::json manifest = build_manifest(request, records);
  write_manifest(paths.pending, manifest);
  crash_point("before_rename", request.step);

  const bool replaced = rename_to_committed(paths);
  crash_point("after_rename", request.step);

  // The commit point: from here `latest` names the new checkpoint.
  if (!write_latest(request, paths, replaced, warnings)) return manifest;
  retire_old_checkpoints(request, paths, warnings);
  return manifest;
}

void abandon_pending(const std::string& dir, int64_t step) { io::remove_folder(pending_folder(dir, step)); }

std::vector<CommittedCheckpoint> list_committed(const std::string& dir) {
  std::vector<CommittedCheckpoint> result;
  std::error_code error;
  fs::directory_iterator entries(dir, error);
  if (error == std::errc::no_such_file_or_directory) return result;
  if (error)
    throw CheckpointError("checkpoint.dir " + dir + ": cannot list it: " + error.message(),
                          is_machine_limit(error.value()));  // errno, in either category
  for (const fs::directory_entry& entry : entries) {
    const std::string name = entry.path().filename().string();
    const StepName parsed = parse_step_name(name);
    if (parsed.step < 0 || !parsed.suffix.empty()) continue;
    const std::string folder = io::without_trailing_slashes(dir) + "/" + name;
    std::error_code ignored;
    if (fs::is_directory(folder, ignored) && fs::is_regular_file(folder + "/manifest.json", ignored))
      result.push_back({parsed.step, folder});
  }
  std::sort(result.begin(), result.end(),
            [](const CommittedCheckpoint& a, const CommittedCheckpoint& b) { return a.step < b.step; });
  return result;
}

}  // namespace trainbench
