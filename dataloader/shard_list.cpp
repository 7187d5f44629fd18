#include "dataloader/shard_list.h"

#include <dirent.h>    // opendir, readdir
#include <glob.h>      // glob, globfree
#include <sys/stat.h>  // stat, lstat

#include <algorithm>  // std::sort, std::max
#include <charconv>   // std::from_chars for range bounds
#include <cerrno>     // ELOOP, ENOENT: why a listed shard is absent
#include <cstdint>    // uint64_t: a shard's head hashed
#include <cstdio>     // std::snprintf: the hash in hex
#include <cstring>    // std::memcmp, std::strerror
#include <fstream>    // list files
#include <map>        // repeated_shards: listings per file
#include <utility>    // std::pair: a file's device and inode
#include <string_view>

#include "dataloader/data_error.h"

namespace trainbench {

namespace {

// The names taken as shards in a directory: tar, and tar through each
// compressor the reader (libarchive) undoes.
constexpr std::string_view kShardSuffixes[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tar.bz2",
                                               ".tar.xz"};

// A pattern that would expand to more names than this is a typo, not a dataset.
constexpr size_t kMaxExpandedNames = size_t{1} << 22;

[[noreturn]] void config_error(const std::string& message) {
  throw DataError(CorruptScope::kConfig, "data.shards: " + message);
}

// A folder or list the machine could not read: out of descriptors or
// memory, or storage failing (EIO, a stale NFS handle), is the environment
// (exit 3), not a spec without shards; its refusal (EACCES) is the spec's.
[[noreturn]] void unreadable(const std::string& message, int error) {
  throw DataError(scope_of_failed_open(error, CorruptScope::kConfig),
                  "data.shards: " + message + ": " + std::strerror(error) + (error == EMFILE ? " (ulimit -n)" : ""));
}

std::vector<std::string> expand_pattern(std::string_view pattern, const std::string& whole);

int64_t parse_bound(std::string_view text, const std::string& whole) {
  int64_t value = 0;
  const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || status != std::errc() || end != text.data() + text.size()) {
    config_error("range bound '" + std::string(text) + "' in '" + whole + "' is not an integer");
  }
  return value;
}

// braceexpand's rule: a bound written with a leading zero pads every number
// to the width of the wider bound, e.g. {07..10} -> 07 08 09 10.
std::vector<std::string> expand_range(std::string_view body, const std::string& whole) {
  const size_t dots = body.find("..");
  std::string_view first = body.substr(0, dots);
  std::string_view last = body.substr(dots + 2);
  int64_t step = 1;
  if (const size_t step_dots = last.find(".."); step_dots != std::string_view::npos) {
    std::string_view step_text = last.substr(step_dots + 2);
    if (step_text.starts_with('-'))
      step_text.remove_prefix(1);  // the direction comes from the bounds
    step = std::max<int64_t>(1, parse_bound(step_text, whole));
    last = last.substr(0, step_dots);
  }
  const int64_t begin = parse_bound(first, whole);
  const int64_t end = parse_bound(last, whole);
  auto zero_padded = [](std::string_view bound) {
    const std::string_view digits = bound.starts_with('-') ? bound.substr(1) : bound;
    return digits.size() > 1 && digits.front() == '0';
  };
  const size_t width =
      zero_padded(first) || zero_padded(last) ? std::max(first.size(), last.size()) : 0;
  const uint64_t span = begin <= end ? static_cast<uint64_t>(end) - static_cast<uint64_t>(begin)
                                     : static_cast<uint64_t>(begin) - static_cast<uint64_t>(end);
  if (span / static_cast<uint64_t>(step) >= kMaxExpandedNames) {
    config_error("'" + whole + "' expands to more than " + std::to_string(kMaxExpandedNames) +
                 " names");
  }
  // Unsigned arithmetic: the bounds may be anywhere in int64's range.
  std::vector<std::string> names;
  for (uint64_t i = 0; i <= span / static_cast<uint64_t>(step); ++i) {
    const uint64_t distance = i * static_cast<uint64_t>(step);
    const int64_t value =
        static_cast<int64_t>(begin <= end ? static_cast<uint64_t>(begin) + distance
                                          : static_cast<uint64_t>(begin) - distance);
    const uint64_t magnitude =
        value < 0 ? uint64_t{0} - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
    const std::string sign = value < 0 ? "-" : "";
    const std::string digits = std::to_string(magnitude);
    const size_t pad =
        width > sign.size() + digits.size() ? width - sign.size() - digits.size() : 0;
    names.push_back(sign + std::string(pad, '0') + digits);
  }
  return names;
}

// The positions of the commas not nested in an inner brace.
std::vector<size_t> top_level_commas(std::string_view body) {
  std::vector<size_t> commas;
  int depth = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '{') ++depth;
    if (body[i] == '}') --depth;
    if (body[i] == ',' && depth == 0) commas.push_back(i);
  }
  return commas;
}

// What one {...} stands for: a list {a,b}, a range {1..9}, or (as in bash and
// braceexpand) itself when it is neither, e.g. {a}.
std::vector<std::string> expand_group(std::string_view body, const std::string& whole) {
  if (body.empty()) config_error("empty braces {} in '" + whole + "'");
  const std::vector<size_t> commas = top_level_commas(body);
  if (!commas.empty()) {
    std::vector<std::string> names;
    size_t begin = 0;
    for (size_t i = 0; i <= commas.size(); ++i) {
      const size_t end = i < commas.size() ? commas[i] : body.size();
      for (std::string& name : expand_pattern(body.substr(begin, end - begin), whole)) {
        names.push_back(std::move(name));
      }
      begin = end + 1;
    }
    return names;
  }
  if (body.find("..") != std::string_view::npos && body.find('{') == std::string_view::npos) {
    return expand_range(body, whole);
  }
  std::vector<std::string> names = expand_pattern(body, whole);
  for (std::string& name : names) name = "{" + name + "}";
  return names;
}

std::vector<std::string> expand_pattern(std::string_view pattern, const std::string& whole) {
  std::vector<std::string> names{""};
  size_t pos = 0;
  while (pos < pattern.size()) {
    if (pattern[pos] == '}') config_error("unbalanced '}' in '" + whole + "'");
    if (pattern[pos] != '{') {
      const size_t end = std::min(pattern.find_first_of("{}", pos), pattern.size());
      for (std::string& name : names) name.append(pattern.substr(pos, end - pos));
      pos = end;
      continue;
    }
    int depth = 0;
    size_t close = pos;
    for (; close < pattern.size(); ++close) {
      if (pattern[close] == '{') ++depth;
      if (pattern[close] == '}' && --depth == 0) break;
    }
    if (close == pattern.size()) config_error("unbalanced '{' in '" + whole + "'");
    const std::vector<std::string> alternatives =
        expand_group(pattern.substr(pos + 1, close - pos - 1), whole);
    if (names.size() * alternatives.size() > kMaxExpandedNames) {
      config_error("'" + whole + "' expands to more than " + std::to_string(kMaxExpandedNames) +
                   " names");
    }
    std::vector<std::string> combined;
    combined.reserve(names.size() * alternatives.size());
    for (const std::string& prefix : names) {
      for (const std::string& alternative : alternatives) combined.push_back(prefix + alternative);
    }
    names.swap(combined);
    pos = close + 1;
  }
  return names;
}

bool is_directory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// Why stat found nothing at a listed path: a link whose target is gone or
// that loops reads as "does not exist" to a user who can see the link.
std::string why_absent(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) return "exists";
  const int stat_errno = errno;
  if (stat_errno == ELOOP) return "is a symbolic link loop";
  if (stat_errno == ENOENT && ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode))
    return "is a symbolic link to nothing (its target does not exist)";
  if (stat_errno == ENOENT || stat_errno == ENOTDIR) return "does not exist";
  return std::string("cannot be reached: ") + std::strerror(stat_errno);
}

// Shards and list files are read whole: a FIFO would block the open, and a
// device (/dev/zero, /dev/urandom, or a link to one) would never end. stat
// follows links, so a link to a regular file is one; a link to nothing found
// in a folder or by a glob is said as one named is (it passed, and the run
// failed at its first step on "cannot open", or under on_corrupt skip
// counted a missing file as a corrupt shard every epoch).
void require_regular_file(const std::string& path, const std::string& what, const std::string& where = "") {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) config_error(what + " " + path + where + " " + why_absent(path));
  if (!S_ISREG(info.st_mode)) config_error(what + " " + path + where + " is not a regular file");
}

// A shard named without a shard extension is still recognised by its first
// bytes: tar's "ustar" magic or a compressor's signature. Anything else is a list.
bool looks_like_archive(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[512] = {};
  in.read(head, sizeof head);
  const size_t got = static_cast<size_t>(in.gcount());
  auto starts_with = [&](std::string_view magic) {
    return got >= magic.size() && std::memcmp(head, magic.data(), magic.size()) == 0;
  };
  if (got >= 262 && std::memcmp(head + 257, "ustar", 5) == 0) return true;
  return starts_with("\x1f\x8b") || starts_with("\x28\xb5\x2f\xfd") || starts_with("BZh") ||
         starts_with(std::string_view("\xfd"
                                      "7zXZ\0",
                                      6));
}

// The first folder glob(3) could not read and why (glob takes a plain
// function): without it, a pattern whose folder could not be opened matched
// "no file".
thread_local int glob_read_error = 0;
thread_local std::string glob_unread_folder;
int note_glob_read_error(const char* folder, int error) {
  // A file where the pattern wants a folder ("*/x.tar" meets a file) or one
  // gone meanwhile: nothing to match there, not a read that failed.
  if (error == ENOTDIR || error == ENOENT) return 0;
  if (glob_read_error == 0) {
    glob_read_error = error;
    glob_unread_folder = folder;
  }
  return 0;  // go on: another folder may match
}

// What `pattern` matches, as glob(3) finds it; the first folder it could
// not read goes to glob_read_error (note_glob_read_error).
std::vector<std::string> glob_matches(const std::string& pattern) {
  glob_t matches;
  glob_read_error = 0;
  const int status = ::glob(pattern.c_str(), 0, note_glob_read_error, &matches);
  std::vector<std::string> matched;
  for (size_t i = 0; status == 0 && i < matches.gl_pathc; ++i) matched.emplace_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  return matched;
}

// What a glob pattern matches. glob(3) looks a last part without glob
// characters up in each folder the rest matched ("/data/*/shard.tar": an
// lstat, no listing), so its errfunc never hears of a folder that refuses
// the lookup (EACCES) or of storage that fails it (EIO): both read as "no
// such file", and that folder's shard was left out without a word. Such a
// last part is looked up here instead, in the folders glob(3) matched, and
// a lookup that failed otherwise than "absent" is refused.
std::vector<std::string> pattern_matches(const std::string& pattern) {
  const size_t slash = pattern.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == pattern.size()) return glob_matches(pattern);
  const std::string parent = pattern.substr(0, slash);
  const std::string last = pattern.substr(slash + 1);
  if (last.find_first_of("*?[") != std::string::npos || parent.find_first_of("*?[") == std::string::npos)
    return glob_matches(pattern);
  std::vector<std::string> found;
  for (const std::string& folder : glob_matches(parent)) {
    const std::string path = folder + "/" + last;
    struct stat info;
    if (::lstat(path.c_str(), &info) == 0) {
      found.push_back(path);
      continue;
    }
    const int error = errno;
    if (error != ENOENT && error != ENOTDIR)
      unreadable("cannot look up " + path + " for " + pattern + " (its shards would be left out)", error);
  }
  return found;
}

std::vector<std::string> shards_in_directory(const std::string& directory) {
  std::vector<std::string> shards;
  // Unread, it was "holds no shards" (exit 2) under ulimit -n.
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) unreadable("cannot list directory " + directory, errno);
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      const int error = errno;
      ::closedir(dir);
      if (error != 0) unreadable("cannot list directory " + directory, error);
      break;
    }
    // Hidden files are left out, as a shell's * leaves them: macOS's
    // AppleDouble ._name.tar beside each shard copied from its disks is no shard.
    if (entry->d_name[0] == '.') continue;
    const std::string path = directory + "/" + entry->d_name;
    if (has_shard_extension(entry->d_name) && !is_directory(path)) shards.push_back(path);
  }
  std::sort(shards.begin(), shards.end());
  for (const std::string& path : shards) require_regular_file(path, "shard");
  if (shards.empty()) {
    std::string suffixes;
    for (const std::string_view suffix : kShardSuffixes) suffixes += (suffixes.empty() ? "*" : ", *") + std::string(suffix);
    config_error("directory " + directory + " holds no shards (" + suffixes + ")");
  }
  return shards;
}

// Lines of a list file; relative paths are relative to the file's directory.
// A file with bytes no text has (NUL, control characters) is neither a list
// nor, by its first bytes, a shard: an old v7 tar without the "ustar" magic,
// a shard of another format, data given by mistake. Said so, rather than its
// bytes printed back as the "paths" it lists.
struct ListedPath {
  std::string path;
  int64_t line = 0;  // 1-based, in the list file: where a bad entry is to be mended
};

std::vector<ListedPath> paths_in_list_file(const std::string& file) {
  const size_t slash = file.rfind('/');
  const std::string base = slash == std::string::npos ? "" : file.substr(0, slash + 1);
  std::vector<ListedPath> paths;
  int64_t line_number = 0;
  std::ifstream in(file, std::ios::binary);
  // An unreadable list is said so: read as empty, it was "no shards given".
  if (!in) unreadable("list file " + file + ": cannot open it", errno);
  std::string line;
  for (bool first = true; std::getline(in, line); first = false) {
    ++line_number;
    if (first && line.starts_with("\xef\xbb\xbf")) line.erase(0, 3);  // a UTF-8 byte-order mark
    for (const char c : line) {
      const auto byte = static_cast<unsigned char>(c);
      if ((byte < 0x20 && c != '\t' && c != '\r') || byte == 0x7f)
        config_error("shard or list file " + file + ": neither a shard by its first bytes (no tar \"ustar\" "
                     "magic, no gzip, zstd, bzip2 or xz signature: name a tar shard *.tar) nor a list file of "
                     "paths (it holds binary bytes)");
    }
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    // A comment after the path, as in shell and YAML: a '#' after a blank
    // (one inside a name, sharp#1.tar, is the name's).
    for (size_t i = begin + 1; i < line.size(); ++i)
      if (line[i] == '#' && (line[i - 1] == ' ' || line[i - 1] == '\t')) {
        line.resize(i);
        break;
      }
    const size_t end = line.find_last_not_of(" \t\r");
    const std::string path = line.substr(begin, end - begin + 1);
    paths.push_back({path.front() == '/' ? path : base + path, line_number});
  }
  // getline turns a failed read(2) (EIO, as /proc/self/mem gives) into badbit.
  if (in.bad()) config_error("list file " + file + ": read failed after " + std::to_string(paths.size()) + " paths");
  return paths;
}

// The items of a spec: separated by commas or whitespace outside braces.
std::vector<std::string> split_items(const std::string& spec) {
  std::vector<std::string> items;
  std::string item;
  int depth = 0;
  for (const char c : spec) {
    if (c == '{') ++depth;
    if (c == '}') --depth;
    const bool separator =
        depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r');
    if (!separator) item.push_back(c);
    if (separator && !item.empty()) items.push_back(std::move(item)), item.clear();
  }
  if (!item.empty()) items.push_back(std::move(item));
  return items;
}

}  // namespace

std::vector<std::string> expand_braces(const std::string& pattern) {
  return expand_pattern(pattern, pattern);
}

std::vector<std::string> shard_identities(const std::vector<std::string>& shards) {
  std::vector<std::string> identities;
  identities.reserve(shards.size());
  for (const std::string& path : shards) {
    const size_t slash = path.rfind('/');
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    struct stat info;
    const std::string size = ::stat(path.c_str(), &info) == 0 ? std::to_string(info.st_size) : "?";
    // The first 4 KiB (the first member's header and the start of its
    // data), FNV-1a: shards of fixed-length samples are all one size, and a
    // data set made again (another tokenizer) keeps names and sizes alike.
    char head[4096];
    std::ifstream in(path, std::ios::binary);
    in.read(head, sizeof head);
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (std::streamsize i = 0; i < in.gcount(); ++i)
      hash = (hash ^ static_cast<unsigned char>(head[i])) * 0x100000001b3ULL;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    identities.push_back(name + " " + size + " " + (in.gcount() > 0 || size == "0" ? hex : "?"));
  }
  return identities;
}

bool has_shard_extension(const std::string& path) {
  for (const std::string_view suffix : kShardSuffixes) {
    if (path.size() > suffix.size() && std::string_view(path).ends_with(suffix)) return true;
  }
  return false;
}

std::vector<std::string> resolve_shard_list(const std::string& spec) {
  std::vector<std::string> shards;
  std::vector<std::string> missing;  // what is wrong with each, e.g. "shard x.tar does not exist"
  // `where`: " (line N of list file F)" for a listed path, so that the
  // line to mend is named, not only a path the user never typed.
  auto add_if_present = [&](const std::string& path, const std::string& where) {
    if (exists(path)) {
      require_regular_file(path, "shard", where);
      shards.push_back(path);
    } else {
      missing.push_back("shard " + path + where + " " + why_absent(path));
    }
  };
  // A path with a space or a comma in its name would be split into items:
  // one that exists as written is taken whole (other such paths go in a
  // list file, a path a line).
  const bool whole = spec.find_first_of(" ,\t\n\r{") != std::string::npos && exists(spec);
  for (const std::string& item : whole ? std::vector<std::string>{spec} : split_items(spec)) {
    for (const std::string& name : whole ? std::vector<std::string>{spec} : expand_braces(item)) {
      // A name that exists as written is that file, though it holds a glob
      // character ("data[1].tar" read data1.tar, its pattern's match).
      if (!whole && name.find_first_of("*?[") != std::string::npos && !exists(name)) {
        // Freed by glob_matches before the checks, which throw on a link to nothing.
        std::vector<std::string> matched = pattern_matches(name);
        std::vector<std::string> found;
        for (std::string& path : matched) {
          if (is_directory(path)) continue;
          require_regular_file(path, "shard");
          found.push_back(std::move(path));
        }
        // glob(3) sorts by the locale's collation; every rank must agree, so bytes decide.
        std::sort(found.begin(), found.end());
        // Whatever else matched: the folder's shards would be left out of
        // the data set without a word.
        if (glob_read_error != 0)
          unreadable("cannot read " + glob_unread_folder + " for " + name + " (its shards would be left out)",
                     glob_read_error);
        if (found.empty()) missing.push_back("no file matches " + name);
        shards.insert(shards.end(), found.begin(), found.end());
      } else if (is_directory(name)) {
        const std::vector<std::string> found = shards_in_directory(name);
        shards.insert(shards.end(), found.begin(), found.end());
      } else if (exists(name) && !has_shard_extension(name)) {
        require_regular_file(name, "shard or list file");  // before looks_like_archive reads it
        if (looks_like_archive(name)) {
          shards.push_back(name);
        } else {
          for (const ListedPath& listed : paths_in_list_file(name))
            add_if_present(listed.path, " (line " + std::to_string(listed.line) + " of list file " + name + ")");
        }
      } else {
        add_if_present(name, "");
      }
    }
  }
  if (!missing.empty()) {
    const size_t listed = shards.size() + missing.size();
    config_error(missing.front() + " (" + std::to_string(missing.size()) + " of " +
                 std::to_string(listed) + " listed shards are missing)");
  }
  if (shards.empty()) config_error("no shards given ('" + spec + "')");
  return shards;
}

std::vector<RepeatedShard> repeated_shards(const std::vector<std::string>& shards) {
  // A file is its device and inode: every spelling and link of it agrees.
  std::map<std::pair<dev_t, ino_t>, size_t> first_listing;  // -> index in `repeated`
  std::vector<RepeatedShard> repeated;
  for (const std::string& path : shards) {
    struct stat info;
    if (::stat(path.c_str(), &info) != 0) continue;  // gone since it was resolved: the reader names it
    const auto [it, first] = first_listing.try_emplace({info.st_dev, info.st_ino}, repeated.size());
    if (first) {
      repeated.push_back({path, 1});
    } else {
      ++repeated[it->second].listings;
    }
  }
  std::erase_if(repeated, [](const RepeatedShard& shard) { return shard.listings < 2; });
  return repeated;
}

std::string repeated_shards_text(const std::vector<RepeatedShard>& repeated) {
  return repeated.front().path + " " + std::to_string(repeated.front().listings) + " times" +
         (repeated.size() > 1 ? " (and " + std::to_string(repeated.size() - 1) + " more shards more than once)" : "");
}

}  // namespace trainbench
