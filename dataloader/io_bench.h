// STORAGE READ. `trainbench bench io`: the loader alone at full speed, beside
// a plain sequential read of the same files (the most the storage gives a
// reader, as `dd bs=4M of=/dev/null` measures) and the same samples read as a
// tree of small files (one file per member: the metadata cost of unpacked
// datasets).
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <vector>

#include "dataloader/shard_loader.h"  // LoaderOptions

namespace trainbench {

struct ReadRate {
  int64_t bytes = 0;
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t files = 0;    // files opened
  double seconds = 0;
  // Whether it read all it was to read (every file whole; the loader: every
  // shard exactly once) rather than stopping at its time limit.
  bool complete = true;
  // The loader under data.on_corrupt=skip: what it left out, and the first
  // reason (the plain reads decode nothing and leave out nothing).
  int64_t samples_skipped = 0;
  int64_t shards_skipped = 0;
  std::string first_skip;
  bool left_out() const { return samples_skipped + shards_skipped > 0; }
  // The loader's shards read as whole that look damaged (SourceStats): cut
  // short at a member boundary, or with no sample; the first one's line.
  int64_t shards_cut_short = 0;
  int64_t shards_without_samples = 0;
  std::string first_odd_shard;
  double gbs() const { return seconds > 0 ? static_cast<double>(bytes) / seconds * 1e-9 : 0; }
  double tokens_per_s() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0; }
  double samples_per_s() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
};

// What the page cache held of one file (mincore(2) over a read-only
// mapping, as fincore and vmtouch do; nothing is read).
struct FileResidency {
  int64_t bytes = 0;
  int64_t resident_bytes = 0;
  bool known = false;  // false: it could not be opened or mapped
};

// Surveys `paths` in order; stops after `max_seconds` (the result is then
// shorter than `paths`: the files surveyed so far).
std::vector<FileResidency> survey_page_cache(const std::vector<std::string>& paths, double max_seconds);

// The page cache's share of the first `files` surveyed files' bytes (those
// whose residency is known), or a negative number when none is known.
double resident_fraction(const std::vector<FileResidency>& survey, size_t files);

// Reads every file whole with read(2) in `block_bytes` blocks into one
// buffer, `threads` files at a time, and throws the bytes away; stops once
// `max_seconds` have passed (complete = false; bytes = what was read by then).
// A file that cannot be opened or read, or is no longer a regular file (the
// list was resolved earlier), throws DataError naming it.
// `inject_delay_s` (data.inject_delay_ms, fault injection: slow storage)
// is slept after every read() that returned data.
ReadRate measure_sequential_read(const std::vector<std::string>& paths, int64_t block_bytes,
                                 int64_t threads, double max_seconds, double inject_delay_s = 0);

// Runs the loader with no consumer delay for exactly one epoch (every shard
// read once, then the data ends: LoaderOptions::epochs = 1), or until
// `max_seconds` pass (complete = false). Bytes, samples and tokens are the
// loader's own count of what it read.
ReadRate measure_loader(const LoaderOptions& options, double max_seconds);

// Writes every sample of the shards as files <dir>/<shard's position in
// the list, %06d>/<sample's position in its shard, %09d>.<ext>: the same
// bytes one file per member, never outside `dir` whatever the member names.
// Returns the files written. A file or folder that cannot be made or
// written (a full disk) throws std::system_error with its errno. A corrupt
// sample or shard throws DataError, unless `skipped` is given
// (data.on_corrupt=skip): then the sample (or the rest of the shard) is
// left out and counted there, with the first reason, as the loader does.
int64_t extract_to_small_files(const std::vector<std::string>& shards, const std::string& dir,
                               int64_t max_member_bytes, ReadRate* skipped = nullptr);

// Reads the tree back as a loader of small files would: list each shard's
// directory, open and read every file, group members by key and decode the
// token member. `threads` directories at a time; no file is started after
// `max_seconds` (complete = false). `inject_delay_s` is slept per sample,
// as the loader does. A token member that does not decode throws
// DataError, or with `skip_corrupt` is counted in samples_skipped.
ReadRate measure_small_files(const std::string& dir, const std::string& field, int64_t vocab,
                             int64_t threads, double max_seconds, double inject_delay_s = 0,
                             bool skip_corrupt = false);

}  // namespace trainbench
