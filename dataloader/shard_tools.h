// STORAGE READ. The work behind `trainbench shards synth|pack|verify`, as
// functions the CLI and the default run call.
#pragma once

#include <cstdint>  // int64_t
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace trainbench {

// Progress callback: (done, total, unit) — the CLI draws a bar from it.
using ProgressCallback = std::function<void(int64_t done, int64_t total, const char* unit)>;

// Limits of synthetic shards, far above any benchmark's need: a sample is
// built whole in memory, so a typo in a size must be an error, not an
// allocation of terabytes (the config's data.synth_* keys share them).
inline constexpr int64_t kMaxSynthShards = int64_t{1} << 20;            // --count
inline constexpr int64_t kMaxSynthSamplesPerShard = int64_t{1} << 24;   // --samples
inline constexpr int64_t kMaxSynthTokensPerSample = int64_t{1} << 24;   // --tokens MEAN + SPREAD
inline constexpr int64_t kMaxSynthPayloadBytes = int64_t{1} << 30;      // --payload-bytes BYTES + SPREAD

struct SynthOptions {
  std::string out_dir;              // created if missing
  std::string prefix = "train";     // shards are <out_dir>/<prefix>-000000.tar, ...
  int64_t count = 4;                // number of shards
  int64_t samples_per_shard = 0;    // either this ...
  int64_t shard_bytes = 0;          // ... or a target size per shard (bytes)
  int64_t vocab = 50257;
  std::string field = "u16";        // token member: u16 | u32 | npy | txt
  int64_t tokens_mean = 512;        // tokens per sample: uniform in
  int64_t tokens_spread = 256;      //   [mean - spread, mean + spread], at least 1
  int64_t payload_bytes = 0;        // filler member "payload.bin" per sample (emulates images/audio)
  int64_t payload_spread = 0;       //   its size uniform in [bytes - spread, bytes + spread]
  uint64_t seed = 1;
  bool overwrite = false;           // false: refuse when a shard to write is already there
  // Writers of these same shards into folders of this disk at once (the
  // ranks of one host, each making the run's shards in its own temporary
  // folder): the free space must hold every copy.
  int64_t copies_on_this_disk = 1;
};

struct SynthResult {
  std::vector<std::string> paths;
  int64_t samples = 0, tokens = 0, bytes = 0;
};

// Seeded: the same options give byte-identical shards, and sample i (key
// "00000000i", zero-padded to 9 digits) depends only on the options and i.
// Token ids are uniform in [0, vocab): raw little-endian for u16/u32, a
// 1-D '<u2' ('<u4' when vocab > 65536) array for npy, printable ASCII bytes
// for txt. With shard_bytes, samples fill each shard until the next would
// pass it. Throws std::invalid_argument for impossible options, naming the
// CLI option (the CLI exits 2), and when a shard to write is already there
// and overwrite is off; std::runtime_error when writing fails, or
// before writing anything when the shards would not fit the free space of
// out_dir (saying how much they need and how much is free).
SynthResult synthesize_shards(const SynthOptions& options, const ProgressCallback& progress = {});
// The checks synthesize_shards starts with, alone (the CLI runs them before
// creating the output directory). Throws std::invalid_argument.
void check_synth_options(const SynthOptions& options);
// The largest member a sample of these options can have: the token member
// at tokens_mean + tokens_spread tokens (with its .npy header), or
// payload.bin at payload_bytes + payload_spread. A reader refuses a member
// over its data.max_sample_bytes as corrupt.
int64_t synth_largest_member_bytes(const SynthOptions& options);

struct PackOptions {
  std::string input_dir;     // a tree of files; files sharing a path minus extension form a sample
  std::string out_pattern;   // e.g. "out/data-%06d.tar"
  int64_t max_bytes = 1LL << 30;
  int64_t max_count = 0;     // samples per shard; 0 = no limit
  bool overwrite = false;    // false: refuse when a shard to write is already there
};

struct PackResult {
  std::vector<std::string> paths;
  int64_t samples = 0, files = 0, bytes = 0;
  int64_t skipped_non_regular = 0;  // links to directories, broken links, fifos, sockets, devices
  int64_t skipped_unnamed = 0;      // no extension or a "__" name: webdataset readers drop them
};

// Walks input_dir and writes its files as webdataset samples, sorted by key:
// "dir/x.jpg" and "dir/x.json" become sample "dir/x" with members jpg and
// json (key and extension split as webdataset.h says). Throws
// std::invalid_argument when input_dir is not a directory, holds nothing to
// pack, holds the output folder (a later pack of it would pack the shards),
// or two files would be one member twice (x.JPG and x.jpg), and when a shard
// to write is already there and overwrite is off;
// std::runtime_error when a file cannot be read or a shard written.
PackResult pack_directory(const PackOptions& options, const ProgressCallback& progress = {});
// The refusal of an output folder inside input_dir, alone (the CLI runs it
// before creating the output folder). Throws std::invalid_argument.
void check_pack_destination(const PackOptions& options);
// True when `inner` is `outer` or lies under it, both made absolute (a
// relative path whose first part does not exist is left relative by
// weakly_canonical alone) and their links resolved; false when either
// cannot be resolved. (pack's output inside its input; a run's result
// inside its checkpoint folder.)
bool path_is_within(const std::filesystem::path& inner, const std::filesystem::path& outer);

struct VerifyOptions {
  std::vector<std::string> shards;  // resolved paths
  std::string field;                // token member extension; empty = do not decode tokens
  int64_t vocab = 0;                // 0 = no bound check
  int64_t max_member_bytes = 1LL << 30;
};

struct VerifyResult {
  int64_t shards = 0, samples = 0, tokens = 0, bytes = 0, errors = 0;
  std::vector<std::string> error_lines;  // one per error, "path: byte N: what"
};

// Reads everything; every error is counted and listed, none stops it: a
// corrupt sample is skipped, a broken shard ends that shard only. `samples`
// counts the samples read whole, `tokens` those decoded, `bytes` what was
// read from storage. Throws DataError(kConfig) for an unknown field.
VerifyResult verify_shards(const VerifyOptions& options, const ProgressCallback& progress = {});

}  // namespace trainbench
