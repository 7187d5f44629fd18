// The read half of a checkpoint: which folder to load, its manifest checked
// field by field, and a rank's files read back and verified byte for byte.
#include <fcntl.h>     // open, posix_fadvise
#include <sys/stat.h>  // fstat
#include <unistd.h>    // pread, close

#include <algorithm>   // std::min, std::sort
#include <cerrno>      // errno
#include <cstring>     // std::strerror
#include <filesystem>  // exists, is_directory
#include <memory>      // std::unique_ptr for the XXH64 state
#include <system_error>
#include <vector>      // list_committed

#include <xxhash.h>  // XXH64 streaming

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_io.h"  // read_small_file, file_record_from_json, xxh64_hex

namespace trainbench {

namespace io = checkpoint_io;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kReadBlock = 64LL << 20;

// A manifest's file and section names go into error messages (and paths):
// a newline in one split the one-line error in two. trainbench writes none.
bool has_control_character(const std::string& name) {
  for (const char c : name)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

bool exists_quietly(const std::string& path) {
  std::error_code ignored;
  return fs::exists(path, ignored);
}

// The newest committed checkpoint in `dir`, "" where there is none or
// `dir` cannot be listed.
std::string newest_readable_checkpoint_quietly(const std::string& dir) {
  try {
    return newest_readable_checkpoint(dir);
  } catch (const std::exception&) {
    return "";
  }
}

// What a resume can use when `dir`'s latest cannot be (a step folder
// deleted by hand, a damaged pointer or manifest): said only when it is there.
std::string newest_committed_hint(const std::string& dir) {
  std::string folder;
  try {
    folder = newest_readable_checkpoint(dir);
  } catch (const std::exception&) {
    return "";  // the folder cannot be listed: nothing to say of it
  }
  return folder.empty() ? "; " + dir + " holds no other committed checkpoint"
                        : "; the newest committed checkpoint there is " + fs::path(folder).filename().string() +
                              ": --resume " + folder;
}

// `dir`/latest -> dir/step_N, checked to hold a manifest. `what` names dir
// for the messages ("checkpoint.dir /x").
std::string follow_latest(const std::string& dir, const std::string& what) {
  const std::string latest = dir + "/latest";
  if (!exists_quietly(latest)) {
    // Removed by hand, or lost: the committed folders may still be there.
    std::string newest;
    try {
      newest = newest_readable_checkpoint(dir);
    } catch (const std::exception&) {
    }
    if (!newest.empty())
      throw CheckpointError(what + " has no " + latest + " pointer, but holds committed checkpoints; the newest is " +
                            fs::path(newest).filename().string() + ": --resume " + newest);
    throw CheckpointError(what + " has no committed checkpoint (no " + latest + ")");
  }
  // `latest` is "step_N\n"; anything else (a damaged or hand-edited file)
  // is quoted escaped and cut short, so the message stays one line.
  std::error_code size_error;
  const auto size = fs::file_size(latest, size_error);
  if (!size_error && size > 4096)
    throw CheckpointError("checkpoint pointer " + latest + ": " + std::to_string(size) +
                          " bytes is not a checkpoint folder name (step_N)");
  std::string name = io::read_small_file(latest, "checkpoint pointer");
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  const io::StepName parsed = io::parse_step_name(name);
  if (parsed.step < 0 || !parsed.suffix.empty() || name.find('/') != std::string::npos)
    throw CheckpointError("checkpoint pointer " + latest + ": \"" + io::printable(name) +
                          "\" is not a checkpoint folder name (step_N)" + newest_committed_hint(dir));
  const std::string folder = dir + "/" + name;
  if (!exists_quietly(folder + "/manifest.json")) {
    // Where the filesystem cannot exchange two folders (NFS, Lustre), a
    // commit over an existing step_N sets it aside as step_N.old first; a
    // crash before the new one took its name leaves it there, whole.
    const std::string aside = exists_quietly(folder + ".old/manifest.json")
                                  ? "; " + folder + ".old holds it, set aside by a commit cut short (a filesystem "
                                    "without RENAME_EXCHANGE): rename it to " + name + " to resume from it"
                                  : "";
    throw CheckpointError("checkpoint pointer " + latest + " names " + name + ", but " + folder +
                          "/manifest.json is missing" + aside + newest_committed_hint(dir));
  }
  return folder;
}

// Field checks with messages that name the file and the field's path.
class ManifestFields {
 public:
  explicit ManifestFields(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw CheckpointError("checkpoint manifest " + path_ + ": " + what);
  }
  const nlohmann::json& field(const nlohmann::json& object, const std::string& key, const std::string& where) const {
    const auto found = object.find(key);
    if (found == object.end()) fail("field " + where + " is missing");
    return *found;
  }
  int64_t integer(const nlohmann::json& object, const std::string& key, const std::string& where,
                  int64_t minimum) const {
    const nlohmann::json& value = field(object, key, where);
    if (!value.is_number_integer()) fail("field " + where + " is not an integer");
    const int64_t number = value.get<int64_t>();
    if (number < minimum) fail("field " + where + " is " + std::to_string(number) + ", below " + std::to_string(minimum));
    return number;
  }
  const std::string& string(const nlohmann::json& object, const std::string& key, const std::string& where) const {
    const nlohmann::json& value = field(object, key, where);
    if (!value.is_string()) fail("field " + where + " is not a string");
    return value.get_ref<const std::string&>();
  }
  const nlohmann::json& array(const nlohmann::json& object, const std::string& key, const std::string& where) const {
    const nlohmann::json& value = field(object, key, where);
    if (!value.is_array()) fail("field " + where + " is not an array");
    return value;
  }
  void object(const nlohmann::json& value, const std::string& where) const {
    if (!value.is_object()) fail("field " + where + " is not an object");
  }

 private:
  std::string path_;
};

bool is_xxh64_text(const std::string& text) {
  if (text.size() != 16) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string section_names(const FileRecord& record) {
  std::string names;
  for (const SectionPlacement& s : record.sections) names += (names.empty() ? "" : ", ") + io::printable(s.name);
  return names.empty() ? "no sections" : "sections " + names;
}

// A file in place of a checkpoint file is a regular file of the size the
// manifest gives, checked before anything is allocated for that size: a FIFO
// in a data file's place held the resume in open() for good; a folder or a
// link to /dev/zero read as a file of the wrong size; one that cannot be
// stat'ed (gone) is refused here too.
void check_file(const std::string& path, const FileRecord& record) {
  struct stat on_disk {};
  if (::stat(path.c_str(), &on_disk) != 0) {
    const int error = errno;
    throw CheckpointError("checkpoint file " + path + ": cannot open it: " + std::strerror(error),
                          is_machine_limit(error));
  }
  if (!S_ISREG(on_disk.st_mode)) throw CheckpointError("checkpoint file " + path + ": not a regular file");
  if (on_disk.st_size != record.bytes)
    throw CheckpointError("checkpoint file " + path + ": " + std::to_string(on_disk.st_size) +
                          " bytes but the manifest says " + std::to_string(record.bytes));
}

// A fresh image laid out as the manifest's sections say, `image_bytes` long
// (the file's, or for a slice the whole image's). Sizes from the manifest
// are checked before anything is allocated for them: a damaged size must not
// ask for terabytes.
StateImage laid_out_image(const std::string& path, const FileRecord& record, int64_t image_bytes,
                          const StagingAllocator& allocator) {
  std::vector<SectionSpec> specs;
  for (const SectionPlacement& s : record.sections) specs.push_back({s.name, s.bytes});
  int64_t laid_out = 0;
  for (const SectionSpec& spec : specs) {
    if (spec.bytes < 0 || spec.bytes > image_bytes - laid_out)
      throw CheckpointError("checkpoint file " + path + ": section " + io::printable(spec.name) + " of " +
                            std::to_string(spec.bytes) + " bytes does not fit in the " +
                            std::to_string(image_bytes) + " bytes the manifest gives " +
                            (record.image_bytes > 0 ? "the image it is a slice of" : "the file"));
    laid_out += aligned_to_image(spec.bytes);
  }
  StateImage image = [&] {
    try {
      return StateImage(specs, allocator);
    } catch (const std::invalid_argument& e) {
      throw CheckpointError("checkpoint file " + path + ": " + io::printable(e.what(), 200));
    }
  }();
  for (size_t i = 0; i < specs.size(); ++i)
    if (image.sections()[i].offset != record.sections[i].offset)
      throw CheckpointError("checkpoint file " + path + ": section " + specs[i].name + " at offset " +
                            std::to_string(record.sections[i].offset) + " in the manifest, but this layout puts it at " +
                            std::to_string(image.sections()[i].offset));
  if (image.bytes() != image_bytes)
    throw CheckpointError("checkpoint file " + path + ": the manifest says " + std::to_string(image_bytes) +
                          " bytes, but its sections take " + std::to_string(image.bytes()));
  return image;
}

// Reads the file's record.bytes into `into` and checks its checksum.
void read_verified(const std::string& path, const FileRecord& record, unsigned char* into) {
  // Not blocking, should it have become a FIFO since the check; fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    throw CheckpointError("checkpoint file " + path + ": cannot open it: " + std::strerror(error),
                          is_machine_limit(error));
  }
  auto fail = [&](const std::string& what) {
    ::close(fd);  // read-only: nothing its close could lose
    throw CheckpointError("checkpoint file " + path + ": " + what);
  };
  struct stat status {};
  if (::fstat(fd, &status) != 0) fail(std::string("cannot stat it: ") + std::strerror(errno));
  if (!S_ISREG(status.st_mode)) fail("not a regular file");
  if (status.st_size != record.bytes)
    fail(std::to_string(status.st_size) + " bytes but the manifest says " + std::to_string(record.bytes));
  // Only a hint for the page cache's read-ahead; its failure changes nothing.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state(XXH64_createState(), &XXH64_freeState);
  if (!state) throw std::bad_alloc();
  XXH64_reset(state.get(), 0);
  int64_t offset = 0;
  while (offset < record.bytes) {
    const size_t chunk = static_cast<size_t>(std::min(kReadBlock, record.bytes - offset));
    const ssize_t n = ::pread(fd, into + offset, chunk, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read failed at offset " + std::to_string(offset) + ": " + std::strerror(errno));
    if (n == 0) fail("ends at offset " + std::to_string(offset) + ", the manifest says " + std::to_string(record.bytes) + " bytes");
    XXH64_update(state.get(), into + offset, static_cast<size_t>(n));
    offset += n;
  }
  if (::close(fd) != 0) throw CheckpointError("checkpoint file " + path + ": cannot close it: " + std::strerror(errno));
  const std::string actual = io::xxh64_hex(XXH64_digest(state.get()));
  if (actual != record.xxh64)
    throw CheckpointError("checkpoint file " + path + ": xxh64 " + actual + " but the manifest says " + record.xxh64 +
                          " (holds " + section_names(record) + ")");
}

// Reads one file into a fresh image laid out as the manifest says and
// checks its size and checksum.
StateImage read_and_verify(const std::string& path, const FileRecord& record, const StagingAllocator& allocator) {
  check_file(path, record);
  StateImage image = laid_out_image(path, record, record.bytes, allocator);
  read_verified(path, record, image.data());
  return image;
}

FileRecord record_of(const std::string& folder, const nlohmann::json& entry, int rank) {
  try {
    return io::file_record_from_json(entry);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint manifest " + folder + "/manifest.json: rank " + std::to_string(rank) + ": " +
                          io::json_error_text(e));
  }
}

// The image whose slice `mine` (file `index` of rank `rank`) is, laid out
// whole: the files of that index, which must be slices of one image and tile
// it, are listed in `listed` (image `image`), and read into it: every rank's
// (kAll), or `mine` alone (kOwn).
StateImage read_sliced_image(const std::string& folder, const nlohmann::json& ranks, size_t index, int rank,
                             const FileRecord& mine, const StagingAllocator& allocator, SliceReading reading,
                             size_t image, std::vector<LoadedSlice>& listed, int64_t& bytes_read) {
  std::vector<FileRecord> slices;
  for (size_t q = 0; q < ranks.size(); ++q) {
    const nlohmann::json& files = ranks[q].at("files");
    slices.push_back(static_cast<int>(q) == rank ? mine
                     : index < files.size()     ? record_of(folder, files[index], static_cast<int>(q))
                                                : FileRecord{});
  }
  const std::string problem = slices_problem(slices, index);
  if (!problem.empty()) throw CheckpointError("checkpoint " + folder + ": " + problem);
  const auto read_here = [&](size_t q) { return reading == SliceReading::kAll || static_cast<int>(q) == rank; };
  for (size_t q = 0; q < slices.size(); ++q)
    if (read_here(q)) check_file(folder + "/" + slices[q].name, slices[q]);
  StateImage state = laid_out_image(folder + "/" + mine.name, mine, mine.image_bytes, allocator);
  for (size_t q = 0; q < slices.size(); ++q) {
    const FileRecord& slice = slices[q];
    if (slice.bytes == 0) continue;  // the last ranks' of a small image: nothing to read or pass on
    listed.push_back({image, static_cast<int>(q), slice.slice_from, slice.bytes, slice.xxh64});
    if (!read_here(q)) continue;
    read_verified(folder + "/" + slice.name, slice, state.at(slice.slice_from, slice.bytes));
    bytes_read += slice.bytes;
  }
  return state;
}

}  // namespace

std::string slices_problem(std::vector<FileRecord> slices, size_t index) {
  // The layout to hold the others to: the first slice's (a whole or missing
  // file at a rank is then named as such, the slices' layout with it).
  const auto sliced = std::find_if(slices.begin(), slices.end(), [](const FileRecord& r) { return r.image_bytes > 0; });
  if (sliced == slices.end()) return "";
  const FileRecord first = *sliced;  // a copy: `slices` is sorted below
  for (size_t q = 0; q < slices.size(); ++q) {
    const FileRecord& slice = slices[q];
    bool alike = slice.image_bytes > 0 && slice.image_bytes == first.image_bytes &&
                 slice.sections.size() == first.sections.size();
    for (size_t i = 0; alike && i < slice.sections.size(); ++i)
      alike = slice.sections[i].name == first.sections[i].name &&
              slice.sections[i].offset == first.sections[i].offset &&
              slice.sections[i].bytes == first.sections[i].bytes;
    if (!alike)
      return "file " + std::to_string(index) + " of every rank should be a slice of one image (" + first.name +
             ": " + std::to_string(first.image_bytes) + " bytes, " + section_names(first) + "), and rank " +
             std::to_string(q) + "'s " + (slice.name.empty() ? "is missing" : slice.name + " is not");
  }
  std::sort(slices.begin(), slices.end(),
            [](const FileRecord& a, const FileRecord& b) { return a.slice_from < b.slice_from; });
  int64_t covered = 0;
  for (const FileRecord& slice : slices) {
    if (slice.slice_from != covered || slice.bytes > first.image_bytes - covered)
      return "the slices of image " + std::to_string(index) + " do not tile its " + std::to_string(first.image_bytes) +
             " bytes (" + slice.name + " starts at " + std::to_string(slice.slice_from) + ", where " +
             std::to_string(covered) + " was due)";
    covered += slice.bytes;
  }
  if (covered != first.image_bytes)
    return "the slices of image " + std::to_string(index) + " cover " + std::to_string(covered) + " of its " +
           std::to_string(first.image_bytes) + " bytes";
  return "";
}

std::string resolve_checkpoint(const std::string& spec, const std::string& dir) {
  if (spec == "latest") {
    if (dir.empty()) throw CheckpointError("--resume latest: checkpoint.dir is not set");
    const std::string clean = io::without_trailing_slashes(dir);
    return follow_latest(clean, "checkpoint.dir " + clean);
  }
  // Lexically normal: the checks below go by the folder's name, which
  // "DIR/step_4.tmp/." hid (a folder being written resumed as committed).
  const std::string path = io::without_trailing_slashes(fs::path(spec).lexically_normal().string());
  if (path.empty()) throw CheckpointError("--resume: an empty checkpoint path");
  // step_N.tmp may hold a manifest already (rank 0 writes it before the
  // rename that commits): only a committed folder is a checkpoint.
  const io::StepName parsed = io::parse_step_name(fs::path(path).filename().string());
  // The hint names what a resume can take there: the folder itself only
  // where its `latest` leads somewhere (it pointed the user at a folder
  // with nothing committed, which then failed as "neither a checkpoint").
  if (parsed.step >= 0 && !parsed.suffix.empty()) {
    const std::string parent =
        fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : std::string(".");
    std::string hint;
    try {
      hint = "; --resume " + parent + " resumes from the newest committed one, " +
             fs::path(follow_latest(parent, parent)).filename().string();
    } catch (const std::exception&) {
      hint = newest_committed_hint(parent);
    }
    throw CheckpointError("checkpoint " + path + " is not committed (a " + parsed.suffix +
                          " folder is one being written, set aside or left by a crash)" + hint);
  }
  if (exists_quietly(path + "/manifest.json")) return path;
  if (exists_quietly(path + "/latest")) return follow_latest(path, "checkpoint.dir " + path);
  std::error_code error;
  if (!fs::exists(path, error)) throw CheckpointError("checkpoint " + path + " does not exist");
  if (!fs::is_directory(path, error)) {
    // DIR/latest is the file naming the newest checkpoint: DIR is what resumes from it.
    if (fs::path(path).filename() == "latest")
      throw CheckpointError("checkpoint " + path + " is the file naming the newest checkpoint: give its folder, --resume " +
                            fs::path(path).parent_path().string());
    throw CheckpointError("checkpoint " + path + " is not a folder");
  }
  // A checkpoint.dir whose `latest` was lost still holds its step_N
  // folders: named as --resume latest names them.
  if (!newest_readable_checkpoint_quietly(path).empty()) return follow_latest(path, "checkpoint.dir " + path);
  throw CheckpointError("checkpoint " + path + " is neither a checkpoint (no " + path +
                        "/manifest.json) nor a checkpoint.dir (no " + path + "/latest)");
}

std::string newest_readable_checkpoint(const std::string& dir, const std::string& before) {
  const int64_t before_step = before.empty() ? -1 : io::step_of_folder(before);
  const std::vector<CommittedCheckpoint> committed = list_committed(dir);
  for (auto c = committed.rbegin(); c != committed.rend(); ++c) {
    if (before_step >= 0 && c->step >= before_step) continue;
    try {
      (void)read_manifest(c->folder);
    } catch (const CheckpointError&) {
      continue;  // damaged too
    }
    return c->folder;
  }
  return "";
}

nlohmann::json read_manifest(const std::string& folder) {
  const std::string path = io::without_trailing_slashes(folder) + "/manifest.json";
  const std::string text = io::read_small_file(path, "checkpoint manifest");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError("checkpoint manifest " + path + ": not valid JSON (" + io::json_error_text(e) + ")");
  }
  const ManifestFields check(path);
  check.object(manifest, "(top level)");
  const std::string& schema = check.string(manifest, "schema", "schema");
  if (schema != kCheckpointSchema && schema != kSlicedCheckpointSchema)
    check.fail("schema \"" + io::printable(schema) + "\", expected \"" + kCheckpointSchema + "\" or \"" +
               kSlicedCheckpointSchema + "\"");
  const int64_t step = check.integer(manifest, "step", "step", 0);
  // The folder's name says which step it is (`latest` and retention go by
  // it): a manifest of another step in it is not this checkpoint.
  const int64_t folder_step = io::step_of_folder(io::without_trailing_slashes(folder));
  if (folder_step >= 0 && step != folder_step)
    check.fail("field step is " + std::to_string(step) + " but the folder is step_" + std::to_string(folder_step));
  const int64_t world_size = check.integer(manifest, "world_size", "world_size", 1);
  check.string(manifest, "created", "created");
  check.field(manifest, "config", "config");
  check.object(check.field(manifest, "versions", "versions"), "versions");
  const int64_t total_bytes = check.integer(manifest, "total_bytes", "total_bytes", 0);
  const nlohmann::json& ranks = check.array(manifest, "ranks", "ranks");
  if (static_cast<int64_t>(ranks.size()) != world_size)
    check.fail("field ranks has " + std::to_string(ranks.size()) + " entries for world_size " + std::to_string(world_size));
  int64_t sum = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const std::string rank_where = "ranks[" + std::to_string(r) + "]";
    check.object(ranks[r], rank_where);
    if (check.integer(ranks[r], "rank", rank_where + ".rank", 0) != static_cast<int64_t>(r))
      check.fail("field " + rank_where + ".rank is not " + std::to_string(r));
    const nlohmann::json& files = check.array(ranks[r], "files", rank_where + ".files");
    for (size_t f = 0; f < files.size(); ++f) {
      const std::string where = rank_where + ".files[" + std::to_string(f) + "]";
      check.object(files[f], where);
      const std::string& name = check.string(files[f], "name", where + ".name");
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
          has_control_character(name))
        check.fail("field " + where + ".name \"" + io::printable(name) + "\" is not a file name in the checkpoint folder");
      const int64_t bytes = check.integer(files[f], "bytes", where + ".bytes", 0);
      if (bytes % kImageAlignment != 0)
        check.fail("field " + where + ".bytes " + std::to_string(bytes) + " is not a multiple of " +
                   std::to_string(kImageAlignment));
      sum += bytes;
      if (!is_xxh64_text(check.string(files[f], "xxh64", where + ".xxh64")))
        check.fail("field " + where + ".xxh64 is not 16 lower-case hex digits");
      if (const auto slice = files[f].find("slice"); slice != files[f].end()) {
        check.object(*slice, where + ".slice");
        const int64_t from = check.integer(*slice, "from", where + ".slice.from", 0);
        const int64_t of = check.integer(*slice, "of", where + ".slice.of", 1);
        if (from % kImageAlignment != 0 || of % kImageAlignment != 0 || from > of || bytes > of - from)
          check.fail("field " + where + ".slice: bytes [" + std::to_string(from) + ", +" + std::to_string(bytes) +
                     ") are not an aligned part of an image of " + std::to_string(of));
      }
      const nlohmann::json& sections = check.array(files[f], "sections", where + ".sections");
      for (size_t s = 0; s < sections.size(); ++s) {
        const std::string section_where = where + ".sections[" + std::to_string(s) + "]";
        check.object(sections[s], section_where);
        const std::string& section = check.string(sections[s], "name", section_where + ".name");
        if (section.empty() || has_control_character(section))
          check.fail("field " + section_where + ".name \"" + io::printable(section) + "\" is not a section name");
        check.integer(sections[s], "offset", section_where + ".offset", 0);
        check.integer(sections[s], "bytes", section_where + ".bytes", 0);
      }
    }
  }
  if (sum != total_bytes)
    check.fail("field total_bytes is " + std::to_string(total_bytes) + " but the files add up to " + std::to_string(sum));
  return manifest;
}

LoadedRank read_rank_files(const std::string& folder, const nlohmann::json& manifest, int rank) {
  return read_rank_files(folder, manifest, rank, StagingAllocator{});
}

LoadedRank read_rank_files(const std::string& folder, const nlohmann::json& manifest, int rank,
                           StagingAllocator allocator, SliceReading reading) {
  const std::string clean = io::without_trailing_slashes(folder);
  const nlohmann::json& ranks = manifest.at("ranks");
  if (rank < 0 || rank >= static_cast<int>(ranks.size()))
    throw CheckpointError("checkpoint " + clean + " has " + std::to_string(ranks.size()) + " rank(s), not rank " +
                          std::to_string(rank));
  LoadedRank loaded;
  const nlohmann::json& files = ranks[static_cast<size_t>(rank)].at("files");
  for (size_t index = 0; index < files.size(); ++index) {
    const FileRecord record = record_of(clean, files[index], rank);
    if (record.image_bytes > 0) {
      loaded.images.push_back(read_sliced_image(clean, ranks, index, rank, record, allocator, reading,
                                                loaded.images.size(), loaded.slices, loaded.bytes_read));
    } else {
      loaded.images.push_back(read_and_verify(clean + "/" + record.name, record, allocator));
      loaded.bytes_read += record.bytes;
    }
  }
  return loaded;
}

const unsigned char* LoadedRank::section(const std::string& name, int64_t* bytes) const {
  for (const StateImage& image : images) {
    const int64_t index = image.find(name);
    if (index < 0) continue;
    if (bytes != nullptr) *bytes = image.sections()[static_cast<size_t>(index)].bytes;
    // A file of empty sections alone (a ZeRO-1 rank whose shard is all
    // padding: its adam_m and adam_v) stages no memory, and its data is
    // null: present all the same, so not "none by that name" (such a
    // committed checkpoint could never be resumed).
    static const unsigned char kEmpty = 0;
    const unsigned char* data = image.section_data(static_cast<size_t>(index));
    return data != nullptr ? data : &kEmpty;
  }
  if (bytes != nullptr) *bytes = 0;
  return nullptr;
}

}  // namespace trainbench
