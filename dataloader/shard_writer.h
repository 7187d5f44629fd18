// STORAGE READ (its producer side). Writes webdataset tar shards with
// libarchive in pax format (ustar-compatible headers, long names allowed),
// as webdataset's TarWriter does: each sample is its members "key.ext" in
// order. ShardSeries rolls over to a new shard by size or sample count, as
// webdataset's ShardWriter and tarp split do. Members are regular files, mode
// 0644, uid/gid 0, one fixed mtime: the same samples give the same bytes.
#pragma once

#include <cstdint>  // int64_t
#include <string>
#include <string_view>
#include <vector>

struct archive;

namespace trainbench {

struct MemberToWrite {
  std::string extension;  // "u16", "txt", "payload.bin", ...
  const void* data = nullptr;
  size_t size = 0;
};

class TarShardWriter {
 public:
  TarShardWriter() = default;
  ~TarShardWriter();
  TarShardWriter(const TarShardWriter&) = delete;
  TarShardWriter& operator=(const TarShardWriter&) = delete;

  // The two zero blocks that end every archive (the last block is not padded further).
  static constexpr int64_t kEndOfArchiveBytes = 1024;

  // Creates `path` (write to path + ".partial", renamed on close, so a
  // killed writer never leaves a shard that looks whole). Throws
  // std::runtime_error naming the path on failure (errno text: a full disk
  // reads "No space left on device"); the .partial file is then removed, as
  // it is when the writer is destroyed while still open. The partial file
  // is flock()ed while written: a second writer of the same shard gets
  // std::invalid_argument, as does a name the filesystem refuses as too long. With replace_existing false, close() does not
  // write over a `path` that appeared meanwhile (std::invalid_argument).
  void open(const std::string& path, bool replace_existing = true);
  void write_sample(std::string_view key, const std::vector<MemberToWrite>& members);
  void close();  // finishes the archive, fsyncs, renames into place, fsyncs the directory
  // Gives the shard up: its .partial is removed, nothing is renamed into
  // place; as destroying an open writer does. Nothing when not open.
  void abandon();
  bool is_open() const { return archive_ != nullptr; }
  // Tar bytes so far, headers and padding included; after close(), the file's size.
  int64_t bytes_written() const { return bytes_; }
  int64_t samples_written() const { return samples_; }

  // What a sample adds to a shard: a 512-byte header per member, data padded
  // to 512 bytes, and a pax header where a name needs one (counted
  // generously, so a size limit planned with it is never passed).
  static int64_t sample_tar_bytes(std::string_view key, const std::vector<MemberToWrite>& members);

  // A second descriptor of the open shard (dup), holding its flock beyond
  // close(): the lock moves with the file from its .partial name to its own.
  // The caller closes it; -1 when not open or out of descriptors.
  int duplicate_lock() const;

 private:
  [[noreturn]] void fail_archive(const std::string& what);
  struct archive* archive_ = nullptr;
  int fd_ = -1;
  std::string path_;
  bool replace_existing_ = true;
  int64_t bytes_ = 0;
  int64_t samples_ = 0;
};

// Removes the .partial files this process's TarShardWriters hold open now;
// from then on no writer starts or finishes a shard (each waits for the
// process's end). For a SIGINT/SIGTERM/SIGHUP cleanup
// (trainer/interrupt_cleanup.h), which ends the process without unwinding
// the writers: call it only when the process is about to end. Safe from any
// thread while they write (a writer mid-shard goes on into an unlinked file).
void remove_partial_shards();

// pattern with its one "%d" / "%0Nd" replaced by index: shard_name("a-%06d.tar", 7)
// is "a-000007.tar"; "%%" is a literal '%'. Throws std::invalid_argument for
// a pattern without exactly one such field.
std::string shard_name(const std::string& pattern, int64_t index);

// `text` (a folder's path) as a pattern's literal part: each '%' doubled. A
// folder named 50%off, or a TMPDIR holding '%', was read as a field ("'%'
// must start %d"), and synth, pack and the default run failed there.
std::string pattern_literal(const std::string& text);

// The first shard a series on `pattern` would write over: of the names
// shard_name(pattern, i) for i in [0, max_shards), the lowest that is already
// taken (by a file, a link or a directory), or "" when none is. Cheap for
// millions of shards: a pattern whose number is in the file name is
// answered by one listing of its directory. `only_not_regular`: only a name
// taken by what is not a regular file (a folder, a FIFO), which even
// --overwrite cannot write a shard over.
std::string first_existing_shard(const std::string& pattern, int64_t max_shards, bool only_not_regular = false);

// The lowest-numbered shard of a series on `pattern` numbered `from` or
// later that is already there (an earlier, longer series' leftovers, which a
// directory spec would read with the new ones), gaps included; or "". For a
// pattern numbering folders ("out-%d/shard.tar"), only shard_name(pattern,
// from) is asked.
std::string first_shard_from(const std::string& pattern, int64_t from);

// Numbered shards pattern % index ("out/train-%06d.tar"); a new shard starts
// when the next sample would pass max_bytes (the whole file, end-of-archive
// blocks included) or max_samples (0 = no limit). A shard holds at least one
// sample, so a sample larger than max_bytes gets a shard of its own.
//
// One series per pattern at a time: its first shard stays flock()ed from
// its creation to the series' close, and a series whose first shard (or its
// .partial) another process holds is refused before it writes anything. Two
// `shards synth --overwrite` into one folder otherwise replaced each other's
// finished shards until one met the other's partial file, and left a mixed
// set behind. (Where the filesystem has no flock, unguarded.)
class ShardSeries {
 public:
  // Throws std::invalid_argument for a bad pattern, a negative limit, or a
  // series another process is writing now. replace_existing: as
  // TarShardWriter::open takes it.
  ShardSeries(std::string pattern, int64_t max_bytes, int64_t max_samples, bool replace_existing = true);
  ~ShardSeries();
  ShardSeries(const ShardSeries&) = delete;
  ShardSeries& operator=(const ShardSeries&) = delete;
  // True when write_sample would put this sample into a new shard (also
  // before the first one): lets a caller stop at a number of shards.
  bool starts_new_shard(std::string_view key, const std::vector<MemberToWrite>& members) const;
  void write_sample(std::string_view key, const std::vector<MemberToWrite>& members);
  void close();
  // Shards opened so far, the one being written last.
  const std::vector<std::string>& paths() const { return paths_; }
  // The first finished_shards() of paths() are whole shards under their own
  // names; after a failure, what the series leaves behind.
  int64_t finished_shards() const { return finished_; }
  int64_t bytes_written() const;  // all shards, as TarShardWriter counts them

 private:
  void close_current();
  std::string pattern_;
  int64_t max_bytes_, max_samples_;
  bool replace_existing_;
  TarShardWriter writer_;
  std::vector<std::string> paths_;
  int64_t bytes_closed_ = 0;
  int64_t finished_ = 0;
  int series_lock_ = -1;  // the first shard's flock, held until close()
};

}  // namespace trainbench
