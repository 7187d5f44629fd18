#include "dataloader/gzip_tar_stream.h"

#include <unistd.h>  // read

#include <algorithm>  // std::min
#include <cerrno>     // errno, ENOMEM, EINVAL
#include <cstring>    // std::memmove, std::memcpy, std::strerror

namespace trainbench {

GzipTarStream::GzipTarStream(int fd, const void* data, size_t size, size_t block_bytes)
    : fd_(fd), memory_(static_cast<const uint8_t*>(data)), memory_size_(size), in_(block_bytes),
      out_{std::vector<uint8_t>(block_bytes), std::vector<uint8_t>(block_bytes)} {
  // 16 + MAX_WBITS: a gzip wrapper, whose header and trailer (CRC-32 and
  // length) inflate checks itself.
  z_ready_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
  z_.next_in = in_.data();
  z_.avail_in = 0;
}

GzipTarStream::~GzipTarStream() {
  if (z_ready_) inflateEnd(&z_);
}

bool GzipTarStream::starts_gzip(const uint8_t* bytes, size_t size) {
  return size >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

int64_t GzipTarStream::fail(int code, const std::string& what) {
  if (error_.empty()) {
    error_ = what;
    error_code_ = code;
  }
  return -1;
}

bool GzipTarStream::fill_input() {
  if (input_ended_ || !error_.empty()) return false;
  // What inflate has not taken yet moves to the front.
  if (z_.avail_in > 0 && z_.next_in != in_.data()) std::memmove(in_.data(), z_.next_in, z_.avail_in);
  z_.next_in = in_.data();
  const size_t room = in_.size() - z_.avail_in;
  int64_t got = 0;
  if (fd_ >= 0) {
    ssize_t n = 0;
    do {
      n = ::read(fd_, in_.data() + z_.avail_in, room);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      const int error = errno;
      fail(error, std::string("cannot read: ") + std::strerror(error));
      return false;
    }
    got = n;
  } else {
    got = static_cast<int64_t>(std::min(room, memory_size_ - memory_used_));
    std::memcpy(in_.data() + z_.avail_in, memory_ + memory_used_, static_cast<size_t>(got));
    memory_used_ += static_cast<size_t>(got);
  }
  if (got == 0) {
    input_ended_ = true;
    return false;
  }
  z_.avail_in += static_cast<uInt>(got);
  compressed_read_ += got;
  return true;
}

int64_t GzipTarStream::read(const void** block) {
  // The other block: the one handed out last stays as it is.
  const int next = current_ ^ 1;
  std::vector<uint8_t>& out = out_[next];
  *block = out.data();
  if (!error_.empty()) return -1;
  if (!z_ready_) return fail(ENOMEM, "gzip: cannot start zlib's inflate: out of memory");
  z_.next_out = out.data();
  z_.avail_out = static_cast<uInt>(out.size());
  // A whole block where the stream has one: libarchive reads in blocks.
  while (z_.avail_out > 0 && !stream_ended_) {
    const int64_t at = compressed_read_ - z_.avail_in;  // compressed offset of the next byte
    if (z_.avail_in == 0 && !fill_input()) {
      if (!error_.empty()) break;
      if (between_members_) {
        stream_ended_ = true;
        break;
      }
      fail(EINVAL, "truncated gzip stream: the file ends inside gzip member " + std::to_string(members_) +
                       " (from compressed byte " + std::to_string(member_start_) + ") at compressed byte " +
                       std::to_string(at) + ", before its CRC-32 and length");
      break;
    }
    if (between_members_) {
      // After a member's trailer: another member, or zeros (padding to a
      // block, as tape tools write), to the end.
      while (z_.avail_in > 0 && *z_.next_in == 0) {
        ++z_.next_in;
        --z_.avail_in;
      }
      if (z_.avail_in == 0) continue;
      if (*z_.next_in != 0x1f) {
        fail(EINVAL, "data after gzip member " + std::to_string(members_) + " at compressed byte " +
                         std::to_string(compressed_read_ - z_.avail_in) + " that is not another gzip member");
        break;
      }
      if (members_ > 0 && inflateReset(&z_) != Z_OK) {
        fail(EINVAL, "gzip: cannot restart zlib's inflate");
        break;
      }
      ++members_;
      member_start_ = compressed_read_ - z_.avail_in;
      between_members_ = false;
      continue;
    }
    const int status = inflate(&z_, Z_NO_FLUSH);
    if (status == Z_STREAM_END) {
      between_members_ = true;  // its trailer is checked
    } else if (status == Z_MEM_ERROR) {
      fail(ENOMEM, "gzip: zlib's inflate is out of memory");
      break;
    } else if (status == Z_DATA_ERROR || status == Z_NEED_DICT || status == Z_STREAM_ERROR) {
      const std::string why = z_.msg != nullptr ? z_.msg : "damaged data";
      // "incorrect data check" / "incorrect length check": the trailer, read
      // after the member's data, which has been handed out.
      failed_check_ = why.find("check") != std::string::npos && why.find("header") == std::string::npos;
      fail(EINVAL, "gzip member " + std::to_string(members_) + " (from compressed byte " +
                       std::to_string(member_start_) + "): " + why + " at compressed byte " +
                       std::to_string(compressed_read_ - z_.avail_in) +
                       (failed_check_ ? " (its CRC-32 or length: its data, read before the check at its end, is "
                                        "damaged)"
                                      : ""));
      break;
    }
    // Z_OK, or Z_BUF_ERROR: no progress without more input, read next.
  }
  const int64_t n = static_cast<int64_t>(out.size() - z_.avail_out);
  // What was inflated before an error is handed out first; the error comes
  // with the next call, so a cut stream's whole samples are read. A call
  // that gives nothing leaves the blocks as they were.
  if (n == 0) return error_.empty() ? 0 : -1;
  current_ = next;
  block_start_[next] = inflated_;
  block_length_[next] = n;
  inflated_ += n;
  return n;
}

int64_t GzipTarStream::first_nonzero_from(int64_t offset) {
  // The rest of the two blocks held (the earlier first), then the stream's.
  for (const int b : {current_ ^ 1, current_}) {
    for (int64_t i = std::max(offset, block_start_[b]); i < block_start_[b] + block_length_[b]; ++i)
      if (out_[b][static_cast<size_t>(i - block_start_[b])] != 0) return i;
  }
  for (;;) {
    const void* block = nullptr;
    const int64_t n = read(&block);
    if (n < 0) return -2;
    if (n == 0) return -1;
    const std::vector<uint8_t>& out = out_[current_];
    for (int64_t i = 0; i < n; ++i)
      if (out[static_cast<size_t>(i)] != 0) return block_start_[current_] + i;
  }
}

}  // namespace trainbench
