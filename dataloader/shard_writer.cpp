#include "dataloader/shard_writer.h"

#include <archive.h>        // archive_write_*: the tar writer
#include <archive_entry.h>  // archive_entry_*: one member's header
#include <fcntl.h>          // open, fcntl, AT_FDCWD
#include <sys/file.h>       // flock: one writer per shard
#include <sys/stat.h>       // lstat, fstat: what a leftover partial name is
#include <locale.h>         // newlocale, uselocale: UTF-8 member names
#include <unistd.h>         // fsync, close, unlink

#include <cerrno>     // errno
#include <chrono>     // the test hook's pause
#include <cstdio>     // std::rename, std::remove
#include <cstdlib>    // std::getenv, std::atoi: the test hook
#include <cstring>    // std::strerror
#include <filesystem>  // first_existing_shard: listing the shards' folder
#include <memory>     // std::unique_ptr for archive_entry
#include <mutex>      // the partial files held
#include <set>
#include <stdexcept>  // std::runtime_error, std::invalid_argument
#include <thread>     // the test hook's pause

namespace trainbench {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kTarBlock = 512;
// Every member gets the same mtime so seeded output is byte-identical
// (2024-01-01T00:00:00Z: a plausible date that `tar tv` shows as deliberate).
constexpr time_t kMemberMtime = 1704067200;

int64_t round_up_to_block(int64_t bytes) { return (bytes + kTarBlock - 1) / kTarBlock * kTarBlock; }

std::string member_name(std::string_view key, const MemberToWrite& member) {
  std::string name(key);
  name += '.';
  name += member.extension;
  return name;
}

// ustar holds names up to 100 bytes (255 when split at a '/'); longer or
// non-ASCII names get a pax extended header: one header block plus a block
// holding "NN path=...\n". Counted generously, so a size limit is never passed.
int64_t pax_overhead(const std::string& name) {
  bool ascii = true;
  for (const char c : name) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (name.size() <= 100 && ascii) return 0;
  return kTarBlock + round_up_to_block(static_cast<int64_t>(name.size()) + 64);
}

// libarchive converts member names from the thread's locale to the UTF-8 a
// pax header holds. A process that never calls setlocale is in the C locale,
// where no non-ASCII name converts; our names are UTF-8 (as webdataset's keys
// are), so headers are written under C.UTF-8 where the system has it. A name
// that is not UTF-8 is stored as its bytes (pax hdrcharset=BINARY), which
// Python's tarfile reads back byte-exact.
locale_t utf8_locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t{});
  return locale;
}

// A name the filesystem refuses (too long) comes from the user's options:
// std::invalid_argument (exit 2); anything else is the machine's.
[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  const std::string message = what + " " + path + ": " + std::strerror(errno);
  if (errno == ENAMETOOLONG) throw std::invalid_argument(message + " (a shorter --prefix or --out)");
  throw std::runtime_error(message);
}

// The rename of a shard is durable only once its directory entry is on disk.
void fsync_directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail_errno("cannot open directory", dir);
  const int status = ::fsync(dir_fd);
  const int saved = errno;
  ::close(dir_fd);
  errno = saved;
  if (status != 0) fail_errno("cannot fsync directory", dir);
}

// The one conversion a shard name pattern holds: "%d" or "%0Nd".
struct PatternField {
  size_t begin = 0, end = 0;
  int width = 0;
};

PatternField find_pattern_field(const std::string& pattern) {
  PatternField field;
  int found = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {  // "%%": a literal '%', as printf's
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9') ++j;
    const size_t digits = j - i - 1;
    if (j == pattern.size() || pattern[j] != 'd' || digits > 2 || (digits > 0 && pattern[i + 1] != '0'))
      throw std::invalid_argument("shard name pattern '" + pattern +
                                  "': '%' must start %d or %0Nd (e.g. out/shard-%06d.tar), or be written %%");
    field = {i, j + 1, digits > 0 ? std::stoi(pattern.substr(i + 1, digits)) : 0};
    ++found;
    i = j;
  }
  if (found != 1)
    throw std::invalid_argument(
        "shard name pattern '" + pattern +
        "': needs exactly one %d or %0Nd for the shard number (e.g. out/shard-%06d.tar)");
  return field;
}

// rename(), or with replace_existing false one that fails with EEXIST when
// `to` is there (renameat2 RENAME_NOREPLACE; a filesystem without it gets
// a plain rename: the up-front check in the shard tools still holds).
bool rename_into_place(const std::string& from, const std::string& to, bool replace_existing) {
  if (!replace_existing) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return false;
  }
  return std::rename(from.c_str(), to.c_str()) == 0;
}

// The partial files this process's writers hold now, for
// remove_partial_shards: a signal ends the process without unwinding, so no
// destructor removes them.
// Never destroyed: the signal's cleanup thread may run during the exit.
std::mutex& held_partials_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::set<std::string>& held_partials() {
  static auto* paths = new std::set<std::string>;
  return *paths;
}

// Test hook: the pause between creating a partial file and listing it, so
// a test can land a signal there (the file was left behind when it did).
// trainer/interrupt_cleanup.cpp pauses its folders by the same variable.
int test_listing_delay_ms() {
  static const int delay = []() {
    const char* value = std::getenv("TRAINBENCH_TEST_LISTING_DELAY_MS");
    return value != nullptr ? std::atoi(value) : 0;
  }();
  return delay;
}

// What is at `partial` when it is not a regular file a writer left ("" when
// it is one, or nothing is there): taken over as it was, a link had the
// shard written through it into its target and renamed into place as a
// link, a FIFO blocked the open for good, a folder was "Is a directory",
// exit 3.
std::string not_a_partial_file(const std::string& partial) {
  struct stat st {};
  if (::lstat(partial.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISDIR(st.st_mode)) return "a folder";
  return S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket";
}

// Creates `partial` and takes its flock in one hold of the mutex, so the
// signal's cleanup sees either no file or a held one: created first and
// listed after, a signal in between left a .partial beside the whole
// shards. Returns the descriptor; -1 with errno set when the file cannot be
// opened, -1 with *busy when another writer holds it (then not listed: the
// file is that writer's, not ours to remove), -1 with *other set to what
// is there when it is not a regular file (not_a_partial_file).
int create_held_partial(const std::string& partial, bool* busy, std::string* other) {
  const std::lock_guard<std::mutex> lock(held_partials_mutex());
  *busy = false;
  // O_NOFOLLOW and O_NONBLOCK: a link or a FIFO put there in the meantime
  // fails the open (or is found by the fstat below) instead of being
  // written through or waited on.
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int error = errno;
    *other = not_a_partial_file(partial);
    errno = error;
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    const int error = errno;
    ::close(fd);
    *other = not_a_partial_file(partial);
    errno = error;
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    ::close(fd);
    *busy = true;
    return -1;
  }  // no flock on this filesystem (ENOLCK, EOPNOTSUPP): written unguarded, as before
  if (test_listing_delay_ms() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(test_listing_delay_ms()));
  held_partials().insert(partial);
  return fd;
}
void release_partial(const std::string& partial) {
  const std::lock_guard<std::mutex> lock(held_partials_mutex());
  held_partials().erase(partial);
}

}  // namespace

void remove_partial_shards() {
  // Locked for good: the process is ending by the signal. A writer that
  // would start a shard, or finish one, waits here until the end instead of
  // making a partial file the cleanup has already passed.
  held_partials_mutex().lock();
  for (const std::string& partial : held_partials()) ::unlink(partial.c_str());
}

// Destroyed while open = abandoned (an exception unwound past it).
TarShardWriter::~TarShardWriter() { abandon(); }

void TarShardWriter::abandon() {
  // The partial file goes; the whole-shard name was never created.
  if (archive_ == nullptr) return;
  archive_write_free(archive_);
  archive_ = nullptr;
  std::remove((path_ + ".partial").c_str());  // before the close drops the lock
  release_partial(path_ + ".partial");
  ::close(fd_);
  fd_ = -1;
}

int64_t TarShardWriter::sample_tar_bytes(std::string_view key, const std::vector<MemberToWrite>& members) {
  int64_t bytes = 0;
  for (const MemberToWrite& member : members)
    bytes += pax_overhead(member_name(key, member)) + kTarBlock +
             round_up_to_block(static_cast<int64_t>(member.size));
  return bytes;
}

void TarShardWriter::open(const std::string& path, bool replace_existing) {
  if (archive_ != nullptr) close();
  path_ = path;
  replace_existing_ = replace_existing;
  bytes_ = 0;
  samples_ = 0;
  const std::string partial = path + ".partial";
  // Not truncated before it is ours: two writers of one shard (two runs of
  // shards synth into one folder) interleaved their bytes in one partial
  // file and renamed a damaged tar into place, exit 0. The writer holds a
  // flock on its partial file until the shard is renamed; a second writer is
  // refused. A partial file nobody holds (a killed writer's) is taken over.
  bool busy = false;
  std::string other;
  fd_ = create_held_partial(partial, &busy, &other);
  if (busy)
    throw std::invalid_argument(partial + " is being written by another process: two writers of one shard "
                                "would damage it; give each its own output folder");
  if (!other.empty())
    throw std::invalid_argument(partial + " is already there and is " + other +
                                ", not a killed writer's partial shard: remove it or give another output folder");
  if (fd_ < 0) fail_errno("cannot create", partial);
  if (::ftruncate(fd_, 0) != 0) {
    const int error = errno;
    std::remove(partial.c_str());  // ours, locked: before the close drops the lock
    release_partial(partial);
    ::close(fd_);
    fd_ = -1;
    errno = error;
    fail_errno("cannot truncate", partial);
  }
  archive_ = archive_write_new();
  // pax_restricted writes plain ustar headers and adds a pax header only for
  // what ustar cannot hold (long or non-ASCII names): what Python's tarfile,
  // GNU tar and webdataset read. The last block is not padded to the 10 KiB
  // record: readers stop at the two zero blocks that end the archive.
  if (archive_write_set_format_pax_restricted(archive_) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(archive_, 1 << 20) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(archive_, 1) != ARCHIVE_OK ||
      archive_write_open_fd(archive_, fd_) != ARCHIVE_OK)
    fail_archive("cannot start a tar archive in");
}

void TarShardWriter::write_sample(std::string_view key, const std::vector<MemberToWrite>& members) {
  if (archive_ == nullptr) throw std::logic_error("TarShardWriter::write_sample before open");
  const std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(),
                                                                       archive_entry_free);
  for (const MemberToWrite& member : members) {
    const std::string name = member_name(key, member);
    archive_entry_clear(entry.get());
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_filetype(entry.get(), AE_IFREG);
    archive_entry_set_perm(entry.get(), 0644);
    archive_entry_set_size(entry.get(), static_cast<la_int64_t>(member.size));
    archive_entry_set_mtime(entry.get(), kMemberMtime, 0);
    archive_entry_set_uid(entry.get(), 0);
    archive_entry_set_gid(entry.get(), 0);
    const locale_t previous = utf8_locale() != locale_t{} ? uselocale(utf8_locale()) : locale_t{};
    const int status = archive_write_header(archive_, entry.get());
    if (previous != locale_t{}) uselocale(previous);
    // ARCHIVE_WARN: a name that is not UTF-8 went in as bytes; the entry is whole.
    if (status < ARCHIVE_WARN) fail_archive("cannot write member " + name + " to");
    const char* data = static_cast<const char*>(member.data);
    for (size_t written = 0; written < member.size;) {
      const la_ssize_t n = archive_write_data(archive_, data + written, member.size - written);
      if (n <= 0) fail_archive("cannot write member " + name + " to");
      written += static_cast<size_t>(n);
    }
  }
  ++samples_;
  // Bytes the tar format has produced so far, counted before libarchive's
  // output buffering; the last member's padding follows with the next header.
  bytes_ = round_up_to_block(archive_filter_bytes(archive_, -1));
}

void TarShardWriter::close() {
  if (archive_ == nullptr) return;
  const std::string partial = path_ + ".partial";
  if (archive_write_close(archive_) != ARCHIVE_OK) fail_archive("cannot finish");
  bytes_ = archive_filter_bytes(archive_, -1);
  archive_write_free(archive_);
  archive_ = nullptr;
  // Renamed while still open and locked: closed first, another writer could
  // take the partial file over between the close and the rename.
  const bool synced = ::fsync(fd_) == 0;
  int error = errno;
  bool renamed = false, appeared = false;
  if (synced) {
    renamed = rename_into_place(partial, path_, replace_existing_);
    error = errno;
    appeared = !renamed && error == EEXIST;
  }
  if (!renamed) std::remove(partial.c_str());
  release_partial(partial);
  const bool closed = ::close(fd_) == 0;
  if (renamed && !closed) error = errno;
  fd_ = -1;
  if (appeared)
    throw std::invalid_argument(path_ + " appeared while it was being written (another writer?): not written "
                                "over; give --overwrite, or another output folder");
  if (!synced || !renamed || !closed) {
    errno = error;
    fail_errno(!synced ? "cannot fsync" : !renamed ? "cannot rename " + partial + " to" : "cannot close",
               !synced ? partial : path_);
  }
  fsync_directory_of(path_);
}

void TarShardWriter::fail_archive(const std::string& what) {
  const int code = archive_errno(archive_);
  const char* detail = code > 0 ? std::strerror(code) : archive_error_string(archive_);
  const std::string message =
      what + " " + path_ + ".partial: " + (detail != nullptr ? detail : "unknown libarchive error");
  // Abandon the shard: nothing more can be written to it.
  archive_write_free(archive_);
  archive_ = nullptr;
  std::remove((path_ + ".partial").c_str());  // before the close drops the lock
  release_partial(path_ + ".partial");
  ::close(fd_);
  fd_ = -1;
  throw std::runtime_error(message);
}

// A pattern's literal part as the file system names it: "%%" is one '%'
// (pattern_literal's inverse).
static std::string without_percent_escapes(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (text[i] == '%' && i + 1 < text.size() && text[i + 1] == '%') ++i;
  }
  return out;
}

std::string shard_name(const std::string& pattern, int64_t index) {
  const PatternField field = find_pattern_field(pattern);
  std::string number = std::to_string(index);
  if (static_cast<int>(number.size()) < field.width)
    number.insert(0, static_cast<size_t>(field.width) - number.size(), '0');
  return without_percent_escapes(pattern.substr(0, field.begin)) + number +
         without_percent_escapes(pattern.substr(field.end));
}

std::string pattern_literal(const std::string& text) {
  std::string out;
  for (const char c : text) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

namespace {

// The lowest index in [from, to) whose shard_name(pattern, index) is taken
// (only_not_regular: by what is not a regular file), or -1. A pattern whose
// number is in the file name is answered by one listing of its folder; one
// with its number in a folder's name ("out-%d/shard.tar") asks for each
// name, and with `to` unbounded only up to the first name not taken.
int64_t first_taken_shard(const std::string& pattern, int64_t from, int64_t to, bool only_not_regular) {
  const PatternField field = find_pattern_field(pattern);
  const size_t slash = pattern.rfind('/');
  const bool number_in_file_name = slash == std::string::npos || slash < field.begin;
  std::error_code error;
  // A link counts as taken; followed, what it leads to is the file written over.
  const auto taken = [only_not_regular](const std::string& name) {
    std::error_code ignored;  // not the listing's: it would end the loop below
    if (!only_not_regular) return fs::exists(fs::symlink_status(name, ignored));
    const fs::file_status status = fs::status(name, ignored);
    return fs::exists(status) && !fs::is_regular_file(status);
  };
  if (!number_in_file_name) {
    const bool unbounded = to == INT64_MAX;
    for (int64_t i = from; i < to; ++i) {
      if (taken(shard_name(pattern, i))) return i;
      if (unbounded) break;  // no listing to find a later one: the next name only
    }
    return -1;
  }
  const size_t name_begin = slash == std::string::npos ? 0 : slash + 1;
  const std::string dir = slash == std::string::npos ? "." : without_percent_escapes(pattern.substr(0, slash + 1));
  const std::string before = without_percent_escapes(pattern.substr(name_begin, field.begin - name_begin));
  const std::string after = without_percent_escapes(pattern.substr(field.end));
  int64_t lowest = -1;
  // A missing or unreadable folder holds nothing to write over (creating
  // or writing into it reports its own error).
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= before.size() + after.size() || name.compare(0, before.size(), before) != 0 ||
        name.compare(name.size() - after.size(), after.size(), after) != 0)
      continue;
    const std::string digits = name.substr(before.size(), name.size() - before.size() - after.size());
    if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t index = std::stoll(digits);
    // "shard-7.tar" is not what %06d writes for 7: only the exact name counts.
    if (index >= from && index < to && (lowest < 0 || index < lowest) &&
        shard_name(pattern, index) == without_percent_escapes(pattern.substr(0, name_begin)) + name &&
        taken(shard_name(pattern, index)))
      lowest = index;
  }
  return lowest;
}

}  // namespace

std::string first_existing_shard(const std::string& pattern, int64_t max_shards, bool only_not_regular) {
  const int64_t index = first_taken_shard(pattern, 0, max_shards, only_not_regular);
  return index < 0 ? "" : shard_name(pattern, index);
}

std::string first_shard_from(const std::string& pattern, int64_t from) {
  const int64_t index = first_taken_shard(pattern, from, INT64_MAX, false);
  return index < 0 ? "" : shard_name(pattern, index);
}

int TarShardWriter::duplicate_lock() const { return fd_ >= 0 ? ::fcntl(fd_, F_DUPFD_CLOEXEC, 0) : -1; }

namespace {

// Throws std::invalid_argument when another process holds `path`'s flock: a
// series writing it now. A shared lock: it conflicts with the writer's
// exclusive one, two probes do not refuse each other, and NFS (which
// emulates flock with fcntl locks) grants it on a descriptor opened for
// reading, where an exclusive one fails (EBADF) and read as "not held". The
// probe's own lock goes as its descriptor closes.
void refuse_if_held(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;  // not there (or not ours to open): nothing to wait for
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  if (held)
    throw std::invalid_argument(path + " is being written by another process: two writers of one series of "
                                "shards replace each other's and leave a mixed set; give each its own output "
                                "folder, or wait for the other to finish");
}

}  // namespace

ShardSeries::ShardSeries(std::string pattern, int64_t max_bytes, int64_t max_samples, bool replace_existing)
    : pattern_(std::move(pattern)), max_bytes_(max_bytes), max_samples_(max_samples),
      replace_existing_(replace_existing) {
  find_pattern_field(pattern_);  // a bad pattern fails here, before any shard is written
  if (max_bytes_ < 0 || max_samples_ < 0)
    throw std::invalid_argument("shard limits must be >= 0 (0 = no limit)");
  // Another series on these names holds its first shard from the start to
  // its end: as a .partial file, then under its own name.
  const std::string first = shard_name(pattern_, 0);
  refuse_if_held(first + ".partial");
  refuse_if_held(first);
}

ShardSeries::~ShardSeries() {
  if (series_lock_ >= 0) ::close(series_lock_);
}

bool ShardSeries::starts_new_shard(std::string_view key, const std::vector<MemberToWrite>& members) const {
  if (!writer_.is_open()) return true;
  if (writer_.samples_written() == 0) return false;  // a shard holds at least one sample
  if (max_samples_ > 0 && writer_.samples_written() >= max_samples_) return true;
  return max_bytes_ > 0 && writer_.bytes_written() + TarShardWriter::sample_tar_bytes(key, members) +
                                   TarShardWriter::kEndOfArchiveBytes >
                               max_bytes_;
}

void ShardSeries::write_sample(std::string_view key, const std::vector<MemberToWrite>& members) {
  if (starts_new_shard(key, members)) {
    close_current();
    const std::string path = shard_name(pattern_, static_cast<int64_t>(paths_.size()));
    // A pattern numbering folders ("out-%d/shard.tar"): each shard's own (the
    // caller makes the first's). The second failed, its folder missing.
    if (!paths_.empty()) {
      const fs::path folder = fs::path(path).parent_path();
      std::error_code ignored;  // the open below says what is wrong
      if (!folder.empty() && folder != fs::path(paths_.back()).parent_path()) fs::create_directories(folder, ignored);
    }
    writer_.open(path, replace_existing_);
    if (paths_.empty()) {
      // Asked again now that this series holds its first .partial: another
      // one may have started after the constructor's check and renamed its
      // first shard in meanwhile (pack walks its input tree in between).
      // Refused, this writer's .partial goes at once: a caller that went on
      // to close() would have renamed it over the other's first shard.
      try {
        refuse_if_held(path);
      } catch (const std::invalid_argument&) {
        writer_.abandon();
        throw;
      }
      // The first shard's lock, kept past its rename until the series' close.
      series_lock_ = writer_.duplicate_lock();
    }
    paths_.push_back(path);
  }
  writer_.write_sample(key, members);
}

void ShardSeries::close_current() {
  if (!writer_.is_open()) return;
  writer_.close();
  bytes_closed_ += writer_.bytes_written();
  ++finished_;
}

void ShardSeries::close() {
  close_current();
  if (series_lock_ >= 0) ::close(series_lock_);
  series_lock_ = -1;
}

int64_t ShardSeries::bytes_written() const {
  return bytes_closed_ + (writer_.is_open() ? writer_.bytes_written() : 0);
}

}  // namespace trainbench
