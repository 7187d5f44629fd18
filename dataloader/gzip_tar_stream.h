// STORAGE READ. A gzip shard's tar stream, inflated with zlib and handed to
// libarchive as plain tar (TarReader's read callback). Why not libarchive's
// own gzip filter: it never checks a member's CRC-32 and length (its
// consume_trailer says "XXX TODO: Verify the length and CRC"), so a bit
// flipped in a stored or literal block was trained on and `shards verify`
// said errors 0, where gzip -t and Python's gzip module refuse the file; and
// what follows the tar's end-of-archive marker (two shards joined by `cat`)
// was never read. Here every member's trailer is checked, members joined one
// after another read as one stream (RFC 1952, as gzip and Python read them),
// and the stream after the marker can be read on to its end.
#pragma once

#include <zlib.h>

#include <cstddef>  // size_t
#include <cstdint>  // int64_t, uint8_t
#include <string>
#include <vector>

namespace trainbench {

class GzipTarStream {
 public:
  // Reads the compressed bytes from `fd` (not owned), or from `data`, `size`
  // in memory when fd < 0, `block_bytes` at a time.
  GzipTarStream(int fd, const void* data, size_t size, size_t block_bytes);
  ~GzipTarStream();
  GzipTarStream(const GzipTarStream&) = delete;
  GzipTarStream& operator=(const GzipTarStream&) = delete;

  // True when the first bytes are gzip's magic number (1f 8b).
  static bool starts_gzip(const uint8_t* bytes, size_t size);

  // The next block of inflated bytes in *block: its length, 0 at the end
  // of the stream, -1 on an error (error() says what, error_code() an errno
  // value for libarchive). The block stays valid until the next call.
  int64_t read(const void** block);
  const std::string& error() const { return error_; }
  int error_code() const { return error_code_; }

  int64_t compressed_bytes() const { return compressed_read_; }  // read from storage so far
  // Once libarchive has stopped at the end-of-archive marker, at inflated
  // offset `offset` (within the last two blocks read, or after them): the
  // offset of the first non-zero inflated byte from there, or -1 when the
  // rest of the stream is zeros. Inflates the rest, so that every member's
  // trailer is checked: -2 on an error then (error() says what).
  int64_t first_nonzero_from(int64_t offset);
  // A member's trailer failed its check (error() says so). The check comes
  // at the member's end, after its data, as for `gzip -dc | tar` and
  // Python's tarfile: the bytes handed out before it may be damaged, and a
  // single-member shard's samples have all been handed out by then.
  bool failed_its_check() const { return failed_check_; }

 private:
  bool fill_input();  // more compressed bytes into in_; false at the end of the file or on an error
  int64_t fail(int code, const std::string& what);

  int fd_;
  const uint8_t* memory_;
  size_t memory_size_, memory_used_ = 0;
  z_stream z_{};
  bool z_ready_ = false;
  std::vector<uint8_t> in_;
  // Two output blocks, filled in turn: libarchive may stop at the marker
  // having consumed only part of the block before the last one (a header
  // read across the two), whose rest first_nonzero_from must still see.
  std::vector<uint8_t> out_[2];
  int current_ = 0;                   // the block handed out last
  int64_t block_start_[2] = {0, 0};   // inflated offset of each block
  int64_t block_length_[2] = {0, 0};
  bool failed_check_ = false;
  int64_t compressed_read_ = 0;   // bytes of the file read into in_ so far
  int64_t member_start_ = 0;      // compressed offset of the member being inflated
  int64_t members_ = 0;           // members begun
  int64_t inflated_ = 0;          // inflated bytes handed out, all blocks
  bool between_members_ = true;   // at the start, or after a member's checked trailer
  bool input_ended_ = false;      // the file has no more bytes
  bool stream_ended_ = false;     // the last member's trailer checked, nothing but zeros after it
  std::string error_;
  int error_code_ = 0;
};

}  // namespace trainbench
