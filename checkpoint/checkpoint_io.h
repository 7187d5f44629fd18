// STORAGE WRITE, internal to checkpoint/: the small file-system steps the
// write, commit and read halves share, each one checked and turned into a
// one-line error naming the path. Not for use outside checkpoint/.
#pragma once

#include <cstdint>  // int64_t
#include <string>

#include <nlohmann/json.hpp>  // FileRecord <-> JSON

#include "checkpoint/checkpoint_files.h"  // CheckpointWriteError, FileRecord

namespace trainbench::checkpoint_io {

// "<what> <path>: <strerror(error)>" as a CheckpointWriteError, disk_full
// set for ENOSPC and EDQUOT.
[[noreturn]] void fail_write(const std::string& what, const std::string& path, int error);

// Makes a directory entry durable: open the folder, fsync it, close it.
void fsync_directory(const std::string& folder);

// Writes a small file (a record, the manifest) in place and fsyncs it; a
// failure removes it. The caller makes the directory entry durable.
void write_synced_file(const std::string& path, const std::string& contents);

// "dir" for "dir/", "dir//"; "/" stays "/".
std::string without_trailing_slashes(std::string dir);

// Removes a folder and everything in it; a missing folder is no error.
void remove_folder(const std::string& folder);

// 16 lower-case hex digits, as `xxhsum -H1` prints an XXH64 digest.
std::string xxh64_hex(uint64_t digest);

// "0.8.1" for the libxxhash this was linked with.
std::string xxhash_version();

// check_checkpoint_dir's probe file, PREFIX + PID; one a killed process left
// is removed by the next commit's retention.
inline constexpr const char* kWriteProbePrefix = ".trainbench-write-probe-";

// The step N of a folder named ".../step_N" or ".../step_N.tmp", or -1.
int64_t step_of_folder(const std::string& folder);

// A name in a checkpoint dir: step_N (a committed checkpoint, or a stale
// one that lost its manifest), step_N.tmp (being written, or left by a
// crash), step_N.old (set aside to be removed) or step_N.tmp.interrupted
// (an interrupted run's, its removal cut short). Anything else: step -1.
struct StepName {
  int64_t step = -1;
  std::string suffix;  // "", ".tmp", ".old", ".tmp.interrupted"
};
StepName parse_step_name(const std::string& name);

// Text read from a checkpoint (a pointer's contents, a manifest string) as
// it goes into a message: control and non-ASCII bytes become \xNN and more
// than `limit` bytes are cut ("...", with the whole length), so the message
// stays one short line.
std::string printable(const std::string& text, size_t limit = 64);

// The largest file read_small_file reads: a manifest, a pointer, a result
// (a 100,000-step result is ~30 MB).
inline constexpr int64_t kMaxSmallFileBytes = int64_t{256} << 20;
// A whole file's contents; throws CheckpointError naming it, also when it is
// larger than kMaxSmallFileBytes (not the machine's failure: a 3 GB file
// given as a result was read whole, twice over, and ended as "out of memory").
std::string read_small_file(const std::string& path, const std::string& what);

// A JSON library exception's text as a message quotes it: without the
// library's "[json.exception.type_error.302] " tag.
std::string json_error_text(const nlohmann::json::exception& e);

nlohmann::json file_record_to_json(const FileRecord& record);
// Throws nlohmann::json exceptions on a missing or mistyped field; the
// caller names the file.
FileRecord file_record_from_json(const nlohmann::json& json);

}  // namespace trainbench::checkpoint_io
