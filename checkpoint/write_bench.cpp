#include "checkpoint/write_bench.h"

#include <fcntl.h>   // open, O_DIRECT
#include <unistd.h>  // pwrite, fsync, close, unlink

#include <algorithm>  // std::sort, std::min
#include <cerrno>     // errno
#include <chrono>     // steady_clock
#include <cstdlib>    // std::aligned_alloc, std::free
#include <cstring>    // std::memcpy
#include <memory>     // std::unique_ptr
#include <new>        // std::bad_alloc
#include <stdexcept>  // std::invalid_argument

#include "checkpoint/checkpoint_files.h"  // write_rank_files, pending_folder, ...
#include "checkpoint/checkpoint_io.h"     // fail_write, remove_folder

namespace trainbench {

namespace io = checkpoint_io;

namespace {

constexpr int64_t kPlainBlock = 64LL << 20;  // as `dd bs=64M`
constexpr int64_t kBenchStep = 0;           // the bench's pending folder is step_0.tmp

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;  // a side not measured (persist_only)
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Bytes that no filesystem can compress or deduplicate, so neither side
// gets a free ride (ZFS, btrfs with compression; /dev/zero would).
void fill_incompressible(unsigned char* data, int64_t bytes, uint64_t seed) {
  uint64_t state = seed;
  for (int64_t i = 0; i + 8 <= bytes; i += 8) {
    state += 0x9e3779b97f4a7c15ULL;  // splitmix64
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(data + i, &z, 8);
  }
}

// Memory a plain write copies from, in order: kPlainBlock pieces.
struct Span {
  const unsigned char* data;
  int64_t bytes;
};

// One file written from `spans` in kPlainBlock writes, fsync, close: `dd
// if=... of=path bs=64M oflag=direct conv=fsync`. Returns seconds.
double plain_sequential_write(const std::string& path, const std::vector<Span>& spans, bool direct_io,
                              bool* used_direct_io) {
  const auto begin = std::chrono::steady_clock::now();
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = direct_io ? ::open(path.c_str(), flags | O_DIRECT, 0644) : -1;
  *used_direct_io = fd >= 0;
  if (fd < 0 && direct_io && errno != EINVAL) io::fail_write("cannot create", path, errno);
  if (fd < 0) fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) io::fail_write("cannot create", path, errno);
  auto abandon = [&](const char* what, int error) {
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
    io::fail_write(what, path, error);
  };
  int64_t offset = 0;
  for (const Span& span : spans) {
    int64_t done = 0;
    while (done < span.bytes) {
      const ssize_t n = ::pwrite(fd, span.data + done, static_cast<size_t>(span.bytes - done), offset);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) abandon("cannot write", errno);
      if (n == 0) abandon("cannot write", EIO);
      done += n;
      offset += n;
    }
  }
  if (::fsync(fd) != 0) abandon("cannot fsync", errno);
  const int status = ::close(fd);
  fd = -1;
  if (status != 0) abandon("cannot close", errno);
  const double seconds = seconds_since(begin);
  if (::unlink(path.c_str()) != 0) io::fail_write("cannot remove", path, errno);
  return seconds;
}

}  // namespace

std::vector<SectionSpec> write_bench_sections(int64_t bytes) {
  const int64_t parameters = bytes / 14;
  return {{"params_bf16", 2 * parameters},
          {"master_fp32", 4 * parameters},
          {"adam_m", 4 * parameters},
          {"adam_v", 4 * parameters}};
}

WriteBenchFootprint write_bench_footprint(const WriteBenchOptions& options) {
  int64_t image_bytes = 0;
  for (const SectionSpec& section : write_bench_sections(options.bytes))
    image_bytes += aligned_to_image(section.bytes);
  WriteBenchFootprint footprint;
  footprint.memory_bytes =
      image_bytes + int64_t{options.files} * kImageAlignment + std::min(kPlainBlock, image_bytes);
  // Each write's files are removed before the next one starts. Beside the
  // image, its rank record (rank_00000.json, a few KiB): on a disk that held
  // the image exactly, the check passed and the write failed at the record.
  constexpr int64_t kRankRecordAllowance = 64 << 10;
  footprint.disk_bytes = image_bytes + kRankRecordAllowance;
  return footprint;
}

namespace {

void check_write_bench_options(const WriteBenchOptions& options) {
  if (options.bytes < (1 << 20))
    throw std::invalid_argument("bench bytes " + std::to_string(options.bytes) + " is below 1 MiB");
  if (options.files < 1) throw std::invalid_argument("bench files " + std::to_string(options.files) + " is below 1");
  if (options.repeats < 1)
    throw std::invalid_argument("bench repeats " + std::to_string(options.repeats) + " is below 1");
  if (options.block_bytes <= 0 || options.block_bytes % kImageAlignment != 0)
    throw std::invalid_argument("bench block bytes " + std::to_string(options.block_bytes) +
                                " is not a positive multiple of " + std::to_string(kImageAlignment));
}

// The medians of the timed writes, in GB/s, and persist's against dd's.
void set_write_bench_rates(WriteBenchResult& result) {
  auto median_gbs = [&](const std::vector<double>& seconds) {
    std::vector<double> gbs;
    for (double s : seconds) gbs.push_back(static_cast<double>(result.bytes) / s / 1e9);
    return median(gbs);
  };
  result.persist_gbs = median_gbs(result.persist_seconds);
  result.plain_gbs = median_gbs(result.plain_seconds);
  result.plain_from_state_gbs = median_gbs(result.plain_from_state_seconds);
  result.ratio = result.plain_gbs > 0 ? result.persist_gbs / result.plain_gbs : 0;
}

}  // namespace

WriteBenchResult run_write_bench(const WriteBenchOptions& options) {
  check_write_bench_options(options);
  WriteBenchResult result;
  std::vector<StateImage> images;
  for (const std::vector<SectionSpec>& file : assign_sections_to_files(write_bench_sections(options.bytes), options.files)) {
    images.emplace_back(file);
    fill_incompressible(images.back().data(), images.back().bytes(), 0x5eed + images.size());
    result.bytes += images.back().bytes();
    result.files.push_back(images.back().sections());
  }
  std::vector<const StateImage*> image_pointers;
  for (const StateImage& image : images) image_pointers.push_back(&image);

  // dd's way: one kPlainBlock buffer written again and again (none where
  // the persist is measured alone).
  std::unique_ptr<unsigned char, decltype(&std::free)> plain_buffer(nullptr, &std::free);
  std::vector<Span> dd_spans;
  if (!options.persist_only) {
    const int64_t plain_buffer_bytes = std::min(kPlainBlock, result.bytes);
    plain_buffer.reset(
        static_cast<unsigned char*>(std::aligned_alloc(kImageAlignment, static_cast<size_t>(plain_buffer_bytes))));
    if (!plain_buffer) throw std::bad_alloc();
    fill_incompressible(plain_buffer.get(), plain_buffer_bytes, 0x9d);
    for (int64_t offset = 0; offset < result.bytes; offset += kPlainBlock)
      dd_spans.push_back({plain_buffer.get(), std::min(kPlainBlock, result.bytes - offset)});
  }
  // The same single stream from the checkpoint's own memory: tells whether
  // a gap to dd lies in the write path or in where the bytes come from (on
  // some VMs a large source region alone costs 10-30 %).
  std::vector<Span> state_spans;
  for (const StateImage& image : images)
    for (int64_t offset = 0; offset < image.bytes(); offset += kPlainBlock)
      state_spans.push_back({image.data() + offset, std::min(kPlainBlock, image.bytes() - offset)});

  const WriteOptions write_options{.direct_io = options.direct_io, .block_bytes = options.block_bytes};
  const std::string folder = io::without_trailing_slashes(options.folder);
  const std::string pending = pending_folder(folder, kBenchStep);
  const std::string plain_path = folder + "/plain-sequential-write.bin";
  auto persist = [&](bool first) {
    prepare_pending_folder(folder, kBenchStep);
    const auto begin = std::chrono::steady_clock::now();
    try {
      const std::vector<FileRecord> written = write_rank_files(pending, 0, image_pointers, write_options);
      result.persist_seconds.push_back(seconds_since(begin));
      result.persist_direct_io = true;
      for (const FileRecord& record : written) {
        result.persist_direct_io = result.persist_direct_io && record.direct_io;
        if (!record.warning.empty() && first) result.warnings.push_back(record.warning);
      }
    } catch (...) {
      abandon_pending(folder, kBenchStep);
      throw;
    }
    abandon_pending(folder, kBenchStep);
  };
  auto plain = [&] {
    result.plain_seconds.push_back(
        plain_sequential_write(plain_path, dd_spans, options.direct_io, &result.plain_direct_io));
  };
  auto plain_from_state = [&] {
    bool direct = false;
    result.plain_from_state_seconds.push_back(plain_sequential_write(plain_path, state_spans, options.direct_io, &direct));
  };
  // Rotating which goes first, so none always meets the disk just after
  // another's writes (write-back, SSD garbage collection, discards).
  for (int repeat = 0; repeat < options.repeats; ++repeat) {
    if (repeat == 0 && options.before_persist) options.before_persist();
    if (options.persist_only) {
      persist(repeat == 0);
    } else if (repeat % 2 == 0) {
      persist(repeat == 0);
      plain();
      plain_from_state();
    } else {
      plain_from_state();
      plain();
      persist(false);
    }
  }
  if (options.direct_io && !result.plain_direct_io && !options.persist_only)
    result.warnings.push_back("plain write " + plain_path + ": the filesystem refuses O_DIRECT, written buffered");
  set_write_bench_rates(result);
  return result;
}

}  // namespace trainbench
