#include "dataloader/io_bench.h"

#include <fcntl.h>   // open, posix_fadvise
#include <sys/mman.h>  // mmap, mincore: what the page cache holds
#include <sys/stat.h>  // fstat
#include <unistd.h>  // read, close, sysconf

#include <algorithm>  // std::sort
#include <atomic>
#include <cerrno>
#include <mutex>
#include <chrono>
#include <cstdio>      // std::snprintf: the small files' names
#include <cstring>     // std::strerror
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>  // a small file that cannot be written, with its errno
#include <thread>

#include "dataloader/data_error.h"
#include "dataloader/tar_reader.h"
#include "dataloader/token_decode.h"
#include "dataloader/webdataset.h"

namespace trainbench {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// Runs work(i) for i in [0, count) on `threads` threads, items dealt out
// dynamically; the first exception is rethrown.
template <typename Work>
void parallel_for(int64_t count, int64_t threads, Work work) {
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < std::max<int64_t>(1, threads); ++t)
    pool.emplace_back([&, t] {
      try {
        for (int64_t i = next++; i < count; i = next++) work(t, i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  for (std::thread& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
}

Clock::time_point deadline_after(Clock::time_point begin, double seconds) {
  return begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Opens `path` for reading, or throws DataError naming it; `size` gets its
// bytes. Without blocking: a file replaced by a FIFO since the list was
// resolved would hold open() until a writer came, past every time limit;
// anything but a regular file is refused as the loader refuses it.
int open_regular_file(const std::string& path, int64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw DataError(CorruptScope::kShard, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(CorruptScope::kShard, path + ": not a regular file");
  }
  // Back to blocking reads (no effect on a regular file's reads, said plainly).
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<int64_t>(st.st_size);
  return fd;
}

// Reads a file block by block (buffer.size() per read), adding to `bytes`
// (when given) as it goes, until its end or `deadline`; inject_delay_s after
// each read (data.inject_delay_ms: slow storage for the tests). `whole` is
// false when the deadline stopped it with bytes left to read.
struct FileRead {
  int64_t bytes = 0;
  bool whole = true;
};
FileRead read_file_until(const std::string& path, std::vector<char>& buffer, Clock::time_point deadline,
                         double inject_delay_s, bool sequential_hint, std::atomic<int64_t>* bytes) {
  int64_t size = 0;
  const int fd = open_regular_file(path, &size);
  if (sequential_hint) (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  FileRead read;
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      throw DataError(CorruptScope::kShard, path + ": cannot read: " + std::strerror(error));
    }
    if (got == 0) break;
    if (inject_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(inject_delay_s));
    read.bytes += got;
    if (bytes != nullptr) *bytes += got;
    if (Clock::now() >= deadline && read.bytes != size) {
      read.whole = false;
      break;
    }
  }
  ::close(fd);
  return read;
}

}  // namespace

std::vector<FileResidency> survey_page_cache(const std::vector<std::string>& paths, double max_seconds) {
  const int64_t page = std::max<long>(4096, ::sysconf(_SC_PAGESIZE));
  // A window of 1 GiB at a time: a shard of any size is surveyed with one
  // small vector (a byte per page).
  const int64_t window = int64_t{1} << 30;
  std::vector<unsigned char> pages(static_cast<size_t>(window / page));
  std::vector<FileResidency> out;
  const Clock::time_point deadline = deadline_after(Clock::now(), max_seconds);
  for (const std::string& path : paths) {
    if (!out.empty() && Clock::now() >= deadline) break;
    FileResidency file;
    // Not blocking: a FIFO put in a shard's place would hold open() here.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      file.bytes = static_cast<int64_t>(st.st_size);
      file.known = true;
      for (int64_t offset = 0; offset < file.bytes; offset += window) {
        const int64_t length = std::min(window, file.bytes - offset);
        void* map = ::mmap(nullptr, static_cast<size_t>(length), PROT_READ, MAP_SHARED, fd, offset);
        if (map == MAP_FAILED) {
          file.known = false;
          break;
        }
        if (::mincore(map, static_cast<size_t>(length), pages.data()) != 0) {
          file.known = false;
        } else {
          for (int64_t p = 0; p * page < length; ++p)
            if (pages[static_cast<size_t>(p)] & 1) file.resident_bytes += std::min(page, length - p * page);
        }
        ::munmap(map, static_cast<size_t>(length));
        if (!file.known) break;
      }
    }
    if (fd >= 0) ::close(fd);
    out.push_back(file);
  }
  return out;
}

double resident_fraction(const std::vector<FileResidency>& survey, size_t files) {
  int64_t bytes = 0, resident = 0;
  for (size_t i = 0; i < std::min(files, survey.size()); ++i) {
    if (!survey[i].known) continue;
    bytes += survey[i].bytes;
    resident += survey[i].resident_bytes;
  }
  return bytes > 0 ? static_cast<double>(resident) / static_cast<double>(bytes) : -1.0;
}

ReadRate measure_sequential_read(const std::vector<std::string>& paths, int64_t block_bytes,
                                 int64_t threads, double max_seconds, double inject_delay_s) {
  std::vector<std::vector<char>> buffers(static_cast<size_t>(std::max<int64_t>(1, threads)),
                                         std::vector<char>(static_cast<size_t>(block_bytes)));
  std::atomic<int64_t> bytes{0}, files{0};
  std::atomic<bool> stopped{false};
  const Clock::time_point begin = Clock::now();
  const Clock::time_point deadline = deadline_after(begin, max_seconds);
  parallel_for(static_cast<int64_t>(paths.size()), threads, [&](int64_t t, int64_t i) {
    // Past the time limit no file is started: on a data set of terabytes a
    // pass would otherwise take hours. But the first always is: a thread
    // that started after a short --seconds had passed read nothing, and the
    // table divided by that rate ("-nan%", "inf%").
    if (stopped.load() || (files.load() > 0 && Clock::now() >= deadline)) {
      stopped = true;
      return;
    }
    ++files;
    if (!read_file_until(paths[static_cast<size_t>(i)], buffers[static_cast<size_t>(t)], deadline, inject_delay_s,
                         true, &bytes)
             .whole)
      stopped = true;
  });
  ReadRate rate;
  rate.seconds = seconds_since(begin);
  rate.bytes = bytes;
  rate.files = files;
  rate.complete = !stopped.load();
  return rate;
}

ReadRate measure_loader(const LoaderOptions& options, double max_seconds) {
  LoaderOptions one_epoch = options;
  one_epoch.epochs = 1;
  const Clock::time_point begin = Clock::now();
  ShardLoader loader(one_epoch);
  bool ended = false;
  // A batch is taken only once it is ready, so the measurement stops at
  // max_seconds even while the first batch waits for a shuffle buffer to
  // fill: next_or_end blocked on it, and a bench io of --seconds 0.5 over
  // slow storage read on for 4 s. Each is given back at once: polled for,
  // a held batch kept one of its reader's prefetch slots (with
  // data.prefetch 1 the reader stood still) and the rate was the polling's
  // (6.4 M tokens/s at prefetch 4, 76 M at 64, same cached shards).
  const Clock::time_point stop_at =
      begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_seconds));
  while (!ended && loader.wait_until_ready(stop_at)) {
    ended = loader.next_or_end(nullptr) == nullptr;
    loader.return_batch();
  }
  ReadRate rate;
  rate.seconds = seconds_since(begin);
  // Past the time limit the readers may still be reading ahead: what they
  // had read by now counts.
  const SourceStats stats = loader.stats();
  rate.bytes = stats.storage_bytes;
  rate.samples = stats.samples;
  rate.tokens = stats.tokens;
  rate.files = stats.shards_opened;
  rate.complete = ended;
  rate.samples_skipped = stats.samples_skipped;
  rate.shards_skipped = stats.shards_skipped;
  if (!stats.skip_messages.empty()) rate.first_skip = stats.skip_messages.front();
  rate.shards_cut_short = static_cast<int64_t>(stats.shards_cut_short.size());
  rate.shards_without_samples = static_cast<int64_t>(stats.shards_without_samples.size());
  rate.first_odd_shard = stats.first_odd_shard;
  return rate;
}

namespace {

// One small file, its errno kept (a full disk is the environment's, not a
// bug: std::ofstream said only "cannot write", which surfaced as an
// internal error).
void write_small_file(const std::string& path, const void* data, size_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + path);
  const auto* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t wrote = ::write(fd, at, bytes);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) {
      const int error = wrote < 0 ? errno : ENOSPC;
      ::close(fd);
      throw std::system_error(error, std::generic_category(), "cannot write " + path);
    }
    at += wrote;
    bytes -= static_cast<size_t>(wrote);
  }
  // A network file system reports a full disk at close.
  if (::close(fd) != 0) throw std::system_error(errno, std::generic_category(), "cannot write " + path);
}

}  // namespace

int64_t extract_to_small_files(const std::vector<std::string>& shards, const std::string& dir,
                               int64_t max_member_bytes, ReadRate* skipped) {
  int64_t files = 0;
  TarReader tar;
  Sample sample;
  char name[64];
  // Under skip, as the loader: a corrupt sample is left out and the shard
  // goes on; a broken shard is left from there on (or whole, if it cannot
  // be opened). The machine's own failures (kEnvironment) end it either way.
  const auto left_out = [&](const DataError& e) {
    if (skipped == nullptr || (e.scope() != CorruptScope::kSample && e.scope() != CorruptScope::kShard)) return false;
    ++(e.scope() == CorruptScope::kSample ? skipped->samples_skipped : skipped->shards_skipped);
    if (skipped->first_skip.empty()) skipped->first_skip = e.what();
    return true;
  };
  for (size_t s = 0; s < shards.size(); ++s) {
    // Named by position, not by the shard's or the sample's names: a key is
    // a tar member name (absolute, or with "..", it would write outside the
    // folder) and two shards' stems, or two samples' keys, can be the same
    // (one would overwrite the other and the pass read less than the loader).
    std::snprintf(name, sizeof(name), "%06zu", s);
    const fs::path shard_dir = fs::path(dir) / name;
    fs::create_directory(shard_dir);
    try {
      tar.open(shards[s]);
    } catch (const DataError& e) {
      if (!left_out(e)) throw;
      continue;
    }
    SampleReader samples(tar, max_member_bytes);
    for (int64_t index = 0;; ++index) {
      try {
        if (!samples.next(&sample)) break;
      } catch (const DataError& e) {
        if (!left_out(e)) throw;
        if (e.scope() == CorruptScope::kSample) continue;
        break;
      }
      std::snprintf(name, sizeof(name), "%09ld", static_cast<long>(index));
      const std::string base = (shard_dir / name).string();
      for (size_t m = 0; m < sample.member_count; ++m) {
        const SampleMember& member = sample.members[m];
        const std::string path = base + "." + member.extension;
        write_small_file(path, member.data.data(), member.data.size());
        ++files;
      }
    }
  }
  return files;
}

ReadRate measure_small_files(const std::string& dir, const std::string& field, int64_t vocab,
                             int64_t threads, double max_seconds, double inject_delay_s, bool skip_corrupt) {
  const TokenFormat format = token_format_of_field(field);
  // The files' extensions come lower-cased (split_key_extension): so must the field.
  const std::string wanted = ascii_lowercase(field);
  std::vector<std::string> shard_dirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (entry.is_directory()) shard_dirs.push_back(entry.path().string());
  std::sort(shard_dirs.begin(), shard_dirs.end());

  std::atomic<int64_t> bytes{0}, samples{0}, tokens{0}, files{0}, samples_skipped{0};
  std::mutex first_skip_mutex;
  std::string first_skip;
  std::atomic<bool> stopped{false};
  const Clock::time_point begin = Clock::now();
  const Clock::time_point deadline = deadline_after(begin, max_seconds);
  parallel_for(static_cast<int64_t>(shard_dirs.size()), threads, [&](int64_t, int64_t i) {
    // As the plain read: the first file is read whatever the time limit.
    if (stopped.load() || (files.load() > 0 && Clock::now() >= deadline)) {
      stopped = true;
      return;
    }
    // A small-file loader lists its directory, then opens every file.
    std::vector<std::string> names;
    for (const fs::directory_entry& entry :
         fs::recursive_directory_iterator(shard_dirs[static_cast<size_t>(i)]))
      if (entry.is_regular_file()) names.push_back(entry.path().string());
    std::sort(names.begin(), names.end());
    std::vector<char> data(1 << 20);
    std::vector<int32_t> decoded;
    std::string error;
    std::string key, extension, previous_key;
    // A corrupt sample fails the bench, or under skip is left out of the
    // figures (counted at its first file) and counted, as the loader does.
    const auto corrupt_sample = [&](const std::string& what) {
      if (!skip_corrupt) throw DataError(CorruptScope::kSample, what);
      ++samples_skipped;
      --samples;
      const std::lock_guard<std::mutex> lock(first_skip_mutex);
      if (first_skip.empty()) first_skip = what;
    };
    // A sample without the field's file is one, as in the loader (a sample
    // without the member): it counted as one of 0 tokens.
    bool previous_has_field = true;
    const auto end_sample = [&] {
      if (!previous_has_field)
        corrupt_sample(shard_dirs[static_cast<size_t>(i)] + ": sample '" + previous_key + "' has no ." + wanted +
                       " file");
    };
    for (const std::string& name : names) {
      if (files.load() > 0 && Clock::now() >= deadline) {
        stopped = true;
        return;
      }
      const std::string relative = name.substr(dir.size() + 1);
      if (!split_key_extension(relative, &key, &extension)) continue;
      // Whole file into one buffer: grow to its size first.
      const auto size = static_cast<size_t>(fs::file_size(name));
      if (data.size() < size + 1) data.resize(size + 1);
      const int64_t got = read_file_until(name, data, Clock::time_point::max(), 0.0, false, nullptr).bytes;
      bytes += got;
      ++files;
      if (key != previous_key) {
        end_sample();
        ++samples;
        previous_key = key;
        previous_has_field = false;
        if (inject_delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(inject_delay_s));
      }
      if (extension == wanted) {
        previous_has_field = true;
        decoded.clear();
        if (!decode_tokens(format, reinterpret_cast<const uint8_t*>(data.data()),
                           static_cast<size_t>(got), vocab, &decoded, &error)) {
          corrupt_sample(name + ": " + error);
          continue;
        }
        tokens += static_cast<int64_t>(decoded.size());
      }
    }
    end_sample();
  });
  ReadRate rate;
  rate.seconds = seconds_since(begin);
  rate.bytes = bytes;
  rate.samples = samples;
  rate.tokens = tokens;
  rate.files = files;
  rate.complete = !stopped.load();
  rate.samples_skipped = samples_skipped;
  rate.first_skip = first_skip;
  return rate;
}

}  // namespace trainbench
