#include "dataloader/shard_tools.h"

#include <algorithm>   // std::sort, std::transform, std::max
#include <cctype>      // std::tolower
#include <cmath>       // std::ceil: tar blocks in the size estimate
#include <cstdint>     // INT64_MAX
#include <cstdio>      // std::snprintf
#include <cerrno>      // errno: why an input file could not be read
#include <cstring>     // std::memcpy, std::strerror
#include <filesystem>  // walking pack's input tree, creating output directories
#include <fstream>     // reading pack's input files
#include <optional>
#include <stdexcept>  // std::invalid_argument, std::runtime_error

#include "dataloader/data_error.h"    // DataError: what verify collects
#include "dataloader/shard_writer.h"  // ShardSeries
#include "dataloader/tar_reader.h"    // TarReader
#include "dataloader/token_decode.h"  // decode_tokens
#include "dataloader/webdataset.h"    // SampleReader, split_key_extension

namespace trainbench {

namespace fs = std::filesystem;

namespace {

// splitmix64: small, fast, and the same sequence with every compiler and
// standard library (std::uniform_int_distribution is not), so a seed names
// the same bytes everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by multiply-shift; its bias (below n / 2^64) is far
  // under anything a benchmark's data could show.
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  int64_t between(int64_t low, int64_t high) {
    return low + static_cast<int64_t>(below(static_cast<uint64_t>(high - low) + 1));
  }

 private:
  uint64_t state_;
};

constexpr int64_t kMaxU16Vocab = int64_t{1} << 16;
constexpr int64_t kMaxVocab = int64_t{1} << 31;  // token ids are int32 once decoded
// txt tokens are printable ASCII, so the text reads as text.
constexpr int kFirstPrintable = 0x20, kLastPrintable = 0x7E;

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument(message);
}

// A folder's listing leaves hidden files out (shard_list.cpp): shards named
// .x-000000.tar were written, then "holds no shards" to verify and run.
void require_visible_shard_name(const std::string& name, const std::string& what) {
  require(name.empty() || name.front() != '.',
          what + ": a shard name starting with '.' is hidden, and a folder's shard list leaves hidden files out");
}

}  // namespace

void check_synth_options(const SynthOptions& o) {
  require(!o.out_dir.empty(), "--out: an output directory is required");
  require(!o.prefix.empty() && o.prefix.find_first_of("/%") == std::string::npos,
          "--prefix '" + o.prefix + "': must be a non-empty file name prefix without '/' or '%'");
  require_visible_shard_name(o.prefix, "--prefix '" + o.prefix + "'");
  // PREFIX-NNNNNN.tar.partial must be a file name (255 bytes on Linux
  // filesystems): refused before the folder is made, not at the first shard.
  constexpr size_t kNameMax = 255, kSuffix = std::char_traits<char>::length("-000000.tar.partial");
  require(o.prefix.size() + kSuffix <= kNameMax, "--prefix: " + std::to_string(o.prefix.size()) +
                                                     " bytes; a shard's file name would pass 255 bytes (at most " +
                                                     std::to_string(kNameMax - kSuffix) + ")");
  require(o.count >= 1 && o.count <= kMaxSynthShards, "--count: must be between 1 and " +
                                                          std::to_string(kMaxSynthShards) + " (got " +
                                                          std::to_string(o.count) + ")");
  require(o.samples_per_shard >= 0 && o.shard_bytes >= 0 && (o.samples_per_shard > 0) != (o.shard_bytes > 0),
          "--samples N or --size BYTES: exactly one, and > 0");
  require(o.samples_per_shard <= kMaxSynthSamplesPerShard,
          "--samples: must be between 1 and " + std::to_string(kMaxSynthSamplesPerShard) + " (got " +
              std::to_string(o.samples_per_shard) + ")");
  require(o.field == "u16" || o.field == "u32" || o.field == "npy" || o.field == "txt",
          "--field '" + o.field + "': must be u16, u32, npy or txt");
  require(o.vocab >= 1 && o.vocab <= kMaxVocab,
          "--vocab: must be in 1.." + std::to_string(kMaxVocab) + " (got " + std::to_string(o.vocab) + ")");
  require(o.field != "u16" || o.vocab <= kMaxU16Vocab,
          "--vocab " + std::to_string(o.vocab) +
              " does not fit --field u16 (ids up to 65535): use --field u32 or npy");
  require(
      o.field != "txt" || o.vocab > kLastPrintable,
      "--vocab " + std::to_string(o.vocab) +
          " with --field txt: its tokens are printable ASCII bytes (ids 32..126), so --vocab must be >= 127");
  // Each bound alone first, so that the sums below cannot overflow.
  // SPREAD < MEAN keeps the shortest sample at 1 token or more: a wider
  // spread was clamped to 1, piling samples on 1 token, and the mean
  // written was not the one asked.
  require(o.tokens_mean >= 1 && o.tokens_spread >= 0 && o.tokens_spread < o.tokens_mean &&
              o.tokens_mean <= kMaxSynthTokensPerSample && o.tokens_mean + o.tokens_spread <= kMaxSynthTokensPerSample,
          "--tokens MEAN[:SPREAD]: needs MEAN >= 1, 0 <= SPREAD < MEAN and MEAN + SPREAD <= " +
              std::to_string(kMaxSynthTokensPerSample) + " (2^24)");
  require(o.payload_bytes >= 0 && o.payload_spread >= 0 && o.payload_spread <= o.payload_bytes &&
              o.payload_bytes <= kMaxSynthPayloadBytes && o.payload_bytes + o.payload_spread <= kMaxSynthPayloadBytes,
          "--payload-bytes BYTES[:SPREAD]: needs 0 <= SPREAD <= BYTES and BYTES + SPREAD <= 1 GiB (a sample is "
          "made in memory)");
}

namespace {

// A .npy v1.0 header for a 1-D little-endian array of `count` elements.
// numpy pads the header with spaces and a newline to a multiple of 64 bytes.
std::string npy_header(const char* descr, int64_t count) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(count) + ",), }";
  const size_t preamble = 10;  // magic (6), version (2), header length (2)
  const size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  header += static_cast<char>(dict.size() & 0xFF);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

// One synthetic sample. Its content depends only on the options and its
// global index, never on how samples fall into shards.
struct SynthSample {
  std::string key;
  int64_t tokens = 0;
  std::vector<uint8_t> token_bytes;
  std::vector<uint8_t> payload;
  std::vector<MemberToWrite> members;
};

void append_little_endian(std::vector<uint8_t>* out, uint32_t value, int width) {
  for (int b = 0; b < width; ++b) out->push_back(static_cast<uint8_t>(value >> (8 * b)));
}

// Bytes a token id takes in the token member: one printable byte for txt,
// '<u4' for u32 (and npy past u16's range), else '<u2'.
int token_id_bytes(const SynthOptions& o) {
  if (o.field == "txt") return 1;
  return o.field == "u32" || (o.field == "npy" && o.vocab > kMaxU16Vocab) ? 4 : 2;
}

// What the token member holds before its ids: the .npy header for npy.
std::string token_member_header(const SynthOptions& o, int64_t tokens) {
  return o.field == "npy" ? npy_header(token_id_bytes(o) == 4 ? "<u4" : "<u2", tokens) : std::string();
}

void make_sample(const SynthOptions& o, int64_t index, SynthSample* s) {
  // Each sample's stream starts at a scrambled point of its own, so samples
  // of one seed (and the same index under two seeds) share no values.
  SplitMix64 start(SplitMix64(o.seed).next() + static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ULL);
  SplitMix64 rng(start.next());
  std::string key = std::to_string(index);
  if (key.size() < 9) key.insert(0, 9 - key.size(), '0');
  s->key = std::move(key);
  s->tokens = rng.between(o.tokens_mean - o.tokens_spread, o.tokens_mean + o.tokens_spread);

  const std::string header = token_member_header(o, s->tokens);
  s->token_bytes.assign(header.begin(), header.end());
  if (o.field == "txt") {
    for (int64_t t = 0; t < s->tokens; ++t)
      s->token_bytes.push_back(static_cast<uint8_t>(rng.between(kFirstPrintable, kLastPrintable)));
  } else {
    const uint64_t vocab = static_cast<uint64_t>(o.vocab);
    for (int64_t t = 0; t < s->tokens; ++t)
      append_little_endian(&s->token_bytes, static_cast<uint32_t>(rng.below(vocab)), token_id_bytes(o));
  }

  s->payload.clear();
  if (o.payload_bytes > 0) {
    s->payload.resize(static_cast<size_t>(
        rng.between(o.payload_bytes - o.payload_spread, o.payload_bytes + o.payload_spread)));
    for (size_t at = 0; at < s->payload.size(); at += 8) {
      const uint64_t word = rng.next();
      std::memcpy(s->payload.data() + at, &word, std::min<size_t>(8, s->payload.size() - at));
    }
  }

  s->members.clear();
  s->members.push_back({o.field, s->token_bytes.data(), s->token_bytes.size()});
  if (o.payload_bytes > 0) s->members.push_back({"payload.bin", s->payload.data(), s->payload.size()});
}

void create_output_directory(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw std::runtime_error("cannot create directory " + dir.string() + ": " + error.message());
}

struct SourceFile {
  fs::path path;
  std::string key;              // as webdataset derives it from the relative path
  std::string extension;        // as written (member name = key + "." + extension)
  std::string extension_lower;  // as readers compare it
  int64_t size = 0;
};

// pack's input tree that cannot be read: a refusal (EACCES) is the input's,
// exit 2, as data.shards' is; failing storage (EIO) or the machine's limits
// (EMFILE) exit 3. Named with the path and errno: it was a bare "cannot
// read PATH", or the filesystem library's "cannot increment recursive
// directory iterator" without the folder, both exit 3.
[[noreturn]] void unreadable_input(const std::string& what, int error) {
  throw DataError(scope_of_failed_open(error, CorruptScope::kConfig),
                  "INPUT_DIR: " + what + ": " + std::strerror(error) + (error == EMFILE ? " (ulimit -n)" : ""));
}

void read_whole_file(const fs::path& path, std::vector<uint8_t>* out) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) unreadable_input("cannot read " + path.string(), errno != 0 ? errno : EIO);
  std::error_code error;
  const uintmax_t size = fs::file_size(path, error);
  if (error) unreadable_input("cannot read " + path.string(), error.value());
  out->resize(static_cast<size_t>(size));
  errno = 0;
  in.read(reinterpret_cast<char*>(out->data()), static_cast<std::streamsize>(size));
  if (in.bad()) unreadable_input("cannot read " + path.string(), errno != 0 ? errno : EIO);
  if (in.gcount() != static_cast<std::streamsize>(size) || in.peek() != std::ifstream::traits_type::eof())
    throw std::runtime_error("cannot read " + path.string() + ": it changed size while being packed");
}

}  // namespace

namespace {

// "17.2 GB": sizes in the free-space message.
std::string gigabytes(double bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3g GB", bytes / 1e9);
  return text;
}

// The shards' size on disk, from the mean sample (tar headers and padding
// included), in double: count x samples x bytes can pass int64.
double estimated_synth_bytes(const SynthOptions& o) {
  if (o.shard_bytes > 0) return static_cast<double>(o.count) * static_cast<double>(o.shard_bytes);
  const auto member = [](double bytes) { return 512.0 + std::ceil(bytes / 512.0) * 512.0; };
  const double token_width = o.field == "txt" ? 1 : o.field == "u16" || (o.field == "npy" && o.vocab <= kMaxU16Vocab) ? 2 : 4;
  double sample = member(static_cast<double>(o.tokens_mean) * token_width + (o.field == "npy" ? 128 : 0));
  if (o.payload_bytes > 0) sample += member(static_cast<double>(o.payload_bytes));
  return static_cast<double>(o.count) * (static_cast<double>(o.samples_per_shard) * sample + 1024.0);
}

// Before the first byte: a run of synthesis that fills the disk leaves a
// full file system behind for everyone else on it.
void check_free_space(const SynthOptions& o) {
  std::error_code error;
  const fs::space_info space = fs::space(o.out_dir, error);
  if (error) return;  // no figure to check against; writing will say what fails
  const double one_copy = estimated_synth_bytes(o);
  const double needed = one_copy * static_cast<double>(std::max<int64_t>(o.copies_on_this_disk, 1));
  if (needed > static_cast<double>(space.available))
    throw std::runtime_error("synthetic shards: " + std::to_string(o.count) + " shards need about " +
                             gigabytes(one_copy) +
                             (o.copies_on_this_disk > 1 ? " for each of the " + std::to_string(o.copies_on_this_disk) +
                                                              " ranks on this host, " + gigabytes(needed) + " in all,"
                                                        : "") +
                             " but " + o.out_dir + " has " + gigabytes(static_cast<double>(space.available)) +
                             " available: make fewer or smaller shards");
}

// Shards are data someone made: a second run into the same folder must not
// replace them unasked (fio and tar would; DLIO's generator refuses too).
void refuse_existing_shards(const std::string& pattern, int64_t max_shards, bool overwrite) {
  if (overwrite) {
    // Found before anything is written, not as a failed rename of a
    // finished shard (exit 3, the environment's).
    const std::string blocked = first_existing_shard(pattern, max_shards, /*only_not_regular=*/true);
    if (!blocked.empty())
      throw std::invalid_argument("--out: " + blocked + " is already there and is not a regular file: "
                                  "--overwrite writes over shards only; remove it or give another --out");
    return;
  }
  const std::string taken = first_existing_shard(pattern, max_shards);
  if (!taken.empty())
    throw std::invalid_argument("--out: " + taken +
                                " is already there and would be written over: give --overwrite, or "
                                "another --out");
}

// A synth or pack that fails part-way leaves its finished shards (each
// whole, synced, under its own name) and removes only the one it was
// writing. Said with the failure: unsaid, a run again was refused for them
// ("already there") and a directory spec read an incomplete set as the data,
// after --overwrite mixed with the earlier run's later shards.
std::string shards_left_behind(const ShardSeries& series, const std::string& pattern) {
  const int64_t finished = series.finished_shards();
  if (finished == 0) return "";
  const std::vector<std::string>& paths = series.paths();
  std::string left = "; " + std::to_string(finished) + " finished shard" + (finished == 1 ? "" : "s") + " left (" +
                     paths.front() + (finished > 1 ? " .. " + paths[static_cast<size_t>(finished - 1)] : "") +
                     "), not the whole set: remove them, or run again with --overwrite";
  const std::string earlier = first_shard_from(pattern, finished);
  if (!earlier.empty()) left += "; " + earlier + " and later shards are from an earlier run";
  return left;
}

// Runs `write` (a series' samples, then its close) and adds to a failure
// what it left behind, the exception's kind (and so the exit code) kept.
template <typename Write>
void write_series(const ShardSeries& series, const std::string& pattern, Write&& write) {
  try {
    write();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(e.what() + shards_left_behind(series, pattern));
  } catch (const DataError& e) {
    throw DataError(e.scope(), e.what() + shards_left_behind(series, pattern));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(e.what() + shards_left_behind(series, pattern));
  }
}

}  // namespace

bool path_is_within(const fs::path& inner, const fs::path& outer) {
  std::error_code error;
  const fs::path a = fs::weakly_canonical(fs::absolute(inner, error), error);
  if (error) return false;
  const fs::path b = fs::weakly_canonical(fs::absolute(outer, error), error);
  if (error) return false;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ib, ++ia) {
    if (ib->empty()) continue;  // "dir/" ends in an empty element
    if (ia == a.end() || *ia != *ib) return false;
  }
  return true;
}

int64_t synth_largest_member_bytes(const SynthOptions& o) {
  const int64_t tokens = o.tokens_mean + o.tokens_spread;
  const int64_t token_member =
      static_cast<int64_t>(token_member_header(o, tokens).size()) + tokens * token_id_bytes(o);
  return std::max(token_member, o.payload_bytes > 0 ? o.payload_bytes + o.payload_spread : 0);
}

SynthResult synthesize_shards(const SynthOptions& options, const ProgressCallback& progress) {
  check_synth_options(options);
  const std::string pattern = pattern_literal(options.out_dir) + "/" + options.prefix + "-%06d.tar";
  refuse_existing_shards(pattern, options.count, options.overwrite);
  create_output_directory(options.out_dir);
  check_free_space(options);
  ShardSeries series(pattern, options.shard_bytes, options.samples_per_shard, options.overwrite);
  const bool by_size = options.shard_bytes > 0;
  const int64_t per_shard = by_size ? options.shard_bytes : options.samples_per_shard;
  const int64_t total = options.count > INT64_MAX / per_shard ? INT64_MAX : options.count * per_shard;

  SynthResult result;
  SynthSample sample;
  write_series(series, pattern, [&] {
    for (int64_t index = 0;; ++index) {
      make_sample(options, index, &sample);
      if (series.starts_new_shard(sample.key, sample.members) &&
          static_cast<int64_t>(series.paths().size()) == options.count)
        break;
      series.write_sample(sample.key, sample.members);
      ++result.samples;
      result.tokens += sample.tokens;
      if (progress)
        progress(by_size ? series.bytes_written() : result.samples, total, by_size ? "bytes" : "samples");
    }
    series.close();
  });
  result.paths = series.paths();
  result.bytes = series.bytes_written();
  return result;
}

void check_pack_destination(const PackOptions& options) {
  const fs::path first = shard_name(options.out_pattern, 0);
  require_visible_shard_name(first.filename().string(), "--out " + options.out_pattern);
  const fs::path out_dir = first.parent_path();
  if (path_is_within(out_dir.empty() ? fs::path(".") : out_dir, options.input_dir))
    throw std::invalid_argument("--out " + options.out_pattern + " is inside INPUT_DIR " + options.input_dir +
                                ": a later pack of it would pack these shards as samples; write them "
                                "outside it");
}

PackResult pack_directory(const PackOptions& options, const ProgressCallback& progress) {
  const fs::path root(options.input_dir);
  std::error_code error;
  if (!fs::is_directory(root, error))
    throw std::invalid_argument("INPUT_DIR " + options.input_dir + ": " +
                                (fs::exists(root, error) ? "not a directory" : "no such directory"));
  require(options.max_bytes >= 0 && options.max_count >= 0, "--max-size and --max-count: must be >= 0");
  ShardSeries series(options.out_pattern, options.max_bytes, options.max_count, options.overwrite);
  check_pack_destination(options);
  const fs::path out_dir = fs::path(shard_name(options.out_pattern, 0)).parent_path();

  PackResult result;
  std::vector<SourceFile> files;
  int64_t total_bytes = 0;
  // The error_code forms, each step checked: the walk names the folder it
  // could not open or read (unreadable_input).
  fs::path walked_from;  // the entry before the step that failed
  for (fs::recursive_directory_iterator walk(root, error), end;; walk.increment(error)) {
    if (error) {
      // Opening INPUT_DIR, descending into the folder walked from, or
      // reading on in the folder of the file walked from.
      std::error_code ignored;
      fs::path folder = walked_from.empty() ? root : walked_from;
      if (!walked_from.empty() && !fs::is_directory(fs::symlink_status(walked_from, ignored)))
        folder = walked_from.parent_path();
      unreadable_input("cannot read the folder " + folder.string(), error.value());
    }
    if (walk == end) break;
    const fs::directory_entry& entry = *walk;
    walked_from = entry.path();
    std::error_code ignored;
    if (entry.is_directory(ignored) && !entry.is_symlink(ignored)) continue;  // walked into
    // Regular files and links to them are packed; everything else (links to
    // directories, broken links, links in a loop, fifos, sockets, devices)
    // is counted. The error_code forms: a loop's status is ELOOP, which
    // threw out of the whole pack.
    if (!entry.is_regular_file(ignored)) {
      ++result.skipped_non_regular;
      continue;
    }
    SourceFile file;
    file.path = entry.path();
    const std::string relative = entry.path().lexically_relative(root).generic_string();
    if (!split_key_extension(relative, &file.key, &file.extension_lower)) {
      ++result.skipped_unnamed;  // readers would drop it: no extension, or a "__" name
      continue;
    }
    file.extension = relative.substr(file.key.size() + 1);
    file.size = static_cast<int64_t>(entry.file_size(error));
    if (error) unreadable_input("cannot read " + entry.path().string(), error.value());
    total_bytes += file.size;
    files.push_back(std::move(file));
  }
  // By key, not by path: "a.b/c.txt" would otherwise sort between "a.aaa"
  // and "a.zzz" and split sample "a" in two.
  std::sort(files.begin(), files.end(), [](const SourceFile& x, const SourceFile& y) {
    if (x.key != y.key) return x.key < y.key;
    if (x.extension_lower != y.extension_lower) return x.extension_lower < y.extension_lower;
    return x.extension < y.extension;
  });
  for (size_t i = 1; i < files.size(); ++i)
    if (files[i].key == files[i - 1].key && files[i].extension_lower == files[i - 1].extension_lower)
      throw std::invalid_argument(
          "INPUT_DIR: " + files[i - 1].path.string() + " and " + files[i].path.string() +
          ": webdataset compares extensions lower-cased, so one sample would hold the same member twice");

  if (files.empty())
    throw std::invalid_argument("INPUT_DIR " + options.input_dir + ": no files to pack (" +
                                std::to_string(result.skipped_non_regular + result.skipped_unnamed) +
                                " skipped: not regular files, or names webdataset readers ignore)");
  // A shard holds at least one sample: no more shards than samples.
  refuse_existing_shards(options.out_pattern, static_cast<int64_t>(files.size()), options.overwrite);
  if (!out_dir.empty()) create_output_directory(out_dir);

  std::vector<std::vector<uint8_t>> buffers;
  std::vector<MemberToWrite> members;
  int64_t bytes_read = 0;
  write_series(series, options.out_pattern, [&] {
    for (size_t first = 0; first < files.size();) {
      size_t end = first;
      while (end < files.size() && files[end].key == files[first].key) ++end;
      if (buffers.size() < end - first) buffers.resize(end - first);
      members.clear();
      for (size_t i = first; i < end; ++i) {
        std::vector<uint8_t>& buffer = buffers[i - first];
        read_whole_file(files[i].path, &buffer);
        members.push_back({files[i].extension, buffer.data(), buffer.size()});
        bytes_read += static_cast<int64_t>(buffer.size());
      }
      series.write_sample(files[first].key, members);
      ++result.samples;
      result.files += static_cast<int64_t>(end - first);
      if (progress) progress(bytes_read, total_bytes, "bytes");
      first = end;
    }
    series.close();
  });
  result.paths = series.paths();
  result.bytes = series.bytes_written();
  return result;
}

VerifyResult verify_shards(const VerifyOptions& options, const ProgressCallback& progress) {
  std::optional<TokenFormat> format;
  std::string field = options.field;
  std::transform(field.begin(), field.end(), field.begin(), [](unsigned char c) { return std::tolower(c); });
  if (!field.empty()) format = token_format_of_field(field);
  // vocab 0 is no bound: every id an int32 holds (decode_tokens wants a positive bound).
  const int64_t vocab = options.vocab > 0 ? options.vocab : int64_t{1} << 31;

  int64_t total_bytes = 0;
  for (const std::string& path : options.shards) {
    std::error_code error;
    const uintmax_t size = fs::file_size(path, error);
    if (!error) total_bytes += static_cast<int64_t>(size);
  }

  VerifyResult result;
  auto record = [&](const std::string& line) {
    ++result.errors;
    result.error_lines.push_back(line);
  };
  TarReader tar;
  Sample sample;
  std::vector<int32_t> tokens;
  std::string decode_error;
  int64_t bytes_before = 0;
  for (const std::string& path : options.shards) {
    ++result.shards;
    try {
      tar.open(path);
    } catch (const DataError& e) {
      if (e.scope() == CorruptScope::kEnvironment) throw;  // the machine's, not this shard's
      record(e.what());
      continue;
    }
    SampleReader samples(tar, options.max_member_bytes);
    const int64_t samples_before = result.samples, tokens_before = result.tokens, errors_before = result.errors;
    int64_t member_bytes = 0;
    for (;;) {
      try {
        if (!samples.next(&sample)) break;
      } catch (const DataError& e) {
        record(e.what());
        if (e.scope() == CorruptScope::kShard) break;  // the rest of this shard is unreadable
        continue;
      }
      ++result.samples;
      member_bytes += sample.bytes;
      if (format) {
        const SampleMember* member = sample.find(field);
        tokens.clear();
        if (member == nullptr) {
          // A header cut after it may have been the member's: the archive's
          // break, recorded next, says so.
          if (!samples.broken_after())
            record(at_offset(path, sample.offset, "sample " + printable(sample.key) + " has no '" + field + "' member"));
        } else if (!decode_tokens(*format, member->data.data(), member->data.size(), vocab, &tokens, &decode_error))
          record(at_offset(path, sample.offset, "sample " + printable(sample.key) + ": " + decode_error));
        else
          result.tokens += static_cast<int64_t>(tokens.size());
      }
      if (progress) progress(bytes_before + tar.storage_bytes(), total_bytes, "bytes");
    }
    // Its samples may be fewer than were written: a copy cut short right
    // after a member reads as a whole archive to every tar reader. (Whatever
    // else was wrong with its samples; false when reading stopped on an error.)
    if (tar.ended_without_end_marker())
      record(at_offset(path, tar.stream_offset(),
                       "the archive ends without its end-of-archive marker (two zero blocks) after its last "
                       "member: cut short at a member boundary, e.g. by an interrupted copy? (the loader reads "
                       "the " + std::to_string(result.samples - samples_before) + " samples there are)"));
    if (const int64_t after = tar.data_after_end_marker(); after >= 0)
      record(at_offset(path, after,
                       "data after the end-of-archive marker: a zeroed block where a header was, or archives "
                       "joined by cat? Tar readers stop at the marker (the loader reads the " +
                           std::to_string(result.samples - samples_before) + " samples before it)"));
    // A readable shard that gives a loader nothing (only directories or
    // links, or empty token members) is an error: training on it fails.
    if (result.errors == errors_before) {
      if (result.samples == samples_before)
        record(path + ": no samples (no regular file member named key.extension)");
      else if (member_bytes == 0)
        record(path + ": no data (every member of its " + std::to_string(result.samples - samples_before) +
               " samples is empty)");
      else if (format && result.tokens == tokens_before)
        record(path + ": no tokens (every ." + field + " member is empty)");
    }
    result.bytes += tar.storage_bytes();
    bytes_before += tar.storage_bytes();
    tar.close();
  }
  if (progress) progress(bytes_before, total_bytes, "bytes");
  return result;
}

}  // namespace trainbench
