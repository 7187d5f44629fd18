// Builds tar shards in memory for the reading tests with libarchive's writer:
// a second, independent tar implementation to read back. (The Python interop
// test covers the tars Python writes.)
#pragma once

#include <archive.h>        // archive_write_*
#include <archive_entry.h>  // archive_entry_*
#include <sys/stat.h>       // mkdir

#include <cstdio>
#include <fstream>
#include <iterator>  // std::istreambuf_iterator
#include <stdexcept>
#include <string>
#include <utility>  // std::move
#include <vector>

#include "tests/support/temp_dir.h"  // TempDir

namespace trainbench::testing {

struct TestEntry {
  enum Kind { kFile, kDirectory, kSymlink, kHardlink };
  TestEntry(std::string name_, std::string data_, Kind kind_ = kFile, std::string target_ = "")
      : name(std::move(name_)), data(std::move(data_)), kind(kind_), target(std::move(target_)) {}
  std::string name;
  std::string data;  // file contents
  Kind kind = kFile;
  std::string target;  // of a link
};

enum class TarFormat { kPax, kGnu, kUstar };
enum class TarFilter { kNone, kGzip, kZstd, kBzip2, kXz };

inline std::string make_tar(const std::vector<TestEntry>& entries,
                            TarFormat format = TarFormat::kPax,
                            TarFilter filter = TarFilter::kNone) {
  std::string bytes;
  struct archive* writer = archive_write_new();
  if (format == TarFormat::kPax) archive_write_set_format_pax_restricted(writer);
  if (format == TarFormat::kGnu) archive_write_set_format_gnutar(writer);
  if (format == TarFormat::kUstar) archive_write_set_format_ustar(writer);
  if (filter == TarFilter::kGzip) archive_write_add_filter_gzip(writer);
  if (filter == TarFilter::kZstd) archive_write_add_filter_zstd(writer);
  if (filter == TarFilter::kBzip2) archive_write_add_filter_bzip2(writer);
  if (filter == TarFilter::kXz) archive_write_add_filter_xz(writer);
  // No padding of the last block to 10 KiB: the tests cut and patch exact bytes.
  archive_write_set_bytes_in_last_block(writer, 1);
  auto append = [](struct archive*, void* out, const void* data, size_t size) -> la_ssize_t {
    static_cast<std::string*>(out)->append(static_cast<const char*>(data), size);
    return static_cast<la_ssize_t>(size);
  };
  if (archive_write_open(writer, &bytes, nullptr, append, nullptr) != ARCHIVE_OK) {
    throw std::runtime_error(std::string("archive_write_open: ") + archive_error_string(writer));
  }
  for (const TestEntry& entry : entries) {
    struct archive_entry* header = archive_entry_new();
    archive_entry_set_pathname(header, entry.name.c_str());
    archive_entry_set_perm(header, 0644);
    archive_entry_set_mtime(header, 1700000000, 0);
    switch (entry.kind) {
      case TestEntry::kFile:
        archive_entry_set_filetype(header, AE_IFREG);
        archive_entry_set_size(header, static_cast<la_int64_t>(entry.data.size()));
        break;
      case TestEntry::kDirectory:
        archive_entry_set_filetype(header, AE_IFDIR);
        break;
      case TestEntry::kSymlink:
        archive_entry_set_filetype(header, AE_IFLNK);
        archive_entry_set_symlink(header, entry.target.c_str());
        break;
      case TestEntry::kHardlink:
        archive_entry_set_filetype(header, AE_IFREG);
        archive_entry_set_hardlink(header, entry.target.c_str());
        break;
    }
    if (archive_write_header(writer, header) < ARCHIVE_WARN) {
      throw std::runtime_error(std::string("archive_write_header: ") +
                               archive_error_string(writer));
    }
    if (entry.kind == TestEntry::kFile && !entry.data.empty()) {
      archive_write_data(writer, entry.data.data(), entry.data.size());
    }
    archive_entry_free(header);
  }
  archive_write_close(writer);
  archive_write_free(writer);
  return bytes;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A copy of the tar at `path` cut at its last member boundary, as an
// interrupted copy leaves a shard: the end-of-archive marker (two zero
// blocks; trainbench's writer pads no further) dropped. Throws when the
// file does not end in one.
inline std::string copy_without_end_marker(const std::string& path, const std::string& copy) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 1024 || bytes.compare(bytes.size() - 1024, 1024, std::string(1024, '\0')) != 0)
    throw std::runtime_error(path + " does not end in the tar end-of-archive marker");
  write_file(copy, bytes.substr(0, bytes.size() - 1024));
  return copy;
}

using TempDirectory = TempDir;  // tests/support/temp_dir.h

}  // namespace trainbench::testing
