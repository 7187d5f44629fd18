#include "checkpoint/checkpoint_io.h"

#include <fcntl.h>   // open
#include <sys/stat.h>  // stat: read_small_file reads regular files only
#include <unistd.h>  // write, fsync, close, unlink

#include <cerrno>      // errno, ENOSPC, EDQUOT, EFBIG
#include <cinttypes>   // PRIx64
#include <cstdio>      // std::snprintf
#include <cstring>     // std::strerror
#include <filesystem>  // remove_all
#include <fstream>     // read_small_file
#include <string_view>
#include <sstream>
#include <system_error>

#include <xxhash.h>  // XXH_versionNumber

namespace trainbench::checkpoint_io {

void fail_write(const std::string& what, const std::string& path, int error) {
  throw CheckpointWriteError(what + " " + path + ": " + std::strerror(error),
                             error == ENOSPC || error == EDQUOT || error == EFBIG);
}

void fsync_directory(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_write("cannot open checkpoint folder", folder, errno);
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);  // read-only: nothing its close could lose
  if (status != 0) fail_write("cannot fsync checkpoint folder", folder, error);
}

void write_synced_file(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_write("cannot create checkpoint file", path, errno);
  auto abandon = [&](const char* what, int error, bool close_it) {
    if (close_it) ::close(fd);
    ::unlink(path.c_str());
    fail_write(what, path, error);
  };
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) abandon("cannot write checkpoint file", errno, true);
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) abandon("cannot fsync checkpoint file", errno, true);
  if (::close(fd) != 0) abandon("cannot close checkpoint file", errno, false);
}

std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

void remove_folder(const std::string& folder) {
  std::error_code error;
  std::filesystem::remove_all(folder, error);
  if (error) fail_write("cannot remove checkpoint folder", folder, error.value());
}

std::string xxh64_hex(uint64_t digest) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, digest);
  return text;
}

std::string xxhash_version() {
  const unsigned number = XXH_versionNumber();
  return std::to_string(number / 10000) + "." + std::to_string(number / 100 % 100) + "." +
         std::to_string(number % 100);
}

int64_t step_of_folder(const std::string& folder) {
  std::string name = folder.substr(folder.find_last_of('/') + 1);  // npos + 1 == 0: a bare name
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

StepName parse_step_name(const std::string& name) {
  for (const char* suffix : {".tmp.interrupted", ".tmp", ".old"}) {
    const std::string_view ending(suffix);
    if (name.size() > ending.size() && name.ends_with(ending)) {
      const int64_t step = step_of_folder(name.substr(0, name.size() - ending.size()));
      return step < 0 ? StepName{} : StepName{step, suffix};
    }
  }
  return {step_of_folder(name), ""};
}

std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string text = e.what();
  const size_t tag_end = text.rfind("] ", text.find(' '));  // the tag is the first word
  return text.starts_with("[json.exception.") && tag_end != std::string::npos ? text.substr(tag_end + 2) : text;
}

std::string printable(const std::string& text, size_t limit) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      out += text[i];
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    }
  }
  if (text.size() > limit) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string read_small_file(const std::string& path, const std::string& what) {
  // A folder reads as empty ("" is not a step name), a FIFO blocks forever.
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode))
    throw CheckpointError(what + " " + path + ": not a regular file");
  if (status.st_size > kMaxSmallFileBytes)
    throw CheckpointError(what + " " + path + ": " + std::to_string(status.st_size) +
                          " bytes, more than the " + std::to_string(kMaxSmallFileBytes >> 20) +
                          " MiB such a file can be");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    throw CheckpointError(what + " " + path + ": cannot read it: " + std::strerror(error), is_machine_limit(error));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw CheckpointError(what + " " + path + ": read failed: " + std::strerror(errno));
  return contents.str();
}

nlohmann::json file_record_to_json(const FileRecord& record) {
  nlohmann::json sections = nlohmann::json::array();
  for (const SectionPlacement& s : record.sections)
    sections.push_back({{"name", s.name}, {"offset", s.offset}, {"bytes", s.bytes}});
  nlohmann::json json = {{"name", record.name},
                         {"bytes", record.bytes},
                         {"xxh64", record.xxh64},
                         {"direct_io", record.direct_io},
                         {"sections", sections}};
  if (record.image_bytes > 0) json["slice"] = {{"from", record.slice_from}, {"of", record.image_bytes}};
  return json;
}

FileRecord file_record_from_json(const nlohmann::json& json) {
  FileRecord record;
  record.name = json.at("name").get<std::string>();
  record.bytes = json.at("bytes").get<int64_t>();
  record.xxh64 = json.at("xxh64").get<std::string>();
  record.direct_io = json.value("direct_io", false);
  for (const nlohmann::json& s : json.at("sections"))
    record.sections.push_back(
        {s.at("name").get<std::string>(), s.at("offset").get<int64_t>(), s.at("bytes").get<int64_t>()});
  if (const auto slice = json.find("slice"); slice != json.end()) {
    record.slice_from = slice->at("from").get<int64_t>();
    record.image_bytes = slice->at("of").get<int64_t>();
  }
  return record;
}

}  // namespace trainbench::checkpoint_io
