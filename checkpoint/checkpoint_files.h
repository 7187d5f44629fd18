// STORAGE WRITE. The files of one checkpoint and how they are written,
// committed and read back. A checkpoint of step N under `dir`:
//
//   dir/step_N.tmp/           while it is being written (never loaded)
//     rank_00003_1.bin        rank 3's second file: whole sections, 4096-aligned
//     rank_00003.json         rank 3's FileRecords, for rank 0 to assemble
//   dir/step_N/               after the commit's rename
//     manifest.json           schema, config, world size, every file's size,
//                             xxh64 and sections, library versions
//   dir/latest                "step_N\n": the newest committed checkpoint,
//                             replaced atomically; it is the commit point
//
// Every rank writes its own files (writers in parallel, each file fsynced),
// then rank 0, once every rank has confirmed through the communicator,
// commits: manifest.json written and fsynced, step_N.tmp renamed to step_N
// (an older step_N is swapped out atomically), the parent folder fsynced,
// `latest` replaced atomically, and all but the newest `keep` committed
// checkpoints removed. A crash at any instant leaves `latest` naming a
// complete, verified checkpoint (or no `latest` before the first commit).
// Multi-node runs need `dir` on a filesystem every rank sees.
#pragma once

#include <cerrno>     // is_machine_limit
#include <cstdint>    // int64_t
#include <stdexcept>  // CheckpointError
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // the manifest

#include "checkpoint/state_image.h"  // StateImage, SectionPlacement

namespace trainbench {

// A checkpoint whose every file is a whole image (one rank's, or written
// before 2026-12-04) says v1; one where the ranks wrote slices of the state
// they hold alike says v2, so that a binary that cannot put slices back
// together refuses it by its schema rather than by a size it does not
// expect. Both are read.
inline constexpr const char* kCheckpointSchema = "trainbench.checkpoint/v1";
inline constexpr const char* kSlicedCheckpointSchema = "trainbench.checkpoint/v2";

// A checkpoint that cannot be used: missing, unreadable, corrupt, from
// another schema. what() is one line naming the file (and field or offset).
// environment() is set when the cause is the machine's, not the
// checkpoint's or the user's (out of file descriptors, memory or disk space,
// a temporary directory the user did not name): the CLI exits 3 for it, 2
// otherwise.
class CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& message, bool environment = false)
      : std::runtime_error(message), environment_(environment) {}
  bool environment() const { return environment_; }

 private:
  bool environment_;
};

// Whether a failed open or listing with this errno is the machine's limit
// (ulimit -n, the system's file table, memory) rather than the file's.
inline bool is_machine_limit(int error) { return error == EMFILE || error == ENFILE || error == ENOMEM; }

// Writing or committing failed. disk_full is set for ENOSPC/EDQUOT/EFBIG (a
// file-size limit is a full disk to the writer), so the
// trainer can apply checkpoint.on_full.
class CheckpointWriteError : public std::runtime_error {
 public:
  CheckpointWriteError(const std::string& message, bool disk_full)
      : std::runtime_error(message), disk_full(disk_full) {}
  bool disk_full;
};

// One written file.
struct FileRecord {
  std::string name;  // relative to the checkpoint folder
  int64_t bytes = 0;
  std::string xxh64;  // 16 lower-case hex digits, as xxhsum -H1 prints
  std::vector<SectionPlacement> sections;
  // How it was written: true when O_DIRECT was used. When it was asked for
  // but the filesystem refused it (tmpfs, some network filesystems: EINVAL),
  // the file is written through the page cache instead, direct_io is false
  // and `warning` says so in one line for the run's warnings; otherwise
  // `warning` is empty. Kept in the rank record and the manifest.
  bool direct_io = false;
  std::string warning;
  // A slice of an image every rank holds alike (state replicated by data
  // parallelism, written once per job rather than once per rank): the file
  // is bytes [slice_from, slice_from + bytes) of an image of image_bytes laid
  // out as `sections` say, and each rank writes one slice of it, under the
  // same file index. image_bytes 0: the file is a whole image.
  int64_t slice_from = 0;
  int64_t image_bytes = 0;
};

// What write_rank_files writes of one image: bytes [from, from + bytes), both
// multiples of kImageAlignment and among the image's held bytes; bytes -1 =
// from `from` to the image's end.
struct ImagePart {
  const StateImage* image = nullptr;
  int64_t from = 0;
  int64_t bytes = -1;
  bool slice = false;  // one rank's slice of an image every rank holds alike, recorded as such
};

// Rank `rank`'s slice of an image of `image_bytes` that all `world` ranks
// hold alike: equal 4096-aligned parts in rank order, tiling the image (the
// last ranks' may be empty; the first ranks' are the largest). What the rank
// stages (StateImage's held bytes) and writes of it.
HeldBytes rank_slice(int64_t image_bytes, int rank, int world);
// That slice as a part to write. With one rank, the whole image, not
// recorded as a slice.
ImagePart slice_for_rank(const StateImage& image, int rank, int world);

struct WriteOptions {
  bool direct_io = false;           // O_DIRECT (falls back with a warning where unsupported)
  int64_t block_bytes = 64LL << 20;  // bytes per write call, a multiple of kImageAlignment
};

// "dir/step_N.tmp", "dir/step_N", "rank_00003_1.bin", "rank_00003.json".
// Trailing slashes of dir are dropped; an empty dir is ".".
std::string pending_folder(const std::string& dir, int64_t step);
std::string committed_folder(const std::string& dir, int64_t step);
std::string rank_file_name(int rank, int index);
std::string rank_record_name(int rank);

// Splits sections over `files` files, whole sections each, balancing bytes
// (largest first onto the lightest file); empty files are dropped. Returns
// the sections of each file.
std::vector<std::vector<SectionSpec>> assign_sections_to_files(const std::vector<SectionSpec>& sections,
                                                               int files);

// Creates dir/step_N.tmp (and dir) if missing; an existing leftover
// step_N.tmp from a crashed run is emptied first. Any rank may call it, but
// with a `dir` every rank shares, one rank must empty it before the others
// write (rank 0, then a barrier): emptying races with another rank's files.
void prepare_pending_folder(const std::string& dir, int64_t step);

// Start-up check, before any training: creates dir if missing, then writes,
// fsyncs and removes a probe file in it (permission bits alone do not tell:
// root ignores them and a read-only mount does not show in them). Throws
// CheckpointWriteError "<named> <dir> is not writable: ...".
void check_checkpoint_dir(const std::string& dir, const std::string& named = "checkpoint.dir");

// A file in `dir` under a name no other process has used (host, pid and
// time in it), written and fsynced, for the other ranks to look for: whether
// they all see the folder this rank writes. Returns its path; the caller
// removes it (a crash leaves litter that retention removes, as a write
// probe's). Throws CheckpointWriteError as check_checkpoint_dir.
std::string write_sharing_probe(const std::string& dir, const std::string& host, const std::string& named);

// Writes the image as `folder/name` in block_bytes writes, fsyncs it and
// returns its record (xxh64 over exactly the bytes written, computed on a
// second thread that hashes each block while it is being written, so
// hashing overlaps the I/O; the image must not change meanwhile). The file
// is image.bytes() long, padding included. Throws
// CheckpointWriteError naming the file; the partial file is removed.
// std::invalid_argument when block_bytes is not a positive multiple of
// kImageAlignment, or when the image (a part, below) is not held whole.
FileRecord write_image_file(const std::string& folder, const std::string& name,
                            const StateImage& image, const WriteOptions& options);

// Writes `images` as rank `rank`'s files, one thread per image, then its
// record file (fsynced), then fsyncs the folder: everything rank 0 needs to
// commit. On failure it waits for every thread, removes the files it wrote
// and rethrows the first failure. Crash point `write` fires once the first
// image is half written (the step is taken from the folder's name step_N.tmp).
std::vector<FileRecord> write_rank_files(const std::string& folder, int rank,
                                         const std::vector<const StateImage*>& images,
                                         const WriteOptions& options);
// The same with parts of images: a slice is recorded as one (FileRecord).
std::vector<FileRecord> write_rank_files(const std::string& folder, int rank, const std::vector<ImagePart>& parts,
                                         const WriteOptions& options);

struct CommitRequest {
  std::string dir;
  int64_t step = 0;
  int world_size = 1;
  int64_t keep = 2;           // committed checkpoints retained; 0 = all
  nlohmann::json config;      // the run's resolved config
  nlohmann::json versions;    // library versions (trainbench, CUDA, NCCL, MPI, ...)
  nlohmann::json extra;       // anything else the trainer records (model, zero, ...)
  // A run resumed from a checkpoint of this folder: its step (-1 for a
  // fresh run), and the steps this run has committed here before this one.
  // A committed step above the resumed one that this run did not write is
  // the run it left's (a rewind): retention leaves it and does not count it
  // towards `keep` (kept, it kept another trajectory's step in place of
  // this run's own, and a resume hint could name it).
  int64_t resumed_step = -1;
  std::vector<int64_t> own_steps;
};

// Empty when `slices` (file `index` of every rank, in rank order; an empty
// record where a rank has none) are slices of one image laid out alike that
// tile it exactly; else what is wrong, in one line. The commit checks it, so
// that a checkpoint a resume could not put back together is never committed,
// and so does the resume.
std::string slices_problem(std::vector<FileRecord> slices, size_t index);

// Rank 0, after every rank's write_rank_files returned: the commit sequence
// described above. Returns the manifest it wrote. Throws CheckpointWriteError;
// when `latest` itself cannot be written, the step's folder is back at
// step_N.tmp (and one it replaced back at step_N) first. Two failures come
// after the commit point, and the step is committed all the same: `latest`
// replaced but checkpoint.dir not fsynced after it (retention then keeps
// every older checkpoint: a power loss may bring the old `latest` back),
// and retention failing (an old folder that cannot be removed). Their
// reasons go to `warnings` when given (the trainer warns and trains on),
// else the first is thrown.
struct CommitWarnings {
  std::string durability;  // `latest` replaced, its folder not fsynced
  std::string retention;   // an old checkpoint could not be removed
};
nlohmann::json commit_checkpoint(const CommitRequest& request, CommitWarnings* warnings = nullptr);

// Removes dir/step_N.tmp (a checkpoint given up, e.g. disk full with
// checkpoint.on_full: skip). No error when it is already gone.
void abandon_pending(const std::string& dir, int64_t step);

// Committed checkpoints under dir (folders step_N with a manifest.json), by step.
struct CommittedCheckpoint {
  int64_t step = 0;
  std::string folder;
};
std::vector<CommittedCheckpoint> list_committed(const std::string& dir);

// `spec` is "latest" (dir/latest), a checkpoint folder (step_N), or a
// checkpoint dir holding `latest`. Returns the step folder. Throws
// CheckpointError naming what is missing.
std::string resolve_checkpoint(const std::string& spec, const std::string& dir);

// Parses and checks folder/manifest.json (schema, fields). Throws CheckpointError.
nlohmann::json read_manifest(const std::string& folder);

// What a resume can use instead of a checkpoint that cannot be (a step
// deleted by hand, a damaged manifest or file): the newest committed
// checkpoint in `dir` whose manifest reads, among those before `before` (a
// step_N folder; "" = all). Its folder, or "" when there is none. Throws
// CheckpointError when `dir` cannot be listed.
std::string newest_readable_checkpoint(const std::string& dir, const std::string& before = "");

// Which slices of an image the ranks hold alike a rank reads.
enum class SliceReading {
  kAll,  // every rank's: the image comes back whole from storage
  // Its own alone, the other ranks' bytes left for the caller to fill from
  // those ranks (a resume passes each slice on from the rank that read it,
  // as Megatron's fully parallel load does): a job reads the state once,
  // not once per rank.
  kOwn,
};

// One rank's slice of a LoadedRank's image, as the manifest records it.
struct LoadedSlice {
  size_t image = 0;  // index into LoadedRank::images
  int rank = 0;      // the rank that wrote it
  int64_t from = 0;  // its bytes in the image: [from, from + bytes)
  int64_t bytes = 0;
  std::string xxh64;  // its file's checksum
};

// A rank's files read back and verified against the manifest's sizes and
// checksums. Throws CheckpointError naming the file, the expected and actual
// xxh64 and the sections it holds. A file that is a slice of an image comes
// back as the whole image, whose slices (the files of the same index of
// every rank) must tile it; which of them are read is `reading`'s.
class LoadedRank {
 public:
  // The section's bytes, or nullptr when there is none by that name.
  const unsigned char* section(const std::string& name, int64_t* bytes = nullptr) const;
  std::vector<StateImage> images;  // one per file, in manifest order
  // The non-empty slices of the images that are sliced, image by image in
  // rank order: the same list on every rank of a job that read one
  // checkpoint. Under SliceReading::kOwn the other ranks' bytes are unread.
  std::vector<LoadedSlice> slices;
  int64_t bytes_read = 0;  // what this rank read from the checkpoint's files
};
LoadedRank read_rank_files(const std::string& folder, const nlohmann::json& manifest, int rank);
// The same, staging the images in memory from `allocator` (pinned memory
// for a device restore).
LoadedRank read_rank_files(const std::string& folder, const nlohmann::json& manifest, int rank,
                           StagingAllocator allocator, SliceReading reading = SliceReading::kAll);

// Test-only fault injection: when TRAINBENCH_TEST_CRASH_AT is `phase` or
// `phase@step` for this step, the process kills itself with SIGKILL, as a
// node failure would. Phases: copy, write, before_rename, after_rename.
// The variable is read once per process.
void crash_point(const char* phase, int64_t step);

}  // namespace trainbench
