// TarShardWriter and ShardSeries: the members land as "key.ext" in order with
// fixed metadata, sizes are counted exactly, limits are honoured, and a
// writer that dies or fails never leaves a file named like a whole shard.
// Read back with libarchive directly, independent of dataloader/tar_reader.
#include <archive.h>  // reading the shards back
#include <archive_entry.h>
#include <signal.h>    // SIGKILL
#include <sys/stat.h>  // mkfifo
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, _exit

#include <algorithm>  // std::sort
#include <filesystem>
#include <fstream>
#include <iterator>  // std::istreambuf_iterator
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

#include "dataloader/shard_writer.h"

namespace trainbench {
namespace {

namespace fs = std::filesystem;

struct ReadMember {
  std::string name;
  std::string data;
  int mode = 0;
  time_t mtime = 0;
  bool regular = false;
};

std::vector<ReadMember> read_members(const std::string& path) {
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 1 << 16), ARCHIVE_OK) << path;
  std::vector<ReadMember> members;
  archive_entry* entry = nullptr;
  // ARCHIVE_WARN: a name that does not convert to the C locale; read as stored.
  for (int status; (status = archive_read_next_header(a, &entry)) == ARCHIVE_OK || status == ARCHIVE_WARN;) {
    ReadMember m;
    const char* name = archive_entry_pathname(entry);
    m.name = name != nullptr ? name : archive_entry_pathname_utf8(entry);
    m.mode = archive_entry_perm(entry);
    m.mtime = archive_entry_mtime(entry);
    m.regular = archive_entry_filetype(entry) == AE_IFREG;
    m.data.resize(static_cast<size_t>(archive_entry_size(entry)));
    if (!m.data.empty()) archive_read_data(a, m.data.data(), m.data.size());
    members.push_back(std::move(m));
  }
  archive_read_free(a);
  return members;
}

std::vector<std::string> directory_names(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

MemberToWrite member(const std::string& extension, const std::string& data) {
  return {extension, data.data(), data.size()};
}

class ShardWriter : public ::testing::Test {
 protected:
  testing::TempDir temp_{"trainbench_shard_writer"};
  const std::string dir_ = temp_.path();
};

TEST_F(ShardWriter, WritesEachSampleAsKeyDotExtensionMembersInOrder) {
  const std::string path = dir_ + "/a.tar";
  const std::string tokens = "\x01\x00\x02\x00";
  const std::string text = "hello";
  const std::string empty;
  TarShardWriter writer;
  writer.open(path);
  writer.write_sample("000000000", {member("u16", tokens), member("txt", text)});
  writer.write_sample("dir/000000001", {member("payload.bin", empty)});
  EXPECT_EQ(writer.samples_written(), 2);
  writer.close();
  EXPECT_FALSE(writer.is_open());

  const std::vector<ReadMember> members = read_members(path);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].name, "000000000.u16");
  EXPECT_EQ(members[0].data, tokens);
  EXPECT_EQ(members[1].name, "000000000.txt");
  EXPECT_EQ(members[1].data, text);
  EXPECT_EQ(members[2].name, "dir/000000001.payload.bin");
  EXPECT_EQ(members[2].data, "");
  for (const ReadMember& m : members) {
    EXPECT_TRUE(m.regular) << m.name;
    EXPECT_EQ(m.mode, 0644) << m.name;
    EXPECT_EQ(m.mtime, members[0].mtime) << "one fixed mtime";
  }
  EXPECT_EQ(directory_names(dir_), std::vector<std::string>{"a.tar"}) << "no .partial left";
}

TEST_F(ShardWriter, BytesWrittenIsTheFileSizeAndTheArchiveEndsWithTwoZeroBlocks) {
  const std::string path = dir_ + "/a.tar";
  const std::string data(1000, 'x');
  TarShardWriter writer;
  writer.open(path);
  writer.write_sample("k", {member("bin", data)});
  // One header block and the data padded to 1024.
  EXPECT_EQ(writer.bytes_written(), 512 + 1024);
  writer.close();
  EXPECT_EQ(writer.bytes_written(), 512 + 1024 + TarShardWriter::kEndOfArchiveBytes);
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(path)), writer.bytes_written())
      << "the last block is not padded";
}

TEST_F(ShardWriter, LongAndNonAsciiNamesRoundTripAndAreCountedGenerously) {
  const std::string long_key = std::string(150, 'd') + "/" + std::string(180, 'k');
  const std::string utf8_key =
      "gr\xc3\xbc\xc3\x9f"
      "e/\xe6\x97\xa5\xe6\x9c\xac";
  const std::string latin1_key = "caf\xe9";  // not UTF-8: stored as bytes
  const std::string data = "payload";
  TarShardWriter writer;
  writer.open(dir_ + "/names.tar");
  for (const std::string& key : {utf8_key, long_key, latin1_key}) {
    const std::vector<MemberToWrite> members = {member("json", data)};
    const int64_t before = writer.bytes_written();
    writer.write_sample(key, members);
    EXPECT_LE(writer.bytes_written() - before, TarShardWriter::sample_tar_bytes(key, members)) << key;
  }
  writer.close();
  const std::vector<ReadMember> members = read_members(dir_ + "/names.tar");
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].name, utf8_key + ".json");
  EXPECT_EQ(members[0].data, data);
  EXPECT_EQ(members[1].name, long_key + ".json");
  EXPECT_EQ(members[2].name, latin1_key + ".json");
}

TEST_F(ShardWriter, TheSameSamplesGiveTheSameBytes) {
  const std::string data(777, 'q');
  for (const char* name : {"/one.tar", "/two.tar"}) {
    TarShardWriter writer;
    writer.open(dir_ + name);
    writer.write_sample("000000000", {member("u16", data), member("payload.bin", data)});
    writer.close();
  }
  std::ifstream one(dir_ + "/one.tar", std::ios::binary), two(dir_ + "/two.tar", std::ios::binary);
  const std::string a((std::istreambuf_iterator<char>(one)), {}),
      b((std::istreambuf_iterator<char>(two)), {});
  EXPECT_EQ(a, b);
}

TEST_F(ShardWriter, AnAbandonedWriterRemovesItsPartialFile) {
  {
    TarShardWriter writer;
    writer.open(dir_ + "/a.tar");
    writer.write_sample("k", {member("txt", "x")});
    EXPECT_EQ(directory_names(dir_), std::vector<std::string>{"a.tar.partial"});
  }  // destroyed while open, as when an exception unwinds past it
  EXPECT_TRUE(directory_names(dir_).empty());
}

TEST_F(ShardWriter, AKilledWriterLeavesOnlyAPartialFile) {
  const pid_t pid = fork();
  if (pid == 0) {
    TarShardWriter writer;
    writer.open(dir_ + "/a.tar");
    const std::string data(1 << 20, 'z');
    writer.write_sample("k", {{"bin", data.data(), data.size()}});
    raise(SIGKILL);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(directory_names(dir_), std::vector<std::string>{"a.tar.partial"});
}

TEST_F(ShardWriter, AnUncreatableShardNamesItsPath) {
  TarShardWriter writer;
  const std::string path = dir_ + "/missing/a.tar";
  try {
    writer.open(path);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ".partial"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(writer.is_open());
}

TEST(ShardName, ReplacesTheOneNumberField) {
  EXPECT_EQ(shard_name("out/train-%06d.tar", 7), "out/train-000007.tar");
  EXPECT_EQ(shard_name("out/train-%06d.tar", 1234567), "out/train-1234567.tar");
  EXPECT_EQ(shard_name("s%d.tar", 12), "s12.tar");
  for (const char* bad : {"out/train.tar", "a-%06d-%06d.tar", "a-%s.tar", "a-%6d.tar", "a-%0100d.tar", "a-%"})
    EXPECT_THROW(shard_name(bad, 0), std::invalid_argument) << bad;
}

// A folder whose name holds '%' (50%off, a TMPDIR) was read as a field: "'%'
// must start %d", and synth, pack and the default run failed there. "%%" is
// a literal '%', and pattern_literal writes a path so.
TEST(ShardName, APercentInTheFoldersNameIsLiteral) {
  EXPECT_EQ(shard_name("50%%off/train-%06d.tar", 3), "50%off/train-000003.tar");
  EXPECT_EQ(pattern_literal("/tmp/50%off/%d"), "/tmp/50%%off/%%d");
  EXPECT_EQ(shard_name(pattern_literal("/tmp/a%d%") + "/s-%d.tar", 1), "/tmp/a%d%/s-1.tar");
  testing::TempDir dir{"trainbench_shard_writer"};
  const std::string folder = dir.path() + "/50%off";
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/s-000002.tar") << "x";
  EXPECT_EQ(first_existing_shard(pattern_literal(folder) + "/s-%06d.tar", 10), folder + "/s-000002.tar");
}

void touch(const std::string& path) { std::ofstream(path) << "x"; }

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two writers of one shard (two `shards synth` into one folder) interleaved
// their bytes in one partial file: the second is refused while the first
// holds it; a partial file nobody holds (a killed writer's) is taken over.
TEST_F(ShardWriter, ASecondWriterOfTheSameShardIsRefused) {
  const std::string path = dir_ + "/s.tar";
  const std::string data = "tokens";
  TarShardWriter first, second;
  first.open(path);
  EXPECT_THROW(second.open(path), std::invalid_argument);
  EXPECT_FALSE(second.is_open());
  first.write_sample("a", {member("txt", data)});
  first.close();
  ASSERT_EQ(read_members(path).size(), 1u);
  EXPECT_FALSE(fs::exists(path + ".partial"));

  std::ofstream(path + ".partial") << std::string(5000, 'j');  // left by a killed writer
  TarShardWriter taker;
  taker.open(path);
  taker.write_sample("b", {member("txt", data)});
  taker.close();
  const std::vector<ReadMember> members = read_members(path);
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].name, "b.txt");
}

// A partial name that is not a regular file is nobody's partial shard: it is
// refused (exit 2), named with what it is, and left as it is. Taken over, a
// link had the shard written through it into a file outside the folder (and
// renamed into place as the link), a FIFO blocked the open for good, and a
// folder was "Is a directory", the environment's.
TEST_F(ShardWriter, APartialNameThatIsNotARegularFileIsRefusedAndLeftAlone) {
  const std::string path = dir_ + "/s.tar";
  const std::string partial = path + ".partial";
  const std::string outside = dir_ + "/precious";
  std::ofstream(outside) << "precious";
  const auto refused = [&](const std::string& what) {
    TarShardWriter writer;
    try {
      writer.open(path);
      writer.write_sample("a", {member("txt", std::string("tokens"))});
      writer.close();
      ADD_FAILURE() << "a partial name that is " << what << " was written through";
    } catch (const std::invalid_argument& e) {
      const std::string said = partial + " is already there and is " + what + ", not a killed writer's partial shard";
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
    EXPECT_FALSE(writer.is_open());
    EXPECT_FALSE(fs::exists(fs::symlink_status(path))) << "renamed into place";
  };
  fs::create_symlink(outside, partial);
  refused("a symbolic link");
  EXPECT_EQ(contents(outside), "precious");
  EXPECT_TRUE(fs::is_symlink(partial));
  fs::remove(partial);
  ASSERT_EQ(::mkfifo(partial.c_str(), 0644), 0);
  refused("a FIFO");  // without O_NONBLOCK the open waited for a reader for good
  EXPECT_TRUE(fs::is_fifo(partial));
  fs::remove(partial);
  fs::create_directory(partial);
  refused("a folder");
  EXPECT_TRUE(fs::is_directory(partial));
}

// Without replace_existing, a shard that appears while it is being written
// (another writer finished it first) is left as it is.
TEST_F(ShardWriter, WithoutReplaceAShardThatAppearedIsNotWrittenOver) {
  const std::string path = dir_ + "/s.tar";
  TarShardWriter writer;
  writer.open(path, false);
  writer.write_sample("a", {member("txt", std::string("x"))});
  touch(path);
  try {
    writer.close();
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(path + " appeared"), std::string::npos) << e.what();
  }
  EXPECT_EQ(contents(path), "x");
  EXPECT_FALSE(fs::exists(path + ".partial"));
  TarShardWriter replacing;  // the default writes over it
  replacing.open(path);
  replacing.write_sample("a", {member("txt", std::string("x"))});
  replacing.close();
  EXPECT_EQ(read_members(path).size(), 1u);
}

TEST_F(ShardWriter, FirstExistingShardIsTheLowestNameTheSeriesWouldWriteAndFirstShardFromPastAGap) {
  const std::string pattern = dir_ + "/train-%06d.tar";
  EXPECT_EQ(first_existing_shard(pattern, 100), "");
  EXPECT_EQ(first_existing_shard(dir_ + "/missing/train-%06d.tar", 100), "") << "no folder, nothing taken";
  // Names %06d never writes, and other files, do not count.
  for (const char* name : {"train-7.tar", "train-0000007.tar", "train-000007.tar.partial", "train-00000x.tar",
                           "other-000003.tar", "train-.tar"})
    touch(dir_ + "/" + name);
  EXPECT_EQ(first_existing_shard(pattern, 100), "");
  touch(dir_ + "/train-000042.tar");
  fs::create_directory(dir_ + "/train-000009.tar");  // a folder would be written over too
  EXPECT_EQ(first_existing_shard(pattern, 100), dir_ + "/train-000009.tar");
  EXPECT_EQ(first_existing_shard(pattern, 9), "") << "only names below max_shards";
  touch(dir_ + "/train-1234567.tar");  // wider than the field, as shard_name writes it
  EXPECT_EQ(first_existing_shard(pattern, 2000000), dir_ + "/train-000009.tar");
  EXPECT_EQ(first_existing_shard(dir_ + "/train-%d.tar", 100), dir_ + "/train-7.tar");
  // The number in a folder's name: each name is asked for.
  fs::create_directories(dir_ + "/part-3");
  touch(dir_ + "/part-3/data.tar");
  EXPECT_EQ(first_existing_shard(dir_ + "/part-%d/data.tar", 10), dir_ + "/part-3/data.tar");
  EXPECT_EQ(first_existing_shard(dir_ + "/part-%d/data.tar", 3), "");
  // The leftovers of an earlier, longer series: any number from `from` on,
  // past a gap too (shards removed by hand), which a directory spec reads.
  EXPECT_EQ(first_shard_from(pattern, 10), dir_ + "/train-000042.tar") << "past the gap at 10..41";
  EXPECT_EQ(first_shard_from(pattern, 43), dir_ + "/train-1234567.tar");
  EXPECT_EQ(first_shard_from(pattern, 1234568), "");
  EXPECT_EQ(first_shard_from(dir_ + "/part-%d/data.tar", 3), dir_ + "/part-3/data.tar");
  EXPECT_EQ(first_shard_from(dir_ + "/part-%d/data.tar", 4), "");
}

// One series per set of names at a time: a second one (another `shards
// synth --overwrite` into the folder) is refused before it writes anything,
// while the first writes its first shard and after it has renamed it, until
// it closes. It replaced the first's finished shards, and left a mixed set.
TEST_F(ShardWriter, ASecondSeriesOfTheSameNamesIsRefusedWhileTheFirstWrites) {
  const std::string pattern = dir_ + "/train-%06d.tar";
  const std::string data = "tokens";
  const auto refused = [&](const std::string& named) {
    try {
      ShardSeries second(pattern, 0, 2);
      ADD_FAILURE() << "a second series was let in while " << named << " was held";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(named + " is being written by another process"), std::string::npos)
          << e.what();
    }
  };
  {
    ShardSeries first(pattern, 0, 2);
    first.write_sample("k0", {member("txt", data)});
    refused(dir_ + "/train-000000.tar.partial");
    first.write_sample("k1", {member("txt", data)});
    first.write_sample("k2", {member("txt", data)});  // shard 0 renamed in, shard 1 begun
    ASSERT_TRUE(fs::exists(dir_ + "/train-000000.tar"));
    refused(dir_ + "/train-000000.tar");
    EXPECT_NO_THROW(ShardSeries(dir_ + "/val-%06d.tar", 0, 2)) << "other names in the same folder";
    first.close();
    EXPECT_NO_THROW(ShardSeries(pattern, 0, 2)) << "once the first has closed";
  }
  {
    // A series that passed its check before another began (pack walks its
    // input tree in between) is refused at its first shard, whose .partial
    // goes with it: it would have renamed over the other's first shard.
    ShardSeries late(pattern, 0, 2);
    ShardSeries first(pattern, 0, 2);
    for (const char* key : {"k0", "k1", "k2"}) first.write_sample(key, {member("txt", data)});
    try {
      late.write_sample("k0", {member("txt", data)});
      ADD_FAILURE() << "the late series wrote its first shard beside the other's";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(dir_ + "/train-000000.tar is being written by another process"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(fs::exists(dir_ + "/train-000000.tar.partial")) << "the refused series' partial went at once";
    late.close();  // a caller that goes on: nothing of the refused series is renamed in
    first.close();
  }
  EXPECT_EQ(read_members(dir_ + "/train-000000.tar").size(), 2u) << "the first series' shard 0 (k0, k1) stays";
  {
    ShardSeries abandoned(pattern, 0, 2);  // destroyed without close() (an error unwound): its lock goes too
    abandoned.write_sample("k0", {member("txt", data)});
  }
  EXPECT_NO_THROW(ShardSeries(pattern, 0, 2));
}

TEST_F(ShardWriter, SeriesStartsANewShardAtTheSampleCount) {
  ShardSeries series(dir_ + "/s-%03d.tar", 0, 3);
  const std::string data = "tokens";
  for (int i = 0; i < 10; ++i) series.write_sample(std::to_string(i), {member("txt", data)});
  series.close();
  ASSERT_EQ(series.paths().size(), 4u);
  EXPECT_EQ(series.paths()[3], dir_ + "/s-003.tar");
  const std::vector<size_t> expected = {3, 3, 3, 1};
  int64_t total = 0;
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(read_members(series.paths()[s]).size(), expected[s]) << series.paths()[s];
    total += static_cast<int64_t>(fs::file_size(series.paths()[s]));
  }
  EXPECT_EQ(series.bytes_written(), total);
}

TEST_F(ShardWriter, SeriesKeepsEveryShardWithinTheSizeLimit) {
  const int64_t limit = 20 * 1024;
  ShardSeries series(dir_ + "/s-%03d.tar", limit, 0);
  for (int i = 0; i < 40; ++i) {
    const std::string data(static_cast<size_t>(100 + 97 * i), 'a');
    series.write_sample(std::to_string(i), {member("bin", data), member("txt", "x")});
  }
  // A sample larger than the limit still gets written, alone.
  const std::string huge(static_cast<size_t>(2 * limit), 'h');
  series.write_sample("huge", {member("bin", huge)});
  series.close();
  ASSERT_GE(series.paths().size(), 3u);
  for (size_t s = 0; s + 1 < series.paths().size(); ++s)
    EXPECT_LE(static_cast<int64_t>(fs::file_size(series.paths()[s])), limit) << series.paths()[s];
  const std::vector<ReadMember> last = read_members(series.paths().back());
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].name, "huge.bin");
}

TEST(ShardSeriesOptions, ABadPatternFailsBeforeWriting) {
  EXPECT_THROW(ShardSeries("/tmp/no-number.tar", 0, 1), std::invalid_argument);
  EXPECT_THROW(ShardSeries("/tmp/x-%06d.tar", -1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace trainbench
