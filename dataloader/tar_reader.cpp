#include "dataloader/tar_reader.h"

#include <archive.h>        // archive_read_* (libarchive)
#include <archive_entry.h>  // archive_entry_pathname, _size, _filetype, _hardlink, _sparse_reset/_next
#include <fcntl.h>          // open, fcntl, posix_fadvise
#include <sys/stat.h>       // fstat: only regular files are shards
#include <unistd.h>         // close, pread: the bytes after the end marker

#include <algorithm>  // std::max
#include <cerrno>     // errno
#include <cstring>    // std::strerror, std::strstr, std::memcpy, std::memset
#include <string_view>  // says_truncated

#include "dataloader/data_error.h"
#include "dataloader/gzip_tar_stream.h"  // GzipTarStream: gzip shards, inflated by zlib

namespace trainbench {

namespace {
// Below this a shard on a parallel file system is read in requests too small
// to reach its bandwidth; libarchive's own default is 10 KiB.
constexpr int64_t kMinBlockBytes = int64_t{1} << 20;

// libarchive's read callback over a gzip shard's inflated stream.
la_ssize_t read_gzip_stream(struct archive* archive, void* stream, const void** block) {
  GzipTarStream& gzip = *static_cast<GzipTarStream*>(stream);
  const int64_t n = gzip.read(block);
  if (n >= 0) return static_cast<la_ssize_t>(n);
  archive_set_error(archive, gzip.error_code(), "%s", gzip.error().c_str());
  return ARCHIVE_FATAL;
}
}  // namespace

TarReader::TarReader(int64_t block_bytes) : block_bytes_(std::max(block_bytes, kMinBlockBytes)) {}

TarReader::~TarReader() { close(); }

void TarReader::close() {
  if (archive_ != nullptr) archive_read_free(archive_);
  archive_ = nullptr;
  entry_ = nullptr;
  gzip_.reset();  // after libarchive, which reads through it
  // archive_read_open_fd leaves the descriptor to its owner.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  at_end_ = false;
  end_marker_seen_ = false;
  data_after_end_ = -1;
  member_offset_ = 0;
  member_name_.clear();
  data_start_ = -1;
}

void TarReader::start_archive(const std::string& path) {
  close();
  path_ = path;
  archive_ = archive_read_new();
  if (archive_ == nullptr) {
    throw DataError(CorruptScope::kEnvironment, path + ": cannot allocate a libarchive reader: out of memory");
  }
  // Shards are tar (ustar, pax, GNU) only; any compression is accepted.
  archive_read_support_format_tar(archive_);
  archive_read_support_filter_all(archive_);
}

void TarReader::open(const std::string& path) {
  start_archive(path);
  // O_NONBLOCK so that a FIFO does not block the open; only a regular file
  // is read (a device such as /dev/zero would never end), then blocking
  // reads as usual.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    // Out of descriptors or memory is the machine's limit, not a bad shard:
    // data.on_corrupt=skip would have skipped every shard as corrupt.
    const int error = errno;
    close();
    throw DataError(scope_of_failed_open(error, CorruptScope::kShard),
                    path + ": cannot open: " + std::strerror(error) +
                        (error == EMFILE ? " (ulimit -n; fewer data.readers need fewer)" : ""));
  }
  struct stat info;
  if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
    close();
    throw DataError(CorruptScope::kShard, path + ": not a regular file");
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  // Shards are read once, front to back: let the kernel read ahead further.
  posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint8_t magic[2] = {};
  ssize_t got = 0;
  do {
    got = ::pread(fd_, magic, sizeof magic, 0);
  } while (got < 0 && errno == EINTR);
  if (got > 0 && GzipTarStream::starts_gzip(magic, static_cast<size_t>(got))) {
    open_gzip(nullptr, 0);
  } else if (archive_read_open_fd(archive_, fd_, static_cast<size_t>(block_bytes_)) != ARCHIVE_OK) {
    fail_open();
  }
}

void TarReader::open_memory(const void* data, size_t size, const std::string& name) {
  start_archive(name);
  if (GzipTarStream::starts_gzip(static_cast<const uint8_t*>(data), size)) {
    open_gzip(data, size);
  } else if (archive_read_open_memory(archive_, data, size) != ARCHIVE_OK) {
    fail_open();
  }
}

void TarReader::open_gzip(const void* data, size_t size) {
  gzip_ = std::make_unique<GzipTarStream>(fd_, data, size, static_cast<size_t>(block_bytes_));
  if (archive_read_open(archive_, gzip_.get(), nullptr, read_gzip_stream, nullptr) != ARCHIVE_OK) fail_open();
}

namespace {
// libarchive's words for a stream that ends early: "Truncated tar archive",
// "truncated gzip input", and liblzma's LZMA_BUF_ERROR, "Lzma library
// error: No progress is possible" (an xz stream whose input ran out).
bool says_truncated(std::string_view why) {
  return why.find("runcated") != std::string_view::npos ||
         why.find("No progress is possible") != std::string_view::npos;
}
}  // namespace

// libarchive picks the format while opening, so a file that is not a tar
// (including an empty one) fails here.
void TarReader::fail_open() {
  const char* why = archive_error_string(archive_);
  std::string message;
  if (why != nullptr && std::strstr(why, "Unrecognized archive format") != nullptr) {
    message = path_ + ": not a tar archive";
  } else if (why != nullptr && says_truncated(why)) {  // a cut compressed stream
    // Not "before the first member": libarchive reads ahead (64 KiB of the
    // compressed stream) while it opens, so a small shard cut short fails
    // here whole though its first samples are there (Python's tarfile reads
    // them).
    message = at_offset(path_, 0,
                        explain("the compressed stream ends within what is read ahead at open, so none of "
                                "its samples is read",
                                ""));
  } else {
    const std::string reason = archive_reason();
    message = path_ + ": cannot open: " +
              (!reason.empty() ? reason : "libarchive gave no reason (a compressed stream cut short?)");
  }
  const CorruptScope scope = failure_scope();
  close();
  throw DataError(scope, message);
}

// libarchive out of memory (ENOMEM: "No memory", "Can't allocate ...") or
// a read the storage failed (EIO, ESTALE: "Error reading fd 7") is the
// machine's, not a damaged shard: exit 3, and never a shard that
// data.on_corrupt=skip skips.
CorruptScope TarReader::failure_scope() const {
  if (archive_ == nullptr) return CorruptScope::kShard;
  const int error = archive_errno(archive_);
  return error == ENOMEM || is_storage_failure(error) ? CorruptScope::kEnvironment : CorruptScope::kShard;
}

// libarchive's words, and the system's where storage failed: libarchive
// says "Error reading fd 7" and keeps the errno apart.
std::string TarReader::archive_reason() const {
  const char* why = archive_ != nullptr ? archive_error_string(archive_) : nullptr;
  std::string reason = why != nullptr ? printable(why) : "";
  if (archive_ != nullptr && is_storage_failure(archive_errno(archive_)))
    reason += (reason.empty() ? "" : ": ") + std::string(std::strerror(archive_errno(archive_)));
  return reason;
}

void TarReader::require_member() const {
  if (archive_ == nullptr || entry_ == nullptr || at_end_) {
    throw DataError(CorruptScope::kShard,
                    path_ + ": no current member to read (a caller's mistake)");
  }
}

bool TarReader::next_member(TarMember* member) {
  if (archive_ == nullptr) throw DataError(CorruptScope::kShard, path_ + ": no archive is open");
  // libarchive treats asking again after the end as a programming error.
  if (at_end_) return false;
  const int status = archive_read_next_header(archive_, &entry_);
  at_end_ = status == ARCHIVE_EOF;
  if (at_end_) {
    // libarchive says EOF alike for the zero blocks and for a stream that
    // simply stops where a header should start; only the former consumes
    // bytes past that start (the header position it recorded before asking).
    // A foreign tar that ends in a pax global header or a GNU volume header
    // also consumes some: counted as ended properly (trainbench writes neither).
    end_marker_seen_ = stream_offset() > archive_read_header_position(archive_);
    if (end_marker_seen_ && gzip_ != nullptr) {
      // Inflated to its end: the rest after the marker, and every member's
      // CRC-32 and length with it.
      data_after_end_ = gzip_->first_nonzero_from(stream_offset());
      if (data_after_end_ == -2) {
        data_after_end_ = -1;
        // A member's failed check is about its compressed bytes, named in
        // the message; the tar stream's offset would point past them.
        if (gzip_->failed_its_check()) throw DataError(failure_scope(), path_ + ": " + gzip_->error());
        fail(stream_offset(), "after the end-of-archive marker: " + gzip_->error());
      }
    } else if (end_marker_seen_ && fd_ >= 0 && archive_filter_code(archive_, 0) == ARCHIVE_FILTER_NONE) {
      data_after_end_ = first_nonzero_byte_from(stream_offset());
    }
    return false;
  }
  // ARCHIVE_WARN marks a readable entry with a quirk (an odd pax attribute, a
  // name that does not convert to the locale); the entry itself is good.
  // ARCHIVE_RETRY is a header whose checksum is wrong: the shard is damaged.
  if (status != ARCHIVE_OK && status != ARCHIVE_WARN) {
    // Every member whole, the file cut inside its end-of-archive zeros: read
    // as a copy cut at a member boundary is (ended_without_end_marker), not
    // as a damaged header, which failed a shard whose samples were all there.
    if (cut_in_end_marker()) {
      at_end_ = true;
      end_marker_seen_ = false;
      return false;
    }
    fail_header();
  }

  member_offset_ = archive_read_header_position(archive_);
  data_start_ = stream_offset();
  const char* name = archive_entry_pathname(entry_);
  member_name_ = name != nullptr ? name : "";
  // A hard link is stored as a regular-file header without data: like Python's
  // tarfile (and so webdataset), not a file to read.
  const bool regular =
      archive_entry_filetype(entry_) == AE_IFREG && archive_entry_hardlink(entry_) == nullptr;
  member->name = member_name_;
  member->regular = regular;
  member->size = regular ? archive_entry_size(entry_) : 0;
  member->offset = member_offset_;
  return true;
}

int64_t TarReader::checked_member_size(int64_t max_bytes) {
  require_member();
  const int64_t size = archive_entry_size_is_set(entry_) ? archive_entry_size(entry_) : 0;
  if (size < 0) fail(member_offset_, printable(member_name_) + " has a negative size");
  if (size > max_bytes) {
    skip_data();
    throw DataError(CorruptScope::kSample,
                    at_offset(path_, member_offset_,
                              printable(member_name_) + " is " + std::to_string(size) +
                                  " bytes, more than the limit of " + std::to_string(max_bytes)));
  }
  return size;
}

void TarReader::read_data(std::vector<uint8_t>* out, int64_t max_bytes) {
  const int64_t size = checked_member_size(max_bytes);
  // resize() keeps the capacity: after the first large member nothing is allocated.
  out->resize(static_cast<size_t>(size));
  uint8_t* data = out->data();
  // Blocks rather than archive_read_data, which zero-fills whatever a sparse
  // member's map lists beyond what it stores: a damaged member read as a
  // whole one. Holes (the gaps between blocks, and after the last) are zeros.
  int64_t end = 0;
  pass_data_blocks(size, [&](const void* block, size_t length, int64_t offset) {
    if (offset > end) std::memset(data + end, 0, static_cast<size_t>(offset - end));
    std::memcpy(data + offset, block, length);
    end = std::max(end, offset + static_cast<int64_t>(length));
  });
  if (size > end) std::memset(data + end, 0, static_cast<size_t>(size - end));
}

int64_t TarReader::read_through_data(int64_t max_bytes) {
  const int64_t size = checked_member_size(max_bytes);
  pass_data_blocks(size, [](const void*, size_t, int64_t) {});
  return size;
}

void TarReader::pass_data_blocks(int64_t size,
                                 const std::function<void(const void*, size_t, int64_t)>& take) {
  int64_t passed = 0;
  int64_t previous_end = 0;  // where the block before ended
  for (;;) {
    const void* block = nullptr;
    size_t length = 0;
    la_int64_t offset = 0;
    const int status = archive_read_data_block(archive_, &block, &length, &offset);
    if (status == ARCHIVE_EOF) break;
    if (status < ARCHIVE_WARN) fail_data();
    // A sparse map is the header's word: one placing data outside the
    // member's size is damage, not an address to write to; nor is one whose
    // blocks go back or overlap (archive_read_data refused those: the last
    // block written would win, where another reader assembles otherwise).
    if (offset < 0 || static_cast<int64_t>(length) > size - offset) {
      fail(stream_offset(), printable(member_name_) + " (header at byte " +
                                std::to_string(member_offset_) + ") has data at byte " +
                                std::to_string(offset) + " past its size of " +
                                std::to_string(size) + " bytes");
    }
    if (offset < previous_end) {
      fail(stream_offset(), printable(member_name_) + " (header at byte " + std::to_string(member_offset_) +
                                ") has a sparse block at byte " + std::to_string(offset) +
                                " before the end of the one before it (byte " + std::to_string(previous_end) +
                                "): its sparse map is out of order");
    }
    take(block, length, offset);
    previous_end = offset + static_cast<int64_t>(length);
    passed += static_cast<int64_t>(length);
  }
  // A sparse member (GNU tar --sparse) holds its data blocks only: the
  // blocks skip its holes (their offsets jump) and add up to less than its
  // size, up to all of a trailing hole. It is whole when every block of its
  // map came (libarchive fails a file cut inside one, "Truncated tar
  // archive", but ends a map that lists more than the member stores early).
  if (archive_entry_sparse_reset(entry_) > 0) {
    int64_t mapped = 0;
    la_int64_t offset = 0, length = 0;
    while (archive_entry_sparse_next(entry_, &offset, &length) == ARCHIVE_OK) mapped += length;
    if (passed < mapped) fail_short_member(passed, mapped);
    return;
  }
  if (passed < size) fail_short_member(passed, size);
}

void TarReader::fail_short_member(int64_t got, int64_t size) const {
  fail(stream_offset(), printable(member_name_) + " (header at byte " +
                            std::to_string(member_offset_) + ") ends after " +
                            std::to_string(got) + " of its " + std::to_string(size) + " bytes");
}

void TarReader::skip_data() {
  require_member();
  if (archive_read_data_skip(archive_) < ARCHIVE_WARN) fail_data();
}

// The rest of the file after the marker: zeros (the record's padding) or
// not. Read only up to its first non-zero byte.
int64_t TarReader::first_nonzero_byte_from(int64_t offset) const {
  std::vector<char> block(64 << 10);
  for (;;) {
    const ssize_t got = ::pread(fd_, block.data(), block.size(), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;  // the end (an error here is no reason to fail what was read)
    for (ssize_t i = 0; i < got; ++i)
      if (block[static_cast<size_t>(i)] != 0) return offset + i;
    offset += got;
  }
}

int64_t TarReader::storage_bytes() const {
  if (gzip_ != nullptr) return gzip_->compressed_bytes();
  return archive_ != nullptr ? archive_filter_bytes(archive_, -1) : 0;
}

int64_t TarReader::stream_offset() const {
  return archive_ != nullptr ? archive_filter_bytes(archive_, 0) : 0;
}

void TarReader::fail(int64_t offset, const std::string& what) const {
  throw DataError(failure_scope(), at_offset(path_, offset, what));
}

namespace {
constexpr int64_t kTarBlock = 512;

// A tar header's size field (bytes 124..135): octal digits, or GNU's
// base-256 (the first byte's high bit set) for sizes past 8 GiB. -1 where it
// is neither.
int64_t tar_header_size(const unsigned char* header) {
  const unsigned char* field = header + 124;
  constexpr int kWidth = 12;
  int64_t size = 0;
  if ((field[0] & 0x80) != 0) {
    for (int i = 1; i < kWidth; ++i) {
      if (size > (INT64_MAX >> 8)) return -1;
      size = (size << 8) | field[i];
    }
    return (field[0] & 0x7f) == 0 ? size : -1;
  }
  int i = 0;
  while (i < kWidth && field[i] == ' ') ++i;
  for (; i < kWidth && field[i] >= '0' && field[i] <= '7'; ++i) size = size * 8 + (field[i] - '0');
  return size;
}

// The header kinds that describe the next header rather than a member: pax
// extended ('x') and global ('g') headers, GNU long names ('L', 'K').
bool extends_the_next_header(unsigned char type_flag) {
  return type_flag == 'x' || type_flag == 'g' || type_flag == 'L' || type_flag == 'K';
}

int64_t whole_blocks(int64_t bytes) { return (bytes + kTarBlock - 1) / kTarBlock * kTarBlock; }
}  // namespace

// The file's size where its bytes are the tar's (an uncompressed shard read
// from a file, which the checks below read themselves), else -1.
int64_t TarReader::uncompressed_file_bytes() const {
  if (fd_ < 0 || archive_filter_code(archive_, 0) != ARCHIVE_FILTER_NONE) return -1;
  struct stat info;
  return ::fstat(fd_, &info) == 0 ? static_cast<int64_t>(info.st_size) : -1;
}

// Where the header after the current member starts (0 before the first): the
// current member's own header block, just before its data, gives its size.
int64_t TarReader::next_header_start() const {
  if (data_start_ < kTarBlock) return 0;
  unsigned char header[kTarBlock];
  if (::pread(fd_, header, sizeof header, data_start_ - kTarBlock) != kTarBlock) return -1;
  const int64_t size = tar_header_size(header);
  return size < 0 ? -1 : data_start_ + whole_blocks(size);
}

// libarchive says "Damaged tar archive", or nothing, where a file ends inside
// a pax or GNU long-name header or right after one, before the header it
// extends: read here from the file (uncompressed shards), following the
// extension headers from where the next member starts. The start of the cut
// member, or -1 where the file does not end there.
int64_t TarReader::cut_in_extended_header() const {
  const int64_t file_bytes = uncompressed_file_bytes();
  if (file_bytes < 0) return -1;
  const int64_t member_start = next_header_start();
  if (member_start < 0) return -1;
  unsigned char header[kTarBlock];
  for (int64_t at = member_start; ;) {
    if (at + kTarBlock > file_bytes) return at > member_start ? member_start : -1;
    if (::pread(fd_, header, sizeof header, at) != kTarBlock) return -1;
    const int64_t size = tar_header_size(header);
    if (!extends_the_next_header(header[156]) || size < 0) return -1;  // a member's header, whole
    at += kTarBlock + whole_blocks(size);
    if (at > file_bytes) return member_start;
  }
}

// libarchive says "Truncated tar archive" where an uncompressed file ends
// less than a block after the last member, however the rest reads: true
// where that rest is zeros (the start of the end-of-archive marker, a copy
// cut inside it).
bool TarReader::cut_in_end_marker() const {
  const int64_t file_bytes = uncompressed_file_bytes();
  const int64_t member_start = file_bytes < 0 ? -1 : next_header_start();
  return member_start >= 0 && file_bytes > member_start && file_bytes - member_start < kTarBlock &&
         first_nonzero_byte_from(member_start) < 0;
}

// libarchive says "Truncated tar archive" (or "truncated gzip input", ...)
// without saying where; the message adds the offset and what was being read.
void TarReader::fail_header() const {
  if (const int64_t cut_member = cut_in_extended_header(); cut_member >= 0)
    fail(cut_member, "truncated tar archive: the file ends inside the pax or GNU long-name header of the member "
                     "starting here, or before the header it extends");
  // Where a damaged header starts, not how far libarchive read into it; after
  // a fatal error libarchive no longer says, and the read position stands in.
  const int64_t header_start = archive_read_header_position(archive_);
  fail(header_start >= 0 ? header_start : stream_offset(),
       explain("the file ends inside a member header or its padding", "corrupt tar archive"));
}

void TarReader::fail_data() const {
  const std::string member =
      printable(member_name_) + " (header at byte " + std::to_string(member_offset_) + ")";
  fail(stream_offset(),
       explain("it ends inside the data of " + member, "cannot read the data of " + member));
}

std::string TarReader::explain(const std::string& where_truncated,
                               const std::string& otherwise) const {
  // The gzip stream's own words (it is not libarchive's).
  if (gzip_ != nullptr && !gzip_->error().empty()) {
    const std::string& why = gzip_->error();
    if (why.rfind("truncated", 0) == 0) return "truncated tar archive: " + where_truncated + " (" + why + ")";
    return otherwise + ": " + why;
  }
  const std::string why =
      archive_error_string(archive_) != nullptr ? archive_error_string(archive_) : "";
  const bool truncated = says_truncated(why);
  if (!truncated) return otherwise + ": " + (why.empty() ? "unknown error" : archive_reason());
  const std::string detail =
      why == "Truncated tar archive" ? "" : " (libarchive: " + printable(why) + ")";
  return "truncated tar archive: " + where_truncated + detail;
}

}  // namespace trainbench
