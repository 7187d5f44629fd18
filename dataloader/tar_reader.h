// STORAGE READ. Streams the members of one tar shard through libarchive:
// ustar, pax and GNU tar, raw or through any compression filter libarchive
// has (zstd, bzip2, xz, ...); gzip is inflated by zlib first
// (dataloader/gzip_tar_stream.h: its CRC-32 is checked, its rest read). The file is read in large blocks (block_bytes, at
// least 1 MiB) and member data lands in buffers the caller reuses, so the
// steady state allocates nothing per member.
#pragma once

#include <cstdint>  // int64_t, uint8_t
#include <functional>  // std::function: pass_data_blocks
#include <memory>      // std::unique_ptr: a gzip shard's stream
#include <string>
#include <vector>

#include "dataloader/data_error.h"  // CorruptScope: a damaged shard or the machine's limit

struct archive;        // libarchive's handle; only tar_reader.cpp includes archive.h
struct archive_entry;  // libarchive's current header

namespace trainbench {

class GzipTarStream;

struct TarMember {
  std::string name;      // path inside the archive, as stored
  int64_t size = 0;      // data bytes (0 for non-regular entries)
  int64_t offset = 0;    // byte offset of its header in the (uncompressed) tar stream
  bool regular = false;  // a regular file (directories, links, devices are not)
};

class TarReader {
 public:
  explicit TarReader(int64_t block_bytes = 4 << 20);
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // Opens a shard file; closes the previous one. Throws DataError(kShard)
  // naming the path when it cannot be opened or is not a tar archive.
  void open(const std::string& path);
  // Reads a tar held in memory (tests, the fuzz target); `name` stands for
  // the path in messages. The bytes must outlive the reading.
  void open_memory(const void* data, size_t size, const std::string& name);
  void close();

  // Advances to the next member. False at the end of the archive. Throws
  // DataError(kShard) "path: byte N: ..." on a truncated or corrupt archive.
  bool next_member(TarMember* member);
  // The current member's data, whole, into *out (resized; capacity reused).
  // A member larger than max_bytes throws DataError(kSample) and its data is
  // skipped, so the archive can go on with the next member.
  void read_data(std::vector<uint8_t>* out, int64_t max_bytes);
  // Reads the current member's data from storage without keeping it: the
  // bytes pass through libarchive's read buffer and are not copied (for an
  // uncompressed shard). For members a consumer does not decode but whose
  // I/O is the workload (images beside captions). Returns the byte count
  // (a sparse member's size, holes included, as read_data gives it); the
  // max_bytes rule is read_data's.
  int64_t read_through_data(int64_t max_bytes);
  // Skips the current member's data: libarchive may seek past it, so the
  // bytes need not be read from storage at all.
  void skip_data();

  const std::string& path() const { return path_; }
  // Bytes consumed from storage for this archive so far (compressed bytes
  // for a compressed shard): what "bytes read" reports.
  int64_t storage_bytes() const;
  // Uncompressed tar-stream position: the offset in error messages.
  int64_t stream_offset() const;
  // Once next_member has returned false: true when the stream ended right
  // after a member, without the end-of-archive marker (zero blocks) every
  // tar writer puts last — a copy cut short at a member boundary. libarchive,
  // GNU tar and Python's tarfile read such a file as whole, the loader too;
  // `shards verify` names it.
  bool ended_without_end_marker() const { return at_end_ && !end_marker_seen_; }
  // Once next_member has returned false after the end-of-archive marker: the
  // offset of the first byte that is not zero after it, or -1. A zeroed block
  // where a header was (a damaged disk block), or archives joined by `cat`:
  // every tar reader stops at the marker (GNU tar says "A lone zero block"),
  // and what follows was dropped without a word. Uncompressed and gzip
  // shards (the offset is in the inflated stream; other compressions' rest
  // is not read).
  int64_t data_after_end_marker() const { return data_after_end_; }

 private:
  void start_archive(const std::string& path);
  void require_member() const;
  [[noreturn]] void fail_open();
  CorruptScope failure_scope() const;
  std::string archive_reason() const;
  // The current member's size; an oversized one is skipped and reported.
  int64_t checked_member_size(int64_t max_bytes);
  // Passes the current member's data blocks to `take` (block, length, its
  // offset in the member), in order, and fails a member whose data ends
  // short of its size (or its sparse map) or lies outside its size.
  void pass_data_blocks(int64_t size, const std::function<void(const void*, size_t, int64_t)>& take);
  [[noreturn]] void fail_short_member(int64_t got, int64_t size) const;
  int64_t first_nonzero_byte_from(int64_t offset) const;
  [[noreturn]] void fail(int64_t offset, const std::string& what) const;
  [[noreturn]] void fail_header() const;
  int64_t uncompressed_file_bytes() const;
  int64_t next_header_start() const;
  int64_t cut_in_extended_header() const;
  bool cut_in_end_marker() const;
  [[noreturn]] void fail_data() const;
  // libarchive's error in a message: where it is truncated, or what failed.
  std::string explain(const std::string& where_truncated, const std::string& otherwise) const;

  // Opens the archive on a gzip stream (fd_, or the bytes in memory).
  void open_gzip(const void* data, size_t size);

  std::unique_ptr<GzipTarStream> gzip_;  // a gzip shard's inflated stream, or null
  struct archive* archive_ = nullptr;
  struct archive_entry* entry_ = nullptr;  // owned by archive_
  int fd_ = -1;
  bool at_end_ = false;  // libarchive must not be asked for a header after the end
  bool end_marker_seen_ = false;  // at the end: libarchive read past where the next header would start
  int64_t data_after_end_ = -1;   // at the end: where non-zero bytes follow the marker
  std::string path_;
  int64_t block_bytes_;
  int64_t member_offset_ = 0;
  int64_t data_start_ = -1;  // where the current member's data starts in the tar stream (-1: no member yet)
  std::string member_name_;  // for messages about the current member's data
};

}  // namespace trainbench
