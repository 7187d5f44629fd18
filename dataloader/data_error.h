// STORAGE READ. The one error type of the data path: a user's data is wrong
// (missing shard, truncated tar, token id out of range). The CLI prints what()
// (one line, naming the path and byte offset) and exits 2 (3 for kEnvironment). `scope` tells a
// loader running with data.on_corrupt=skip how much to skip.
#pragma once

#include <cerrno>     // scope_of_failed_open: EMFILE, ENFILE, ENOMEM, EIO, ESTALE
#include <cstdint>    // int64_t
#include <stdexcept>  // std::runtime_error
#include <string>
#include <string_view>

namespace trainbench {

enum class CorruptScope {
  kSample,  // this sample is bad; the shard can go on after it
  kShard,   // the rest of this shard cannot be read
  kConfig,  // not the data's fault but its description (no shards, bad field): never skipped
  kEnvironment,  // the machine's (out of descriptors or memory, storage failing): never skipped, exit 3
};

// Storage that fails to read (EIO: a disk, a controller; ESTALE: an NFS
// handle gone stale): the machine's, not a damaged shard that
// data.on_corrupt=skip would leave out of the data set.
inline bool is_storage_failure(int error) { return error == EIO || error == ESTALE; }

// The scope of a failed open, listing or read: the machine's limit (out of
// descriptors, the system's file table, memory) and failing storage are the
// environment's, never the data's; any other errno is `otherwise`'s.
inline CorruptScope scope_of_failed_open(int error, CorruptScope otherwise) {
  return error == EMFILE || error == ENFILE || error == ENOMEM || is_storage_failure(error)
             ? CorruptScope::kEnvironment
             : otherwise;
}

class DataError : public std::runtime_error {
 public:
  DataError(CorruptScope scope, const std::string& message)
      : std::runtime_error(message), scope_(scope) {}
  CorruptScope scope() const { return scope_; }

 private:
  CorruptScope scope_;
};

// A name taken from the data (a member name, a key) as it goes into a
// message: control bytes such as a newline become \xNN, so the message stays
// one line.
inline std::string printable(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  return out;
}

// "path: byte N: what" — the form every shard error takes (a file name
// with a newline in it stays on the message's one line).
inline std::string at_offset(const std::string& path, int64_t offset, const std::string& what) {
  return printable(path) + ": byte " + std::to_string(offset) + ": " + what;
}

}  // namespace trainbench
