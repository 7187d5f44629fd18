// The write half of a checkpoint: file names, the pending folder, one image
// as one file (large aligned writes, O_DIRECT when asked, XXH64 while
// writing) and a rank's files in parallel with its record.
#include <fcntl.h>   // open, O_DIRECT, fcntl
#include <unistd.h>  // pwrite, fsync, close, unlink

#include <algorithm>   // std::sort, std::min_element
#include <atomic>      // the hasher follows the writer through an atomic
#include <chrono>      // the sharing probe's name
#include <cerrno>      // errno, EINVAL
#include <cstdio>      // std::snprintf
#include <exception>   // std::exception_ptr
#include <filesystem>  // create_directories
#include <functional>  // the half-written callback
#include <memory>      // std::unique_ptr for the XXH64 state
#include <mutex>       // the first failure of write_rank_files
#include <numeric>     // std::iota
#include <stdexcept>   // std::invalid_argument
#include <system_error>
#include <thread>

#include <xxhash.h>  // XXH64 streaming

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_io.h"  // fail_write, fsync_directory, write_synced_file, ...

namespace trainbench {

namespace io = checkpoint_io;

namespace {

// A thread that could not start (EAGAIN: ulimit -u, or no room left for its
// stack under ulimit -v) said only "Resource temporarily unavailable".
CheckpointWriteError thread_start_failure(const std::system_error& error, const char* thread) {
  return CheckpointWriteError(std::string("cannot start a ") + thread + " thread: " + error.what() +
                                  " (threads or address space: ulimit -u, ulimit -v)",
                              /*disk_full=*/false);
}

// XXH64 of an image computed on its own thread, block by block as the
// writer hands each block to pwrite: the digest covers exactly the bytes
// written (the image is not modified while it is written, and a failed
// write discards the digest), and hashing overlaps the I/O instead of
// adding to it. Hashing a block while it is written, rather than after,
// leaves no hashing of the last block after the last write (3-5 % of a
// 1 GiB file at this VM's 3-6 GB/s of XXH64).
class FollowingHasher {
 public:
  FollowingHasher(const unsigned char* data, int64_t total)
      : data_(data), total_(total), state_(XXH64_createState(), &XXH64_freeState) {
    if (!state_) throw std::bad_alloc();
    XXH64_reset(state_.get(), 0);
    try {
      thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      throw thread_start_failure(e, "hashing");
    }
  }
  ~FollowingHasher() {
    if (thread_.joinable()) {
      handed_to_write_.store(kAbandoned, std::memory_order_release);
      handed_to_write_.notify_one();
      thread_.join();
    }
  }
  FollowingHasher(const FollowingHasher&) = delete;
  FollowingHasher& operator=(const FollowingHasher&) = delete;

  // The first `bytes` of the image are written or being written.
  void writing(int64_t bytes) {
    handed_to_write_.store(bytes, std::memory_order_release);
    handed_to_write_.notify_one();
  }
  // After writing(total) and its write: waits for the hasher, returns the digest.
  std::string finish() {
    thread_.join();
    return io::xxh64_hex(XXH64_digest(state_.get()));
  }

 private:
  static constexpr int64_t kAbandoned = -1;
  void run() {
    int64_t hashed = 0;
    while (hashed < total_) {
      const int64_t ready = handed_to_write_.load(std::memory_order_acquire);
      if (ready == kAbandoned) return;
      if (ready > hashed) {
        XXH64_update(state_.get(), data_ + hashed, static_cast<size_t>(ready - hashed));
        hashed = ready;
      } else {
        handed_to_write_.wait(ready, std::memory_order_acquire);
      }
    }
  }
  const unsigned char* data_;
  const int64_t total_;
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state_;
  std::atomic<int64_t> handed_to_write_{0};
  std::thread thread_;
};

std::string direct_io_warning(const std::string& path) {
  return "checkpoint file " + path +
         ": the filesystem refuses O_DIRECT (EINVAL), so it was written through the page cache";
}

// write_image_file of a part of an image, with a callback run once half of
// it is in the file (where the `write` crash point fires).
FileRecord write_image(const std::string& folder, const std::string& name, const ImagePart& part,
                       const WriteOptions& options, const std::function<void()>& at_half) {
  if (options.block_bytes <= 0 || options.block_bytes % kImageAlignment != 0)
    throw std::invalid_argument("checkpoint block_bytes " + std::to_string(options.block_bytes) +
                                " is not a positive multiple of " + std::to_string(kImageAlignment));
  const StateImage& image = *part.image;
  const int64_t part_bytes = part.bytes < 0 ? image.bytes() - part.from : part.bytes;
  if (part.from < 0 || part_bytes < 0 || part.from % kImageAlignment != 0 || part_bytes % kImageAlignment != 0 ||
      part.from < image.held_from() || part_bytes > image.held_from() + image.held_bytes() - part.from)
    throw std::invalid_argument("checkpoint image part [" + std::to_string(part.from) + ", +" +
                                std::to_string(part_bytes) + ") of an image of " + std::to_string(image.bytes()) +
                                " bytes is not aligned to " + std::to_string(kImageAlignment) +
                                " or not among its held bytes [" + std::to_string(image.held_from()) + ", +" +
                                std::to_string(image.held_bytes()) + ")");
  const std::string path = folder + "/" + name;
  FileRecord record;
  record.name = name;
  record.bytes = part_bytes;
  record.sections = image.sections();
  if (part.slice) {  // an empty image's slices are all empty: recorded, and read, as whole files
    record.slice_from = part.from;
    record.image_bytes = image.bytes();
  }

  const unsigned char* data = image.at(part.from, part_bytes);
  const int64_t total = part_bytes;
  // Started before the file exists: a thread or allocation failure then
  // leaves nothing to clean.
  FollowingHasher hasher(data, total);

  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = -1;
  if (options.direct_io) {
    fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (fd >= 0) {
      record.direct_io = true;
    } else if (errno == EINVAL) {
      record.warning = direct_io_warning(path);
    } else {
      io::fail_write("cannot create checkpoint file", path, errno);
    }
  }
  if (fd < 0) {
    fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) io::fail_write("cannot create checkpoint file", path, errno);
  }
  // Any failure from here on leaves no partial file behind.
  auto abandon = [&](const char* what, int error) {
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
    io::fail_write(what, path, error);
  };

  bool half_reported = !at_half;
  if (!half_reported && total == 0) {  // an empty part (a slice past a small image's end) is half written at once
    half_reported = true;
    at_half();
  }
  int64_t offset = 0;
  while (offset < total) {
    const size_t chunk = static_cast<size_t>(std::min(options.block_bytes, total - offset));
    hasher.writing(offset + static_cast<int64_t>(chunk));
    const ssize_t n = ::pwrite(fd, data + offset, chunk, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && record.direct_io) {
      // Accepted at open but refused at write (a device whose direct-I/O
      // alignment exceeds 4096, or an offset a short write left unaligned):
      // go on through the page cache rather than lose the checkpoint.
      const int status = ::fcntl(fd, F_GETFL);
      if (status < 0 || ::fcntl(fd, F_SETFL, status & ~O_DIRECT) != 0) abandon("cannot clear O_DIRECT on", errno);
      record.direct_io = false;
      record.warning = direct_io_warning(path);
      continue;
    }
    if (n < 0) abandon("cannot write checkpoint file", errno);
    if (n == 0) abandon("cannot write checkpoint file", EIO);  // no progress and no reason given
    offset += n;
    if (!half_reported && offset >= total / 2) {
      half_reported = true;
      at_half();
    }
  }
  if (::fsync(fd) != 0) abandon("cannot fsync checkpoint file", errno);
  const int close_status = ::close(fd);
  fd = -1;
  if (close_status != 0) abandon("cannot close checkpoint file", errno);
  record.xxh64 = hasher.finish();
  return record;
}

}  // namespace

std::string committed_folder(const std::string& dir, int64_t step) {
  // Never "/step_N" for an empty dir: that would be the root's.
  const std::string base = dir.empty() ? "." : io::without_trailing_slashes(dir);
  return base + "/step_" + std::to_string(step);
}

std::string pending_folder(const std::string& dir, int64_t step) { return committed_folder(dir, step) + ".tmp"; }

std::string rank_file_name(int rank, int index) {
  char name[64];
  std::snprintf(name, sizeof name, "rank_%05d_%d.bin", rank, index);
  return name;
}

std::string rank_record_name(int rank) {
  char name[64];
  std::snprintf(name, sizeof name, "rank_%05d.json", rank);
  return name;
}

std::vector<std::vector<SectionSpec>> assign_sections_to_files(const std::vector<SectionSpec>& sections,
                                                               int files) {
  if (files < 1) throw std::invalid_argument("checkpoint files per rank must be at least 1, not " + std::to_string(files));
  // Largest first onto the lightest file, by bytes on disk (padding included).
  std::vector<size_t> order(sections.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sections[a].bytes > sections[b].bytes; });
  std::vector<int64_t> load(static_cast<size_t>(files), 0);
  std::vector<std::vector<size_t>> members(static_cast<size_t>(files));
  for (size_t index : order) {
    const size_t lightest = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[lightest] += aligned_to_image(sections[index].bytes);
    members[lightest].push_back(index);
  }
  // Within a file the sections keep the caller's order, so a file reads
  // like the state it holds.
  std::vector<std::vector<SectionSpec>> result;
  for (std::vector<size_t>& file : members) {
    if (file.empty()) continue;
    std::sort(file.begin(), file.end());
    std::vector<SectionSpec> specs;
    for (size_t index : file) specs.push_back(sections[index]);
    result.push_back(std::move(specs));
  }
  return result;
}

void prepare_pending_folder(const std::string& dir, int64_t step) {
  const std::string folder = pending_folder(dir, step);
  std::error_code error;
  if (std::filesystem::exists(folder, error)) io::remove_folder(folder);
  std::filesystem::create_directories(folder, error);
  if (error) io::fail_write("cannot create checkpoint folder", folder, error.value());
}

namespace {

// `dir`/<write-probe prefix><suffix>, written and fsynced (a leftover is
// litter retention removes); CheckpointWriteError "<named> <dir> is not
// writable: ..." when it cannot be.
std::string write_probe(const std::string& dir, const std::string& suffix, const std::string& named,
                        const std::string& contents) {
  const std::string probe = io::without_trailing_slashes(dir) + "/" + io::kWriteProbePrefix + suffix;
  try {
    io::write_synced_file(probe, contents);
  } catch (const CheckpointWriteError& e) {
    throw CheckpointWriteError(named + " " + dir + " is not writable: " + e.what(), e.disk_full);
  }
  return probe;
}

}  // namespace

void check_checkpoint_dir(const std::string& dir, const std::string& named) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) io::fail_write("cannot create " + named, dir, error.value());
  // Permission bits alone do not say it (root ignores them; a read-only
  // mount does not show in them): create, sync and remove a real file.
  const std::string probe = write_probe(dir, std::to_string(::getpid()), named, "probe\n");
  // ENOENT: gone already (another run's retention took it for litter).
  if (::unlink(probe.c_str()) != 0 && errno != ENOENT) io::fail_write("cannot remove", probe, errno);
}

std::string write_sharing_probe(const std::string& dir, const std::string& host, const std::string& named) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::string host_part = host;
  for (char& c : host_part)
    if (c == '/') c = '_';
  return write_probe(dir,
                     "shared-" + host_part + "-" + std::to_string(::getpid()) + "-" +
                         std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()),
                     named, "rank 0's, for every rank to see\n");
}

FileRecord write_image_file(const std::string& folder, const std::string& name, const StateImage& image,
                            const WriteOptions& options) {
  return write_image(folder, name, ImagePart{&image}, options, nullptr);
}

HeldBytes rank_slice(int64_t image_bytes, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("rank_slice: rank " + std::to_string(rank) + " of " + std::to_string(world));
  const int64_t pages = image_bytes / kImageAlignment;
  const int64_t per_rank = (pages + world - 1) / world;  // the last ranks' parts are the short ones
  const int64_t first = std::min(pages, per_rank * rank);
  const int64_t last = std::min(pages, first + per_rank);
  return HeldBytes{first * kImageAlignment, (last - first) * kImageAlignment};
}

ImagePart slice_for_rank(const StateImage& image, int rank, int world) {
  const HeldBytes slice = rank_slice(image.bytes(), rank, world);
  return ImagePart{&image, slice.from, slice.bytes, world > 1};
}

std::vector<FileRecord> write_rank_files(const std::string& folder, int rank,
                                         const std::vector<const StateImage*>& images,
                                         const WriteOptions& options) {
  std::vector<ImagePart> parts;
  for (const StateImage* image : images) parts.push_back(ImagePart{image});
  return write_rank_files(folder, rank, parts, options);
}

std::vector<FileRecord> write_rank_files(const std::string& folder, int rank, const std::vector<ImagePart>& images,
                                         const WriteOptions& options) {
  for (const ImagePart& part : images)
    if (part.image == nullptr) throw std::invalid_argument("write_rank_files: a null image");
  const int64_t step = io::step_of_folder(folder);
  const std::string record_path = folder + "/" + rank_record_name(rank);
  auto remove_written = [&] {
    // Best effort on the way out of a failure: the error being reported
    // matters more than a file that could not be removed as well.
    for (size_t i = 0; i < images.size(); ++i)
      ::unlink((folder + "/" + rank_file_name(rank, static_cast<int>(i))).c_str());
    ::unlink(record_path.c_str());
  };

  std::vector<FileRecord> records(images.size());
  std::mutex failure_mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> writers;
  auto record_failure = [&](std::exception_ptr failure) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (!first_failure) first_failure = failure;
  };
  try {
    for (size_t i = 0; i < images.size(); ++i) {
      writers.emplace_back([&, i] {
        try {
          std::function<void()> at_half;
          if (i == 0) at_half = [step] { crash_point("write", step); };
          records[i] = write_image(folder, rank_file_name(rank, static_cast<int>(i)), images[i], options, at_half);
        } catch (...) {
          record_failure(std::current_exception());
        }
      });
    }
  } catch (const std::system_error& e) {  // a thread that could not start: the ones that did still finish
    record_failure(std::make_exception_ptr(thread_start_failure(e, "writer")));
  } catch (...) {
    record_failure(std::current_exception());
  }
  for (std::thread& writer : writers) writer.join();
  if (first_failure) {
    remove_written();
    std::rethrow_exception(first_failure);
  }

  nlohmann::json record_json = nlohmann::json::array();
  for (const FileRecord& record : records) record_json.push_back(io::file_record_to_json(record));
  try {
    io::write_synced_file(record_path, record_json.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    io::fsync_directory(folder);
  } catch (...) {
    remove_written();
    throw;
  }
  return records;
}

}  // namespace trainbench
