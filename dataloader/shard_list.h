// STORAGE READ. Turns data.shards into the list of shard paths, in a fixed
// order every rank agrees on. A spec is one or more items separated by
// commas or whitespace; each item is
//   - a brace pattern, webdataset style: train-{000000..000127}.tar, several
//     braces, and {a,b,c} lists (zero padding follows the wider bound);
//   - a glob (* ? [...]) after brace expansion, matches sorted;
//   - a directory: every *.tar, *.tar.gz, *.tgz, *.tar.zst, *.tar.zstd,
//     *.tar.bz2, *.tar.xz in it, sorted;
//   - a text file that is not a tar (e.g. shards.txt): one path per line,
//     blank lines and # comments ignored, relative paths relative to the file;
//   - otherwise a literal shard path.
// A whole spec that exists as a path is that one item, spaces, commas and
// braces in its name included.
// Throws DataError(kConfig) naming the first missing path (and how many are
// missing) or saying the list is empty.
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <vector>

namespace trainbench {

// Brace expansion alone (no filesystem access). Throws DataError(kConfig) on
// an unbalanced or empty brace, or a range whose bounds are not integers.
std::vector<std::string> expand_braces(const std::string& pattern);

std::vector<std::string> resolve_shard_list(const std::string& spec);

// Each shard as "NAME BYTES HASH" (its file name, its size and a 64-bit
// FNV-1a of its first 4 KiB, in hex; "?" for what cannot be read), in list
// order: what a checkpoint records of the data its loader position counts
// samples into. A shard replaced by another of its name, files renamed
// under one list, or a data set made again, is other data at the same
// position: a resume read on in it silently. One 4 KiB read per shard.
std::vector<std::string> shard_identities(const std::vector<std::string>& shards);

// True for the names a directory's shards have: .tar, .tar.gz, .tgz, .tar.zst,
// .tar.zstd, .tar.bz2, .tar.xz.
bool has_shard_extension(const std::string& path);

// The shards a resolved list names more than once (the same file, however
// spelt: "a.tar,./a.tar", a folder and a glob over it, a link), each once,
// with how many times it is listed, in list order. An epoch reads every
// listing, so such a shard's samples weigh double: said, not refused (a
// repeated shard is how some lists up-weight a source).
struct RepeatedShard {
  std::string path;   // its first spelling in the list
  int64_t listings;   // >= 2
};
std::vector<RepeatedShard> repeated_shards(const std::vector<std::string>& shards);
// "PATH N times (and M more shards more than once)" of a non-empty
// repeated_shards(): the words of run's and shards verify's warnings.
std::string repeated_shards_text(const std::vector<RepeatedShard>& repeated);

}  // namespace trainbench
