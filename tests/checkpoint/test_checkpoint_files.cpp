// The checkpoint files: written and read back (buffered and O_DIRECT), the
// checksum against xxhsum, the commit (manifest, rename, latest, retention,
// re-commit of a step), and every way a checkpoint can be refused.
#include <gtest/gtest.h>

#include <sys/stat.h>  // mkdir, mkfifo
#include <fcntl.h>     // open: the O_DIRECT probe
#include <unistd.h>    // truncate

#include <cerrno>   // ENOENT, EIO
#include <chrono>   // an hour-old leftover
#include <cstdio>
#include <cstring>  // std::strerror, std::memcpy
#include <filesystem>
#include <fstream>
#include <optional>  // a fault armed for part of a test
#include <regex>
#include <string>
#include <utility>  // std::pair
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/atomic_file.h"  // write_file_atomically: its temporary's name; writes through links
#include "checkpoint/checkpoint_files.h"
#include "tests/checkpoint/checkpoint_test_state.h"
#include "tests/support/descriptors_exhausted.h"
#include "tests/support/failing_syscalls.h"
#include "tests/support/mounted_filesystem.h"  // a leftover folder that cannot be removed
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;
using testing::compare_state;
using testing::make_state;
using testing::pointers;
using testing::read_whole_file;
using testing::write_and_commit;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// what() of the CheckpointError `body` throws, or a failure.
template <typename Body>
std::string checkpoint_error(Body body) {
  try {
    body();
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    return message;
  }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class CheckpointFiles : public ::testing::Test {
 protected:
  testing::TempDir temp_{"trainbench_ckpt"};
  const std::string dir_ = temp_.path() + "/ckpt";
};

TEST(CheckpointNames, FoldersAndFiles) {
  EXPECT_EQ(pending_folder("/x/ckpt/", 7), "/x/ckpt/step_7.tmp");
  EXPECT_EQ(committed_folder("/x/ckpt", 12), "/x/ckpt/step_12");
  EXPECT_EQ(rank_file_name(3, 1), "rank_00003_1.bin");
  EXPECT_EQ(rank_record_name(3), "rank_00003.json");
}

void round_trip(const std::string& dir, bool direct_io) {
  WriteOptions options;
  options.direct_io = direct_io;
  options.block_bytes = 8192;  // several writes per file, the last one short
  prepare_pending_folder(dir, 5);
  const std::vector<StateImage> images = make_state(5, 0, 2, 16);
  const std::vector<FileRecord> records = write_rank_files(pending_folder(dir, 5), 0, pointers(images), options);
  ASSERT_EQ(records.size(), 2u);
  // Whether this folder's filesystem takes O_DIRECT (ext4 does, tmpfs not):
  // where it does, the files must have been written with it (only a line was
  // printed, and a writer that always fell back passed).
  const std::string probe = pending_folder(dir, 5) + "/o_direct_probe";
  const int probe_fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  const bool takes_o_direct = probe_fd >= 0;
  if (takes_o_direct) ::close(probe_fd);
  ::unlink(probe.c_str());
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].name, rank_file_name(0, static_cast<int>(i)));
    EXPECT_EQ(records[i].bytes, images[i].bytes());
    EXPECT_EQ(fs::file_size(pending_folder(dir, 5) + "/" + records[i].name), static_cast<uintmax_t>(images[i].bytes()));
    EXPECT_EQ(records[i].xxh64.size(), 16u);
    if (direct_io) {
      std::printf("[   INFO   ] %s: %s\n", records[i].name.c_str(),
                  records[i].direct_io ? "written with O_DIRECT" : records[i].warning.c_str());
      EXPECT_EQ(records[i].direct_io, takes_o_direct) << records[i].warning;
      EXPECT_EQ(records[i].warning.empty(), takes_o_direct) << records[i].warning;
    } else {
      EXPECT_FALSE(records[i].direct_io);
    }
  }
  EXPECT_TRUE(fs::exists(pending_folder(dir, 5) + "/" + rank_record_name(0)));

  CommitRequest request;
  request.dir = dir;
  request.step = 5;
  commit_checkpoint(request);
  const std::string folder = resolve_checkpoint("latest", dir);
  EXPECT_EQ(folder, committed_folder(dir, 5));
  const nlohmann::json manifest = read_manifest(folder);
  const LoadedRank loaded = read_rank_files(folder, manifest, 0);
  ASSERT_EQ(loaded.images.size(), 2u);
  EXPECT_EQ(compare_state(loaded, 5, 0, 16), "");
  EXPECT_EQ(loaded.section("no such section"), nullptr);
}

TEST_F(CheckpointFiles, RoundTripBuffered) { round_trip(dir_, false); }

// State the ranks hold alike is written once per job: each rank writes its
// slice of each image (file i of every rank), and each rank reads every
// slice back into the whole image. 3 ranks over images of 3 and 2 pages:
// the last rank's slice of the second is empty.
TEST_F(CheckpointFiles, SlicesOfImagesHeldAlikeTileThemAndReadBackWhole) {
  constexpr int kRanks = 3;
  prepare_pending_folder(dir_, 4);
  const std::vector<StateImage> images = make_state(4, 0, 2);  // the same bytes on every rank
  ASSERT_EQ(images.size(), 2u);
  std::vector<int64_t> written(images.size(), 0);
  for (int rank = 0; rank < kRanks; ++rank) {
    std::vector<ImagePart> parts;
    for (const StateImage& image : images) parts.push_back(slice_for_rank(image, rank, kRanks));
    const std::vector<FileRecord> records = write_rank_files(pending_folder(dir_, 4), rank, parts, WriteOptions{});
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_EQ(records[i].image_bytes, images[i].bytes());
      EXPECT_EQ(records[i].slice_from, written[i]) << "rank " << rank << " file " << i;
      written[i] += records[i].bytes;
    }
  }
  for (size_t i = 0; i < images.size(); ++i) EXPECT_EQ(written[i], images[i].bytes()) << "file " << i;
  EXPECT_EQ(fs::file_size(pending_folder(dir_, 4) + "/" + rank_file_name(2, 1)), 0u) << "past the image's end";
  CommitRequest request;
  request.dir = dir_;
  request.step = 4;
  request.world_size = kRanks;
  const nlohmann::json manifest = commit_checkpoint(request);
  EXPECT_EQ(manifest["total_bytes"].get<int64_t>(), images[0].bytes() + images[1].bytes()) << "one copy";
  EXPECT_EQ(manifest["schema"], kSlicedCheckpointSchema) << "refused by a binary that reads no slices";
  const std::string folder = committed_folder(dir_, 4);
  for (int rank = 0; rank < kRanks; ++rank)
    EXPECT_EQ(compare_state(read_rank_files(folder, read_manifest(folder), rank), 4, 0), "") << "rank " << rank;
  // Every rank lists the same slices (the non-empty ones), in image then rank order.
  const LoadedRank read_by_1 = read_rank_files(folder, read_manifest(folder), 1);
  ASSERT_EQ(read_by_1.slices.size(), 5u) << "3 of the first image, 2 of the second (rank 2's is empty)";
  for (size_t k = 0; k < read_by_1.slices.size(); ++k) {
    const LoadedSlice& slice = read_by_1.slices[k];
    EXPECT_EQ(slice.image, k < 3 ? 0u : 1u);
    EXPECT_EQ(slice.rank, static_cast<int>(k < 3 ? k : k - 3));
    const ImagePart expected = slice_for_rank(images[slice.image], slice.rank, kRanks);
    EXPECT_EQ(slice.from, expected.from) << "slice " << k;
    EXPECT_EQ(slice.bytes, expected.bytes) << "slice " << k;
    EXPECT_EQ(slice.xxh64.size(), 16u);
  }
  // One rank's slice damaged: every rank's read of that image fails, naming it.
  const std::string damaged = folder + "/" + rank_file_name(1, 0);
  {
    std::fstream file(damaged, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(10);
    file.put('\x5a');
  }
  for (int rank = 0; rank < kRanks; ++rank)
    EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, read_manifest(folder), rank); }),
                         "checkpoint file " + damaged + ": xxh64"))
        << "rank " << rank;
  // Reading its own slices alone (a resume, which passes them on between the
  // ranks), a rank neither reads nor needs the others': only rank 1 fails,
  // and the others' own bytes are the state's.
  for (int rank = 0; rank < kRanks; ++rank) {
    const auto own = [&] { return read_rank_files(folder, read_manifest(folder), rank, {}, SliceReading::kOwn); };
    if (rank == 1) {
      EXPECT_TRUE(contains(checkpoint_error(own), "checkpoint file " + damaged + ": xxh64"));
      continue;
    }
    const LoadedRank loaded = own();
    ASSERT_EQ(loaded.slices.size(), read_by_1.slices.size()) << "rank " << rank << " lists every slice";
    for (size_t k = 0; k < loaded.slices.size(); ++k) {
      const LoadedSlice &mine = loaded.slices[k], &whole = read_by_1.slices[k];
      EXPECT_TRUE(mine.image == whole.image && mine.rank == whole.rank && mine.from == whole.from &&
                  mine.bytes == whole.bytes && mine.xxh64 == whole.xxh64)
          << "rank " << rank << " slice " << k << ": the list the ranks compare before passing slices on";
    }
    for (const LoadedSlice& slice : loaded.slices) {
      if (slice.rank != rank) continue;
      EXPECT_EQ(std::memcmp(loaded.images[slice.image].at(slice.from, slice.bytes),
                            images[slice.image].at(slice.from, slice.bytes), static_cast<size_t>(slice.bytes)),
                0)
          << "rank " << rank << "'s slice of image " << slice.image;
    }
  }
  // A slice missing from the manifest's tiling is refused, not read as zeros.
  nlohmann::json holed = read_manifest(folder);
  holed["ranks"][1]["files"][0]["slice"]["from"] = holed["ranks"][1]["files"][0]["slice"]["from"].get<int64_t>() + 4096;
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, holed, 0); }), "do not tile"));
  // A manifest whose slice is not an aligned part of its image is refused on reading.
  const std::string text = read_whole_file(folder + "/manifest.json");
  for (const auto& [from, of] : std::vector<std::pair<int64_t, int64_t>>{{100, 8192}, {8192, 4096}, {4096, 4096}}) {
    nlohmann::json bad = nlohmann::json::parse(text);
    bad["ranks"][0]["files"][0]["slice"] = {{"from", from}, {"of", of}};
    std::ofstream(folder + "/manifest.json") << bad.dump();
    EXPECT_TRUE(contains(checkpoint_error([&] { read_manifest(folder); }), ".slice")) << from << " of " << of;
  }
  std::ofstream(folder + "/manifest.json") << text;
}

// A rank stages only its slice of an image held alike (StateImage's held
// bytes): the file it writes from there is the one it wrote from the whole
// image, same bytes and checksum; a part outside what it holds is refused.
TEST_F(CheckpointFiles, ASliceWrittenFromOnlyItsHeldBytesIsTheSameFile) {
  constexpr int kRanks = 3;
  const std::vector<StateImage> images = make_state(4, 0, 1, 5);  // 12 pages: 4 a rank, cutting sections
  const StateImage& whole = images[0];
  prepare_pending_folder(dir_, 4);  // from the whole image
  prepare_pending_folder(dir_, 5);  // from the held slices
  for (int rank = 0; rank < kRanks; ++rank) {
    const HeldBytes slice = rank_slice(whole.bytes(), rank, kRanks);
    std::vector<SectionSpec> specs;
    for (const SectionPlacement& s : whole.sections()) specs.push_back({s.name, s.bytes});
    StateImage held(specs, {}, slice);
    if (slice.bytes > 0) std::memcpy(held.data(), whole.at(slice.from, slice.bytes), static_cast<size_t>(slice.bytes));
    const FileRecord from_whole =
        write_rank_files(pending_folder(dir_, 4), rank, {slice_for_rank(whole, rank, kRanks)}, WriteOptions{})[0];
    const FileRecord from_held =
        write_rank_files(pending_folder(dir_, 5), rank, {slice_for_rank(held, rank, kRanks)}, WriteOptions{})[0];
    EXPECT_EQ(from_held.bytes, from_whole.bytes) << "rank " << rank;
    EXPECT_EQ(from_held.slice_from, from_whole.slice_from) << "rank " << rank;
    EXPECT_EQ(from_held.xxh64, from_whole.xxh64) << "rank " << rank;
    EXPECT_EQ(read_whole_file(pending_folder(dir_, 5) + "/" + from_held.name),
              read_whole_file(pending_folder(dir_, 4) + "/" + from_whole.name));
    const ImagePart other = slice_for_rank(held, (rank + 1) % kRanks, kRanks);
    if (other.bytes > 0) {
      EXPECT_THROW(write_rank_files(pending_folder(dir_, 5), rank, {other}, WriteOptions{}), std::invalid_argument)
          << "rank " << rank << " holds no bytes of another rank's slice";
    }
  }
}

// The commit checks that the slices of each image put it back together: a
// checkpoint a resume could not read is never committed (`latest` stays).
TEST_F(CheckpointFiles, SlicesThatDoNotTileTheirImageAreNotCommitted) {
  const std::vector<StateImage> images = make_state(6, 0, 1);
  // Rank 1 writes rank 0's slice again (overlapping), an empty one (a hole),
  // or a slice of an image rank 0 wrote whole.
  for (const std::string rank_1 : {"overlapping", "hole", "beside a whole image"}) {
    prepare_pending_folder(dir_, 6);
    for (int rank = 0; rank < 2; ++rank) {
      const ImagePart part = rank == 0 ? (rank_1 == "beside a whole image" ? ImagePart{&images[0]}
                                                                          : slice_for_rank(images[0], 0, 2))
                             : rank_1 == "overlapping" ? slice_for_rank(images[0], 0, 2)
                             : rank_1 == "hole"        ? ImagePart{&images[0], 0, 0, true}
                                                       : slice_for_rank(images[0], 1, 2);
      write_rank_files(pending_folder(dir_, 6), rank, std::vector<ImagePart>{part}, WriteOptions{});
    }
    CommitRequest request;
    request.dir = dir_;
    request.step = 6;
    request.world_size = 2;
    try {
      commit_checkpoint(request);
      ADD_FAILURE() << "committed";
    } catch (const CheckpointWriteError& e) {
      EXPECT_TRUE(contains(e.what(), rank_1 == "beside a whole image"
                                         ? "checkpoint step 6: rank 1's rank_00001_0.bin is a slice of an image rank "
                                           "0 wrote whole"
                                         : "checkpoint step 6: the slices of image 0 "))
          << rank_1 << ": " << e.what();
    }
    EXPECT_FALSE(fs::exists(dir_ + "/latest"));
    EXPECT_FALSE(fs::exists(committed_folder(dir_, 6)));
  }
}

// A file whose sections are all empty (a ZeRO-1 rank whose optimizer shard
// is all padding, its adam_m and adam_v in a file of their own) reads back
// as those sections, 0 bytes each: they were "missing", so the committed
// checkpoint could not be resumed.
TEST_F(CheckpointFiles, AFileOfEmptySectionsReadsBackAsThem) {
  prepare_pending_folder(dir_, 3);
  std::vector<StateImage> images;
  images.emplace_back(std::vector<SectionSpec>{{"master_fp32", 64}});
  images.emplace_back(std::vector<SectionSpec>{{"adam_m", 0}, {"adam_v", 0}});
  ASSERT_EQ(images[1].bytes(), 0);
  write_rank_files(pending_folder(dir_, 3), 0, pointers(images), WriteOptions{});
  CommitRequest request;
  request.dir = dir_;
  request.step = 3;
  commit_checkpoint(request);
  const std::string folder = committed_folder(dir_, 3);
  const LoadedRank loaded = read_rank_files(folder, read_manifest(folder), 0);
  for (const char* name : {"adam_m", "adam_v"}) {
    int64_t bytes = -1;
    EXPECT_NE(loaded.section(name, &bytes), nullptr) << name;
    EXPECT_EQ(bytes, 0) << name;
  }
  EXPECT_EQ(loaded.section("adam_w"), nullptr);
}

TEST_F(CheckpointFiles, RoundTripDirectIo) { round_trip(dir_, true); }

TEST_F(CheckpointFiles, ChecksumIsWhatXxhsumPrints) {
  ASSERT_EQ(std::system("command -v xxhsum >/dev/null"), 0)
      << "xxhsum (Debian package xxhash) is missing: run scripts/setup.sh";
  fs::create_directories(dir_);
  const std::vector<StateImage> images = make_state(1, 0, 1, 50);
  for (int64_t block : {int64_t{4096}, int64_t{64} << 20}) {
    const FileRecord record = write_image_file(dir_, "image.bin", images[0], {.direct_io = false, .block_bytes = block});
    const testing::CommandResult xxhsum = testing::run_command("xxhsum -H1 " + dir_ + "/image.bin");
    ASSERT_EQ(xxhsum.exit_code, 0) << xxhsum.err;
    EXPECT_EQ(xxhsum.out.substr(0, 16), record.xxh64) << "block bytes " << block;
  }
  // An empty image and the known XXH64 of no bytes (seed 0).
  const StateImage empty({});
  EXPECT_EQ(write_image_file(dir_, "empty.bin", empty, {}).xxh64, "ef46db3751d8e999");
}

TEST_F(CheckpointFiles, BlockBytesMustBeAlignedAndPositive) {
  fs::create_directories(dir_);
  const StateImage image({{"a", 10}});
  EXPECT_THROW(write_image_file(dir_, "a.bin", image, {.direct_io = false, .block_bytes = 5000}), std::invalid_argument);
  EXPECT_THROW(write_image_file(dir_, "a.bin", image, {.direct_io = false, .block_bytes = 0}), std::invalid_argument);
}

// A result path that is a link (latest.json -> runs/7.json) is written
// through: the link stays a link and its target gets the new text, as a
// shell's `>` would do; the rename used to replace the link with a file.
TEST_F(CheckpointFiles, AnAtomicWriteThroughALinkReplacesItsTarget) {
  fs::create_directories(dir_ + "/runs");
  write_text(dir_ + "/runs/7.json", "old");
  fs::create_symlink("runs/7.json", dir_ + "/latest.json");      // relative to the link's folder
  fs::create_symlink(dir_ + "/latest.json", dir_ + "/chain.json");  // absolute, to a link
  EXPECT_EQ(replaced_file(dir_ + "/chain.json"), dir_ + "/runs/7.json");
  write_file_atomically(dir_ + "/chain.json", "new");
  EXPECT_TRUE(fs::is_symlink(dir_ + "/latest.json"));
  EXPECT_TRUE(fs::is_symlink(dir_ + "/chain.json"));
  EXPECT_EQ(read_whole_file(dir_ + "/runs/7.json"), "new");
  EXPECT_EQ(fs::directory_iterator(dir_ + "/runs")->path().filename(), "7.json") << "no temporary file left";
  // A dangling link names the file to create.
  fs::create_symlink("runs/8.json", dir_ + "/next.json");
  write_file_atomically(dir_ + "/next.json", "eight");
  EXPECT_EQ(read_whole_file(dir_ + "/runs/8.json"), "eight");
  EXPECT_TRUE(fs::is_symlink(dir_ + "/next.json"));
  // A plain file is itself; a loop of links is refused, naming the path.
  EXPECT_EQ(replaced_file(dir_ + "/runs/8.json"), dir_ + "/runs/8.json");
  fs::create_symlink("loop-b", dir_ + "/loop-a");
  fs::create_symlink("loop-a", dir_ + "/loop-b");
  try {
    write_file_atomically(dir_ + "/loop-a", "x");
    FAIL() << "expected an AtomicWriteError";
  } catch (const AtomicWriteError& e) {
    EXPECT_TRUE(contains(e.what(), dir_ + "/loop-a: Too many levels of symbolic links")) << e.what();
  }
}

TEST_F(CheckpointFiles, AFailedWriteNamesTheFileAndLeavesNothing) {
  const StateImage image({{"a", 10}});
  const std::string missing = dir_ + "/not_created";
  try {
    write_image_file(missing, "a.bin", image, {});
    FAIL() << "expected a CheckpointWriteError";
  } catch (const CheckpointWriteError& e) {
    EXPECT_TRUE(contains(e.what(), missing + "/a.bin")) << e.what();
    EXPECT_FALSE(e.disk_full);
  }
}

TEST_F(CheckpointFiles, CommitWritesManifestAndLatestAndKeepsTheNewestTwo) {
  for (int64_t step : {10, 20, 30, 40}) write_and_commit(dir_, step, 2);
  const std::vector<CommittedCheckpoint> kept = list_committed(dir_);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].step, 30);
  EXPECT_EQ(kept[1].step, 40);
  EXPECT_EQ(kept[1].folder, dir_ + "/step_40");
  EXPECT_EQ(read_whole_file(dir_ + "/latest"), "step_40\n");
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "latest" || name == "step_30" || name == "step_40") << "left behind: " << name;
  }

  const nlohmann::json manifest = read_manifest(dir_ + "/step_40");
  EXPECT_EQ(manifest["schema"], kCheckpointSchema);
  EXPECT_EQ(manifest["step"], 40);
  EXPECT_EQ(manifest["world_size"], 1);
  EXPECT_TRUE(std::regex_match(manifest["created"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << manifest["created"];
  EXPECT_EQ(manifest["config"]["model"]["n_layers"], 2);
  EXPECT_EQ(manifest["versions"]["trainbench"], "test");
  EXPECT_TRUE(std::regex_match(manifest["versions"]["xxhash"].get<std::string>(), std::regex(R"(\d+\.\d+\.\d+)")));
  EXPECT_EQ(manifest["extra"]["note"], "test");
  ASSERT_EQ(manifest["ranks"].size(), 1u);
  EXPECT_EQ(manifest["ranks"][0]["rank"], 0);
  int64_t total = 0;
  for (const nlohmann::json& file : manifest["ranks"][0]["files"]) {
    total += file["bytes"].get<int64_t>();
    EXPECT_EQ(fs::file_size(dir_ + "/step_40/" + file["name"].get<std::string>()), file["bytes"].get<uintmax_t>());
    EXPECT_FALSE(file["sections"].empty());
  }
  EXPECT_EQ(manifest["total_bytes"], total);
  EXPECT_EQ(compare_state(read_rank_files(dir_ + "/step_40", manifest, 0), 40, 0), "");
}

TEST_F(CheckpointFiles, KeepZeroKeepsEverything) {
  for (int64_t step : {1, 2, 3}) write_and_commit(dir_, step, 0);
  EXPECT_EQ(list_committed(dir_).size(), 3u);
}

TEST_F(CheckpointFiles, RetentionRemovesStaleLeftoversUpToTheStepOnly) {
  write_and_commit(dir_, 10);
  fs::create_directories(dir_ + "/step_5.tmp");      // a crashed write of an older step
  write_text(dir_ + "/step_5.tmp/rank_00000_0.bin", "junk");
  fs::create_directories(dir_ + "/step_7.old");      // a removal cut short
  fs::create_directories(dir_ + "/step_8");          // a folder without a manifest
  fs::create_directories(dir_ + "/step_50.tmp");     // a later step, maybe being written now
  fs::create_directories(dir_ + "/step_6.tmp.interrupted/x");  // an interrupted run's, its removal cut short
  fs::create_directories(dir_ + "/step_60.tmp.interrupted");
  write_text(dir_ + "/latest.tmp.99999", "step_9\n");          // a `latest` write a kill cut short
  write_text(dir_ + "/.trainbench-write-probe-99999", "probe\n");  // a start-up probe, likewise
  write_text(dir_ + "/.trainbench-write-probe-99998", "probe\n");  // another run's, being made now
  const auto an_hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(dir_ + "/latest.tmp.99999", an_hour_ago);
  fs::last_write_time(dir_ + "/.trainbench-write-probe-99999", an_hour_ago);
  write_text(dir_ + "/notes.txt", "the user's\n");
  write_and_commit(dir_, 20);
  EXPECT_FALSE(fs::exists(dir_ + "/latest.tmp.99999"));
  EXPECT_FALSE(fs::exists(dir_ + "/.trainbench-write-probe-99999"));
  EXPECT_TRUE(fs::exists(dir_ + "/.trainbench-write-probe-99998")) << "a fresh one may be another run's";
  EXPECT_TRUE(fs::exists(dir_ + "/notes.txt"));
  EXPECT_FALSE(fs::exists(dir_ + "/step_5.tmp"));
  EXPECT_FALSE(fs::exists(dir_ + "/step_6.tmp.interrupted"));
  EXPECT_TRUE(fs::exists(dir_ + "/step_60.tmp.interrupted"));
  EXPECT_FALSE(fs::exists(dir_ + "/step_7.old"));
  EXPECT_FALSE(fs::exists(dir_ + "/step_8"));
  EXPECT_TRUE(fs::exists(dir_ + "/step_50.tmp")) << "a later step is not the commit's to remove";
  EXPECT_TRUE(fs::exists(dir_ + "/step_10/manifest.json"));
}

// A leftover that cannot be removed (a tmpfs mounted on it: EBUSY, as an
// immutable file's EPERM) is reported, and the rest is removed all the same:
// it used to stop every later removal, commit after commit, so that the
// checkpoints past `keep` piled up until the disk was full.
TEST_F(CheckpointFiles, ALeftoverThatCannotBeRemovedDoesNotStopTheRestOfRetention) {
  for (int64_t step : {10, 20}) write_and_commit(dir_, step, 0);
  testing::MountedFilesystem stuck(dir_ + "/step_5.old", "tmpfs", "size=64k");
  if (!stuck.mounted()) GTEST_SKIP() << stuck.why_not();
  try {
    write_and_commit(dir_, 30, 1);
    ADD_FAILURE() << "the folder that could not be removed was not reported";
  } catch (const CheckpointWriteError& e) {
    EXPECT_TRUE(contains(e.what(), "is committed, but removing an old one failed")) << e.what();
    EXPECT_TRUE(contains(e.what(), "step_5.old")) << e.what();
  }
  EXPECT_EQ(read_whole_file(dir_ + "/latest"), "step_30\n");
  EXPECT_FALSE(fs::exists(dir_ + "/step_10")) << "keep=1: removed despite the stuck leftover";
  EXPECT_FALSE(fs::exists(dir_ + "/step_20")) << "keep=1: removed despite the stuck leftover";
  EXPECT_TRUE(fs::exists(dir_ + "/step_30/manifest.json"));
}

// A resumed run checkpoints `step` again, with other contents (rank 1's
// bytes stand in for them): written, and the request that commits it.
CommitRequest write_again(const std::string& dir, int64_t step) {
  prepare_pending_folder(dir, step);
  const std::vector<StateImage> images = make_state(step, 1, 2);
  write_rank_files(pending_folder(dir, step), 0, pointers(images), {});
  CommitRequest request;
  request.dir = dir;
  request.step = step;
  return request;
}

// A rewind: the folder holds steps 4, 8 and 12; a run resumes from step 4
// and checkpoints every 3 steps with keep 2. Its own steps 6 and 9 are the
// two kept; the left run's 8 and 12 stay, uncounted (8 was kept and this
// run's 6 removed: another trajectory's step in place of its own), and one
// this run commits again (12) counts as its own.
TEST_F(CheckpointFiles, RetentionAfterARewindKeepsTheRunsOwnStepsAndLeavesTheLeftRunsAlone) {
  for (int64_t step : {4, 8, 12}) write_and_commit(dir_, step, 0);
  std::vector<int64_t> own;
  for (int64_t step : {6, 9}) {
    CommitRequest request = write_again(dir_, step);
    request.keep = 2;
    request.resumed_step = 4;
    request.own_steps = own;
    commit_checkpoint(request);
    own.push_back(step);
  }
  EXPECT_FALSE(fs::exists(committed_folder(dir_, 4))) << "past keep=2 of this run's own";
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 6) + "/manifest.json")) << "this run's own, kept";
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 9) + "/manifest.json"));
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 8) + "/manifest.json")) << "the left run's: left alone";
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 12) + "/manifest.json"));
  CommitRequest again = write_again(dir_, 12);
  again.keep = 2;
  again.resumed_step = 4;
  again.own_steps = own;
  commit_checkpoint(again);
  EXPECT_FALSE(fs::exists(committed_folder(dir_, 6))) << "12 is this run's now: 9 and 12 kept";
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 9) + "/manifest.json"));
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 8) + "/manifest.json"));
  EXPECT_EQ(resolve_checkpoint("latest", dir_), committed_folder(dir_, 12));
}

TEST_F(CheckpointFiles, RecommittingAStepSwapsInTheNewOne) {
  write_and_commit(dir_, 10);
  commit_checkpoint(write_again(dir_, 10));
  EXPECT_FALSE(fs::exists(pending_folder(dir_, 10))) << "the swapped-out checkpoint is removed";
  const std::string folder = resolve_checkpoint("latest", dir_);
  EXPECT_EQ(folder, dir_ + "/step_10");
  EXPECT_EQ(compare_state(read_rank_files(folder, read_manifest(folder), 0), 10, 1), "");
  EXPECT_EQ(list_committed(dir_).size(), 1u);
}

// `latest` cannot be written (a full disk had room for the step's files and
// manifest, not for latest.tmp; here its fsync fails, ENOSPC): the step
// was left renamed to step_N, uncommitted, taking the room, and listed as
// the newest committed checkpoint (a failure message named it as intact).
// Now it goes back to step_N.tmp, and a step it replaced comes back.
TEST_F(CheckpointFiles, ALatestThatCannotBeWrittenLeavesTheStepPending) {
  write_and_commit(dir_, 10);
  std::optional<testing::FailingFileFsync> full;
  full.emplace(ENOSPC, [](const std::string& file) { return file.find("/latest.tmp.") != std::string::npos; });
  EXPECT_THROW(write_and_commit(dir_, 20), CheckpointWriteError);
  EXPECT_TRUE(fs::exists(pending_folder(dir_, 20) + "/manifest.json"));
  EXPECT_FALSE(fs::exists(committed_folder(dir_, 20)));
  ASSERT_EQ(list_committed(dir_).size(), 1u);
  EXPECT_EQ(list_committed(dir_)[0].step, 10);
  EXPECT_EQ(read_whole_file(dir_ + "/latest"), "step_10\n");

  // Re-committing step 10 (a resumed run): the old step_10 comes back.
  const CommitRequest request = write_again(dir_, 10);
  EXPECT_THROW(commit_checkpoint(request), CheckpointWriteError);
  const std::string folder = resolve_checkpoint("latest", dir_);
  EXPECT_EQ(compare_state(read_rank_files(folder, read_manifest(folder), 0), 10, 0), "") << "the old one is back";
  EXPECT_EQ(compare_state(read_rank_files(pending_folder(dir_, 10), read_manifest(pending_folder(dir_, 10)), 0), 10, 1),
            "");
  full.reset();
  EXPECT_EQ(commit_checkpoint(request)["step"], 10);
  EXPECT_EQ(compare_state(read_rank_files(folder, read_manifest(folder), 0), 10, 1), "") << "then the new one";
}

// checkpoint.dir's fsync after `latest` was replaced fails (EIO): `latest`
// names step 20 already, so the step must stay committed — undoing it would
// leave `latest` naming a folder that is gone — and say it is not durable,
// keeping step 10 (what a power loss may bring `latest` back to).
TEST_F(CheckpointFiles, AFolderFsyncFailureAfterLatestKeepsTheStepCommitted) {
  write_and_commit(dir_, 10);
  CommitRequest request = write_again(dir_, 20);
  request.keep = 1;
  CommitWarnings warnings;
  {
    testing::FailingDirectoryFsync fault(EIO, [&](const std::string& folder) {
      return folder == dir_ && read_whole_file(dir_ + "/latest") == "step_20\n";
    });
    EXPECT_EQ(commit_checkpoint(request, &warnings)["step"], 20);
    EXPECT_EQ(fault.failed(), 1);
  }
  EXPECT_TRUE(contains(warnings.durability, "checkpoint step 20 is committed, but cannot fsync directory " + dir_))
      << warnings.durability;
  EXPECT_TRUE(contains(warnings.durability, "older checkpoints are kept")) << warnings.durability;
  EXPECT_EQ(warnings.retention, "");
  EXPECT_EQ(resolve_checkpoint("latest", dir_), committed_folder(dir_, 20));
  EXPECT_EQ(compare_state(read_rank_files(committed_folder(dir_, 20), read_manifest(committed_folder(dir_, 20)), 0), 20,
                          1),
            "");
  EXPECT_TRUE(fs::exists(committed_folder(dir_, 10) + "/manifest.json")) << "keep=1, but step 10 is kept";

  // Without a place for warnings, the caller hears of it as an error.
  const CommitRequest again = write_again(dir_, 30);
  testing::FailingDirectoryFsync fault(EIO, [&](const std::string& folder) {
    return folder == dir_ && read_whole_file(dir_ + "/latest") == "step_30\n";
  });
  EXPECT_THROW(commit_checkpoint(again), CheckpointWriteError);
  EXPECT_EQ(resolve_checkpoint("latest", dir_), committed_folder(dir_, 30));
}

// checkpoint.dir's fsync right after the rename fails, before `latest` is
// written: the step is not committed, and its folder goes back to pending
// (left as step_20 it read as committed to a listing, and the failure's own
// words called it the intact previous checkpoint). `latest` and step 10
// stay; the next commit of step 20 succeeds.
TEST_F(CheckpointFiles, AFolderFsyncFailureBeforeLatestUndoesTheRename) {
  write_and_commit(dir_, 10);
  const CommitRequest request = write_again(dir_, 20);
  {
    testing::FailingDirectoryFsync fault(EIO, [&](const std::string& folder) {
      return folder == dir_ && fs::exists(committed_folder(dir_, 20));
    });
    EXPECT_THROW(commit_checkpoint(request), CheckpointWriteError);
    EXPECT_EQ(fault.failed(), 1);
  }
  EXPECT_FALSE(fs::exists(committed_folder(dir_, 20))) << "an uncommitted step_20 was left in place";
  EXPECT_TRUE(fs::exists(pending_folder(dir_, 20) + "/manifest.json"));
  EXPECT_EQ(resolve_checkpoint("latest", dir_), committed_folder(dir_, 10));
  EXPECT_EQ(commit_checkpoint(request)["step"], 20);
  EXPECT_EQ(resolve_checkpoint("latest", dir_), committed_folder(dir_, 20));
}

TEST_F(CheckpointFiles, AFlippedByteIsRefusedNamingTheFileAndItsSections) {
  write_and_commit(dir_, 3);
  const std::string folder = dir_ + "/step_3";
  const nlohmann::json manifest = read_manifest(folder);
  const nlohmann::json& file = manifest["ranks"][0]["files"][1];
  const std::string path = folder + "/" + file["name"].get<std::string>();
  {
    std::fstream data(path, std::ios::in | std::ios::out | std::ios::binary);
    const int64_t offset = file["sections"][0]["offset"].get<int64_t>() + 17;
    data.seekg(offset);
    const char byte = static_cast<char>(data.get());
    data.seekp(offset);
    data.put(static_cast<char>(byte ^ 0x01));
  }
  const std::string message = checkpoint_error([&] { read_rank_files(folder, manifest, 0); });
  EXPECT_TRUE(contains(message, "checkpoint file " + path + ": xxh64 ")) << message;
  EXPECT_TRUE(contains(message, "but the manifest says " + file["xxh64"].get<std::string>())) << message;
  std::string sections;
  for (const nlohmann::json& s : file["sections"]) sections += (sections.empty() ? "" : ", ") + s["name"].get<std::string>();
  EXPECT_TRUE(contains(message, "(holds sections " + sections + ")")) << message;
}

TEST_F(CheckpointFiles, ATruncatedFileIsRefused) {
  write_and_commit(dir_, 3);
  const std::string folder = dir_ + "/step_3";
  const nlohmann::json manifest = read_manifest(folder);
  const std::string path = folder + "/" + manifest["ranks"][0]["files"][0]["name"].get<std::string>();
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  const std::string message = checkpoint_error([&] { read_rank_files(folder, manifest, 0); });
  EXPECT_TRUE(contains(message, path + ": 4096 bytes but the manifest says")) << message;
  fs::remove(path);
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, manifest, 0); }), path)) << "a missing file";
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, manifest, 1); }), "not rank 1"));
  // Not a file at all: a FIFO held the resume in open() for good, a folder
  // and a link to /dev/zero were "4096 bytes" and "0 bytes" of a file.
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, manifest, 0); }), path + ": not a regular file"));
  fs::remove(path);
  fs::create_directory(path);
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, manifest, 0); }), path + ": not a regular file"));
  fs::remove(path);
  fs::create_symlink("/dev/zero", path);
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, manifest, 0); }), path + ": not a regular file"));
}

// A file gone, its manifest entry claiming 64 TiB: "cannot open it", not
// an allocation of the claimed size first (out of memory, exit 3).
TEST_F(CheckpointFiles, AMissingFileIsNamedBeforeItsSizeIsAllocated) {
  write_and_commit(dir_, 3);
  const std::string folder = dir_ + "/step_3";
  nlohmann::json manifest = read_manifest(folder);
  nlohmann::json& file = manifest["ranks"][0]["files"][0];
  nlohmann::json& last = file["sections"].back();
  const int64_t claimed = int64_t{1} << 46;
  last["bytes"] = claimed;
  file["bytes"] = last["offset"].get<int64_t>() + claimed;
  const std::string path = folder + "/" + file["name"].get<std::string>();
  fs::remove(path);
  const std::string message = checkpoint_error([&] { read_rank_files(folder, manifest, 0); });
  EXPECT_EQ(message, "checkpoint file " + path + ": cannot open it: " + std::strerror(ENOENT));
}

TEST_F(CheckpointFiles, AMissingRankRecordStopsTheCommit) {
  write_and_commit(dir_, 1);
  prepare_pending_folder(dir_, 2);
  const std::vector<StateImage> images = make_state(2, 0, 1);
  write_rank_files(pending_folder(dir_, 2), 0, pointers(images), {});
  CommitRequest request;
  request.dir = dir_;
  request.step = 2;
  request.world_size = 2;  // rank 1 never wrote
  try {
    commit_checkpoint(request);
    FAIL() << "expected a CheckpointWriteError";
  } catch (const CheckpointWriteError& e) {
    EXPECT_TRUE(contains(e.what(), pending_folder(dir_, 2) + "/rank_00001.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 1")) << e.what();
    EXPECT_FALSE(e.disk_full);
  }
  EXPECT_FALSE(fs::exists(dir_ + "/step_2"));
  EXPECT_EQ(read_whole_file(dir_ + "/latest"), "step_1\n");
  abandon_pending(dir_, 2);
  EXPECT_FALSE(fs::exists(pending_folder(dir_, 2)));
  abandon_pending(dir_, 2);  // already gone: no error
}

TEST_F(CheckpointFiles, TwoRanksShareOneCheckpoint) {
  prepare_pending_folder(dir_, 4);
  const std::vector<StateImage> rank0 = make_state(4, 0, 2);
  const std::vector<StateImage> rank1 = make_state(4, 1, 3);
  write_rank_files(pending_folder(dir_, 4), 0, pointers(rank0), {});
  write_rank_files(pending_folder(dir_, 4), 1, pointers(rank1), {});
  CommitRequest request;
  request.dir = dir_;
  request.step = 4;
  request.world_size = 2;
  const nlohmann::json written = commit_checkpoint(request);
  const nlohmann::json manifest = read_manifest(dir_ + "/step_4");
  EXPECT_EQ(manifest, written);
  EXPECT_EQ(manifest["ranks"][1]["files"].size(), 3u);
  EXPECT_EQ(compare_state(read_rank_files(dir_ + "/step_4", manifest, 0), 4, 0), "");
  EXPECT_EQ(compare_state(read_rank_files(dir_ + "/step_4", manifest, 1), 4, 1), "");
}

TEST_F(CheckpointFiles, ResolveFindsTheCheckpointOrSaysWhatIsMissing) {
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint.dir " + dir_ + " has no committed checkpoint (no " + dir_ + "/latest)");
  EXPECT_TRUE(contains(checkpoint_error([&] { resolve_checkpoint("latest", ""); }), "checkpoint.dir is not set"));
  write_and_commit(dir_, 10);
  write_and_commit(dir_, 20);
  EXPECT_EQ(resolve_checkpoint("latest", dir_), dir_ + "/step_20");
  EXPECT_EQ(resolve_checkpoint("latest", dir_ + "/"), dir_ + "/step_20");
  EXPECT_EQ(resolve_checkpoint(dir_ + "/step_10", "/elsewhere"), dir_ + "/step_10") << "a checkpoint folder";
  EXPECT_EQ(resolve_checkpoint(dir_, ""), dir_ + "/step_20") << "a checkpoint dir: follows its latest";
  // `latest` removed by hand: not "no committed checkpoint" beside two of them.
  fs::rename(dir_ + "/latest", dir_ + "/latest.away");
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint.dir " + dir_ + " has no " + dir_ + "/latest pointer, but holds committed checkpoints; the "
            "newest is step_20: --resume " + dir_ + "/step_20");
  fs::rename(dir_ + "/latest.away", dir_ + "/latest");
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint(dir_ + "/step_99", ""); }),
            "checkpoint " + dir_ + "/step_99 does not exist");
  // A folder not committed, manifest or not (rank 0 writes it before the
  // rename): refused by name, pointing at the dir.
  for (const std::string suffix : {".tmp", ".old", ".tmp.interrupted"}) {
    fs::copy(dir_ + "/step_10", dir_ + "/step_10" + suffix);
    // Its name hidden behind "/." resumed it as committed.
    for (const std::string tail : {"/", "/.", "/./"})
      EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint(dir_ + "/step_10" + suffix + tail, ""); }),
                "checkpoint " + dir_ + "/step_10" + suffix + " is not committed (a " + suffix +
                    " folder is one being written, set aside or left by a crash); --resume " + dir_ +
                    " resumes from the newest committed one, step_20")
          << tail;
    fs::remove_all(dir_ + "/step_10" + suffix);
  }
  // The hint named the folder above however little it held: a resume that
  // followed it failed again, as "neither a checkpoint nor a checkpoint.dir".
  const std::string bare = temp_.path() + "/bare";
  fs::create_directories(bare);
  fs::copy(dir_ + "/step_10", bare + "/step_10.tmp", fs::copy_options::recursive);
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint(bare + "/step_10.tmp", ""); }),
            "checkpoint " + bare + "/step_10.tmp is not committed (a .tmp folder is one being written, set aside or "
            "left by a crash); " + bare + " holds no other committed checkpoint");
  fs::copy(dir_ + "/step_10", bare + "/step_10", fs::copy_options::recursive);
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint(bare + "/step_10.tmp", ""); }),
            "checkpoint " + bare + "/step_10.tmp is not committed (a .tmp folder is one being written, set aside or "
            "left by a crash); the newest committed checkpoint there is step_10: --resume " + bare + "/step_10");
  // So is the folder itself, without `latest`: named as --resume latest names it.
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint(bare, ""); }),
            "checkpoint.dir " + bare + " has no " + bare + "/latest pointer, but holds committed checkpoints; the "
            "newest is step_10: --resume " + bare + "/step_10");
  write_text(dir_ + "/latest", "step_10.old\n");
  EXPECT_TRUE(contains(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }), "is not a checkpoint folder name"));
  write_text(dir_ + "/latest", "step_20\n");
  fs::create_directories(temp_.path() + "/plain");
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint(temp_.path() + "/plain", ""); }),
            "checkpoint " + temp_.path() + "/plain is neither a checkpoint (no " + temp_.path() +
                "/plain/manifest.json) nor a checkpoint.dir (no " + temp_.path() + "/plain/latest)");
  write_text(dir_ + "/latest", "step_77\n");
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint pointer " + dir_ + "/latest names step_77, but " + dir_ +
                "/step_77/manifest.json is missing; the newest committed checkpoint there is step_20: --resume " +
                dir_ + "/step_20");
  // A commit over an existing step on NFS sets it aside as step_77.old
  // before the new one takes its name: a crash between the two renames
  // leaves it whole there, which only the hint to step_20 offered.
  fs::copy(dir_ + "/step_20", dir_ + "/step_77.old", fs::copy_options::recursive);
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint pointer " + dir_ + "/latest names step_77, but " + dir_ +
                "/step_77/manifest.json is missing; " + dir_ + "/step_77.old holds it, set aside by a commit cut short (a filesystem without RENAME_EXCHANGE): "
                "rename it to step_77 to resume from it; the newest committed checkpoint there is step_20: --resume " +
                dir_ + "/step_20");
  fs::remove_all(dir_ + "/step_77.old");
  write_text(dir_ + "/latest", "../../etc\n");
  EXPECT_TRUE(contains(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }), "is not a checkpoint folder name"));
  // Two names, or garbage bytes: quoted escaped on one line (checkpoint_error checks the line).
  write_text(dir_ + "/latest", "step_4\nstep_2\n");
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint pointer " + dir_ + "/latest: \"step_4\\x0astep_2\" is not a checkpoint folder name (step_N); the "
            "newest committed checkpoint there is step_20: --resume " + dir_ + "/step_20");
  write_text(dir_ + "/latest", std::string("st\x01\x1b[31m\xff\r\nx", 12));
  EXPECT_TRUE(contains(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
                       "\"st\\x01\\x1b[31m\\xff\\x0d\\x0ax\""));
  write_text(dir_ + "/latest", std::string(100, 'z'));
  const std::string long_one = checkpoint_error([&] { resolve_checkpoint("latest", dir_); });
  EXPECT_TRUE(contains(long_one, std::string(64, 'z') + "... (100 bytes)")) << long_one;
  write_text(dir_ + "/latest", std::string(1 << 20, '\n'));
  EXPECT_TRUE(contains(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }), "1048576 bytes is not"));
  // A folder read as "" (named as the empty folder name); a FIFO would block.
  fs::remove(dir_ + "/latest");
  fs::create_directories(dir_ + "/latest");
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint pointer " + dir_ + "/latest: not a regular file");
  fs::remove(dir_ + "/latest");
  ASSERT_EQ(mkfifo((dir_ + "/latest").c_str(), 0600), 0);
  EXPECT_EQ(checkpoint_error([&] { resolve_checkpoint("latest", dir_); }),
            "checkpoint pointer " + dir_ + "/latest: not a regular file");
}

TEST_F(CheckpointFiles, ReadManifestNamesTheFileAndTheField) {
  write_and_commit(dir_, 1);
  const std::string folder = dir_ + "/step_1";
  const std::string path = folder + "/manifest.json";
  const nlohmann::json good = read_manifest(folder);
  auto refused = [&](const nlohmann::json& manifest) {
    write_text(path, manifest.dump());
    return checkpoint_error([&] { read_manifest(folder); });
  };
  nlohmann::json m = good;
  m["schema"] = "trainbench.checkpoint/v0";
  EXPECT_EQ(refused(m), "checkpoint manifest " + path +
                            ": schema \"trainbench.checkpoint/v0\", expected \"trainbench.checkpoint/v1\" or "
                            "\"trainbench.checkpoint/v2\"");
  m = good;
  m["schema"] = "trainbench.checkpoint/v2";  // the sliced form's: read alike (a whole file is whole in both)
  write_text(path, m.dump());
  EXPECT_NO_THROW(read_manifest(folder));
  m = good;
  m.erase("ranks");
  EXPECT_EQ(refused(m), "checkpoint manifest " + path + ": field ranks is missing");
  m = good;
  m["ranks"][0]["files"][1]["xxh64"] = "XYZ";
  EXPECT_EQ(refused(m), "checkpoint manifest " + path + ": field ranks[0].files[1].xxh64 is not 16 lower-case hex digits");
  m = good;
  m["ranks"][0]["files"][0]["name"] = "../../secret";
  EXPECT_TRUE(contains(refused(m), "ranks[0].files[0].name")) << "no path outside the folder";
  m = good;
  m["world_size"] = 2;
  EXPECT_TRUE(contains(refused(m), "field ranks has 1 entries for world_size 2"));
  m = good;
  m["step"] = "ten";
  EXPECT_EQ(refused(m), "checkpoint manifest " + path + ": field step is not an integer");

  // A rank's entry in another's place, and a file size off the image
  // alignment (no test wrote either).
  m = good;
  m["ranks"][0]["rank"] = 1;
  EXPECT_EQ(refused(m), "checkpoint manifest " + path + ": field ranks[0].rank is not 0");
  m = good;
  m["ranks"][0]["files"][1]["bytes"] = m["ranks"][0]["files"][1]["bytes"].get<int64_t>() + 1;
  EXPECT_TRUE(contains(refused(m), "field ranks[0].files[1].bytes ")) << refused(m);
  EXPECT_TRUE(contains(refused(m), " is not a multiple of ")) << refused(m);
  m = good;
  m["total_bytes"] = 1;
  EXPECT_TRUE(contains(refused(m), "field total_bytes is 1 but the files add up to"));
  // The folder's name says the step: a manifest of another step in it is refused.
  for (const int64_t other : {0, 2}) {
    m = good;
    m["step"] = other;
    EXPECT_EQ(refused(m), "checkpoint manifest " + path + ": field step is " + std::to_string(other) +
                              " but the folder is step_1");
  }
  m = good;
  m["schema"] = "v1\nsecond line\x01";
  EXPECT_TRUE(contains(refused(m), "schema \"v1\\x0asecond line\\x01\""));  // escaped, one line
  // A file or section name goes into messages and paths: one holding a
  // newline split a read error over two lines. Refused, escaped.
  m = good;
  m["ranks"][0]["files"][0]["name"] = "rank\nBOGUS LINE.bin";
  EXPECT_EQ(refused(m), "checkpoint manifest " + path +
                            ": field ranks[0].files[0].name \"rank\\x0aBOGUS LINE.bin\" is not a file name in the "
                            "checkpoint folder");
  m = good;
  m["ranks"][0]["files"][0]["sections"][0]["name"] = "adam\nBOGUS2";
  EXPECT_EQ(refused(m), "checkpoint manifest " + path +
                            ": field ranks[0].files[0].sections[0].name \"adam\\x0aBOGUS2\" is not a section name");
  m = good;
  m["ranks"][0]["files"][0]["sections"][0]["bytes"] = int64_t{1} << 50;
  write_text(path, m.dump());
  EXPECT_TRUE(contains(checkpoint_error([&] { read_rank_files(folder, m, 0); }), "does not fit in the"))
      << "refused before 1 PiB is allocated for it";
  write_text(path, "{ not json");
  const std::string not_json = checkpoint_error([&] { read_manifest(folder); });
  EXPECT_TRUE(contains(not_json, path + ": not valid JSON (parse error at line 1, column ")) << not_json;
  EXPECT_FALSE(contains(not_json, "json.exception")) << "in trainbench's words, not the library's: " << not_json;
  fs::remove(path);
  EXPECT_TRUE(contains(checkpoint_error([&] { read_manifest(folder); }), path + ": cannot read it"));
}

// Out of file descriptors is the machine's limit, not a bad checkpoint or
// folder: the CLI exits 3 for it (environment()), 2 for the rest. Each of
// the three opens a resume or a fresh run's check makes: the folder's
// listing, the manifest, a rank's file.
TEST_F(CheckpointFiles, OutOfFileDescriptorsIsTheMachinesLimit) {
  const nlohmann::json manifest = write_and_commit(dir_, 2, 2);
  const std::string folder = dir_ + "/step_2";
  std::vector<std::pair<std::string, bool>> refused;  // message, environment()
  auto attempt = [&](auto body) {
    try {
      body();
      refused.emplace_back("no error", false);
    } catch (const CheckpointError& e) {
      refused.emplace_back(e.what(), e.environment());
    }
  };
  {
    testing::DescriptorsExhausted exhausted;
    ASSERT_TRUE(exhausted.exhausted());
    attempt([&] { list_committed(dir_); });
    attempt([&] { read_manifest(folder); });
    attempt([&] { read_rank_files(folder, manifest, 0); });
  }
  ASSERT_EQ(refused.size(), 3u);
  for (const auto& [message, environment] : refused) {
    EXPECT_TRUE(environment) << message;
    EXPECT_TRUE(contains(message, "Too many open files")) << message;
  }
  EXPECT_TRUE(contains(refused[0].first, "checkpoint.dir " + dir_ + ": cannot list it"));
  // With descriptors to spare the same calls succeed; a folder that is a
  // file is the user's (exit 2), not the machine's.
  EXPECT_EQ(list_committed(dir_).size(), 1u);
  write_text(temp_.path() + "/a-file", "x");
  bool environment = true;
  try {
    list_committed(temp_.path() + "/a-file");
  } catch (const CheckpointError& e) {
    environment = e.environment();
  }
  EXPECT_FALSE(environment);
}

TEST_F(CheckpointFiles, ListCommittedTakesOnlyStepFoldersWithAManifest) {
  EXPECT_TRUE(list_committed(dir_).empty()) << "a missing dir has none";
  write_and_commit(dir_, 9, 0);
  write_and_commit(dir_, 100, 0);
  fs::create_directories(dir_ + "/step_3");  // no manifest
  fs::create_directories(dir_ + "/step_x/");
  fs::create_directories(dir_ + "/step_4.tmp");
  write_text(dir_ + "/step_4.tmp/manifest.json", "{}");
  write_text(dir_ + "/step_5", "a file");
  const std::vector<CommittedCheckpoint> committed = list_committed(dir_);
  ASSERT_EQ(committed.size(), 2u);
  EXPECT_EQ(committed[0].step, 9);
  EXPECT_EQ(committed[1].step, 100) << "sorted by step, not by name";
}

TEST_F(CheckpointFiles, StartUpCheckOfTheCheckpointDir) {
  check_checkpoint_dir(dir_ + "/new/sub");
  EXPECT_TRUE(fs::is_directory(dir_ + "/new/sub"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/new/sub")) << "the probe is removed";
  write_text(temp_.path() + "/a_file", "x");
  try {
    check_checkpoint_dir(temp_.path() + "/a_file/sub");
    FAIL() << "expected a CheckpointWriteError";
  } catch (const CheckpointWriteError& e) {
    EXPECT_TRUE(contains(e.what(), temp_.path() + "/a_file/sub")) << e.what();
  }
}

TEST_F(CheckpointFiles, PreparingEmptiesALeftoverPendingFolder) {
  prepare_pending_folder(dir_, 6);
  write_text(pending_folder(dir_, 6) + "/rank_00007_0.bin", "from a crashed run");
  prepare_pending_folder(dir_, 6);
  EXPECT_TRUE(fs::is_empty(pending_folder(dir_, 6)));
}

}  // namespace
}  // namespace trainbench
