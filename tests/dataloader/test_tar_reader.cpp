// TarReader: members of ustar, pax and GNU tars, raw and compressed, with
// names, sizes, header offsets and data as written; broken shards fail with
// the path, the byte offset and what is wrong.
#include <gtest/gtest.h>
#include <zlib.h>  // gzip members made here: stored blocks, several members

#include <algorithm>  // std::fill: a zeroed header
#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/tar_reader.h"
#include "tests/dataloader/read_test_tars.h"
#include "tests/support/descriptors_exhausted.h"

namespace trainbench {
namespace {

using testing::make_tar;
using testing::TarFilter;
using testing::TarFormat;
using testing::TempDirectory;
using testing::TestEntry;
using testing::write_file;

struct ReadMember {
  TarMember header;
  std::string data;
};

// `data` as one gzip member, deflated at `level` (0: stored blocks, whose
// bytes are the data's own).
std::string gzip_member(const std::string& data, int level) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::vector<ReadMember> read_all(TarReader& tar) {
  std::vector<ReadMember> members;
  TarMember header;
  std::vector<uint8_t> data;
  while (tar.next_member(&header)) {
    tar.read_data(&data, 1 << 20);
    members.push_back({header, std::string(data.begin(), data.end())});
  }
  return members;
}

std::string expect_data_error(TarReader& tar, CorruptScope scope) {
  try {
    read_all(tar);
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), scope) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "expected a DataError";
  return "";
}

// expect_data_error of the file at `path`.
std::string expect_data_error(const std::string& path, CorruptScope scope) {
  TarReader tar;
  tar.open(path);
  return expect_data_error(tar, scope);
}

const std::string kLongName = std::string(120, 'd') + "/" + std::string(150, 'n') + ".tokens.u16";

class TarFormats : public ::testing::TestWithParam<TarFormat> {};

TEST_P(TarFormats, ReadsNamesSizesOffsetsAndData) {
  const std::vector<TestEntry> entries = {
      {"000.txt", "hello"},
      {"000.u16", std::string(1000, 'x')},  // spans two 512-byte blocks
      {"dir.v1/001.empty", ""},
      {"dir.v1/001.bin", std::string("\0\1\2\3", 4)},
  };
  const std::string tar_bytes = make_tar(entries, GetParam());
  TarReader tar;
  tar.open_memory(tar_bytes.data(), tar_bytes.size(), "mem.tar");
  const std::vector<ReadMember> members = read_all(tar);
  ASSERT_EQ(members.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(members[i].header.name, entries[i].name);
    EXPECT_TRUE(members[i].header.regular);
    EXPECT_EQ(members[i].header.size, static_cast<int64_t>(entries[i].data.size()));
    EXPECT_EQ(members[i].data, entries[i].data);
  }
  // Each header sits right after the previous member's blocks (ustar and
  // GNU headers are one block here; pax may add an extended header).
  EXPECT_EQ(members[0].header.offset, 0);
  if (GetParam() != TarFormat::kPax) {
    EXPECT_EQ(members[1].header.offset, 1024);
    EXPECT_EQ(members[2].header.offset, 1024 + 512 + 1024);
    EXPECT_EQ(members[3].header.offset, 1024 + 512 + 1024 + 512);
  }
  for (size_t i = 1; i < members.size(); ++i) {
    EXPECT_GT(members[i].header.offset, members[i - 1].header.offset);
    EXPECT_EQ(members[i].header.offset % 512, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(UstarPaxGnu, TarFormats,
                         ::testing::Values(TarFormat::kUstar, TarFormat::kPax, TarFormat::kGnu));

TEST(TarReader, LongNamesInPaxAndGnuTars) {
  for (const TarFormat format : {TarFormat::kPax, TarFormat::kGnu}) {
    const std::string tar_bytes = make_tar({{kLongName, "long"}, {"short.txt", "s"}}, format);
    TarReader tar;
    tar.open_memory(tar_bytes.data(), tar_bytes.size(), "long.tar");
    const std::vector<ReadMember> members = read_all(tar);
    ASSERT_EQ(members.size(), 2u);
    EXPECT_EQ(members[0].header.name, kLongName);
    EXPECT_EQ(members[0].data, "long");
    // The long name's extra header comes first: the member's offset is where it starts.
    EXPECT_EQ(members[0].header.offset, 0);
    EXPECT_EQ(members[1].header.name, "short.txt");
  }
}

TEST(TarReader, DirectoriesAndLinksAreNotRegular) {
  const std::string tar_bytes = make_tar({{"d", "", TestEntry::kDirectory},
                                          {"d/a.txt", "a"},
                                          {"d/b.txt", "", TestEntry::kSymlink, "a.txt"},
                                          {"d/c.txt", "", TestEntry::kHardlink, "d/a.txt"}});
  TarReader tar;
  tar.open_memory(tar_bytes.data(), tar_bytes.size(), "links.tar");
  const std::vector<ReadMember> members = read_all(tar);
  ASSERT_EQ(members.size(), 4u);
  EXPECT_FALSE(members[0].header.regular);
  EXPECT_TRUE(members[1].header.regular);
  EXPECT_FALSE(members[2].header.regular);
  EXPECT_FALSE(members[3].header.regular);
  EXPECT_EQ(members[2].header.size, 0);
}

TEST(TarReader, CompressedShardsReadTheSameAndCountStorageBytes) {
  TempDirectory dir;
  const std::vector<TestEntry> entries = {{"0.txt", std::string(100000, 'a')}, {"1.txt", "b"}};
  const std::string plain = make_tar(entries);
  for (const auto& [filter, name] :
       {std::pair{TarFilter::kNone, "s.tar"}, std::pair{TarFilter::kGzip, "s.tar.gz"},
        std::pair{TarFilter::kZstd, "s.tar.zst"}, std::pair{TarFilter::kBzip2, "s.tar.bz2"},
        std::pair{TarFilter::kXz, "s.tar.xz"}}) {
    const std::string bytes = make_tar(entries, TarFormat::kPax, filter);
    write_file(dir.file(name), bytes);
    TarReader tar;
    tar.open(dir.file(name));
    const std::vector<ReadMember> members = read_all(tar);
    ASSERT_EQ(members.size(), 2u) << name;
    EXPECT_EQ(members[0].data, entries[0].data) << name;
    EXPECT_EQ(members[1].data, "b") << name;
    EXPECT_EQ(tar.storage_bytes(), static_cast<int64_t>(bytes.size())) << name;
    EXPECT_GE(tar.stream_offset(), static_cast<int64_t>(plain.size()) - 1024) << name;
    if (filter != TarFilter::kNone) {
      EXPECT_LT(tar.storage_bytes(), tar.stream_offset()) << name;
    }
  }
}

// A compressed shard cut within what libarchive reads ahead at open is
// "truncated" at byte 0 for every compressor. An xz one said "cannot open:
// Lzma library error:  No progress is possible", without the offset.
TEST(TarReader, ACompressedShardCutShortAtOpenSaysTruncated) {
  TempDirectory dir;
  const std::vector<TestEntry> entries = {{"0.txt", std::string(3000, 'a')}, {"1.txt", "b"}};
  for (const auto& [filter, name] : {std::pair{TarFilter::kZstd, "s.tar.zst"}, std::pair{TarFilter::kBzip2, "s.tar.bz2"},
                                     std::pair{TarFilter::kXz, "s.tar.xz"}}) {
    const std::string bytes = make_tar(entries, TarFormat::kPax, filter);
    ASSERT_GT(bytes.size(), 100u) << name;
    write_file(dir.file(name), bytes.substr(0, 100));
    std::string message;
    try {
      TarReader tar;
      tar.open(dir.file(name));
      read_all(tar);
    } catch (const DataError& error) {
      EXPECT_EQ(error.scope(), CorruptScope::kShard) << name;
      message = error.what();
    }
    EXPECT_EQ(message.rfind(dir.file(name) + ": byte 0: truncated tar archive", 0), 0u) << name << ": " << message;
  }
}

// A zeroed block where a header was (a damaged disk block), or archives
// joined by cat: every tar reader stops at the zero block, and the rest was
// dropped without a word. The first non-zero byte after the marker is told;
// a whole archive's padding is zeros.
TEST(TarReader, DataAfterTheEndMarkerIsTold) {
  TempDirectory dir;
  const std::vector<TestEntry> entries = {{"0.txt", "a"}, {"1.txt", "b"}, {"2.txt", "c"}};
  const std::string plain = make_tar(entries, TarFormat::kUstar);
  const auto after_end = [&](const std::string& name, const std::string& bytes, size_t* members) {
    write_file(dir.file(name), bytes);
    TarReader tar;
    tar.open(dir.file(name));
    *members = read_all(tar).size();
    return tar.data_after_end_marker();
  };
  size_t members = 0;
  EXPECT_EQ(after_end("whole.tar", plain, &members), -1);
  EXPECT_EQ(members, 3u);
  std::string zeroed = plain;
  std::fill(zeroed.begin() + 1024, zeroed.begin() + 1536, '\0');  // 1.txt's header
  EXPECT_EQ(after_end("zeroed.tar", zeroed, &members), 1536) << "1.txt's data block";
  EXPECT_EQ(members, 1u);
  EXPECT_EQ(after_end("joined.tar", plain + plain, &members), static_cast<int64_t>(plain.size()));
  EXPECT_EQ(members, 3u);
}

// A gzip shard cut short: the samples before the cut are read (libarchive's
// own gzip filter failed at open, whole, for a small shard: it reads ahead
// while it opens), then one error names the cut. Python's tarfile reads them too.
TEST(TarReader, AGzipShardCutShortReadsItsWholeMembersThenSaysSo) {
  TempDirectory dir;
  std::vector<TestEntry> entries;
  for (int i = 0; i < 40; ++i) entries.push_back({std::to_string(i) + ".txt", std::string(1000, static_cast<char>('a' + i % 26))});
  const std::string gz = make_tar(entries, TarFormat::kPax, TarFilter::kGzip);
  write_file(dir.file("cut.tar.gz"), gz.substr(0, gz.size() / 2));
  TarReader tar;
  int read = 0;
  try {
    tar.open(dir.file("cut.tar.gz"));
    TarMember member;
    std::vector<uint8_t> data;
    while (tar.next_member(&member)) {
      tar.read_data(&data, 1 << 20);
      EXPECT_EQ(std::string(data.begin(), data.end()), entries[static_cast<size_t>(read)].data);
      ++read;
    }
    FAIL() << "a cut stream read whole";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("(truncated gzip stream: the file ends inside gzip member 1 (from "
                                         "compressed byte 0) at compressed byte "),
              std::string::npos)
        << e.what();
  }
  EXPECT_GT(read, 5);
  EXPECT_LT(read, 40);
}

// libarchive's gzip filter never checked a member's CRC-32: a bit flipped
// in a stored block was read as data (gzip -t and Python refuse the file).
TEST(TarReader, AGzipShardWhoseDataDoesNotMatchItsCrcFails) {
  TempDirectory dir;
  const std::string plain = make_tar({{"0.txt", std::string(3000, 'a')}, {"1.txt", "b"}}, TarFormat::kUstar);
  std::string gz = gzip_member(plain, 0);
  const size_t flip = gz.find(std::string(100, 'a'));
  ASSERT_NE(flip, std::string::npos);
  gz[flip + 50] = 'c';
  write_file(dir.file("flipped.tar.gz"), gz);
  TarReader tar;
  try {
    tar.open(dir.file("flipped.tar.gz"));
    read_all(tar);
    FAIL() << "a member whose CRC-32 does not match read as whole";
  } catch (const DataError& e) {
    EXPECT_EQ(e.scope(), CorruptScope::kShard);
    // Found at the member's end (its trailer), after its data: the message
    // names the member's compressed bytes, not a tar offset past them.
    EXPECT_EQ(std::string(e.what()),
              dir.file("flipped.tar.gz") + ": gzip member 1 (from compressed byte 0): incorrect data check at "
                  "compressed byte " + std::to_string(gz.size() - 4) +
                  " (its CRC-32 or length: its data, read before the check at its end, is damaged)");
  }
}

// gzip members one after another are one stream (RFC 1952; gzip and Python
// read them so): a tar split across two members reads whole, and two
// shards joined by `cat` are told as data after the first one's marker,
// as the same join of plain tars is. Anything else after a member fails.
TEST(TarReader, GzipMembersOneAfterAnotherReadAsOneStream) {
  TempDirectory dir;
  const std::vector<TestEntry> entries = {{"0.txt", "a"}, {"1.txt", std::string(5000, 'b')}, {"2.txt", "c"}};
  const std::string plain = make_tar(entries, TarFormat::kUstar);
  const auto read = [&](const std::string& name, const std::string& bytes) {
    write_file(dir.file(name), bytes);
    TarReader tar;
    tar.open(dir.file(name));
    const std::vector<ReadMember> members = read_all(tar);
    EXPECT_EQ(tar.storage_bytes(), static_cast<int64_t>(bytes.size())) << name;
    return std::pair{members, tar.data_after_end_marker()};
  };
  const std::string split = gzip_member(plain.substr(0, 1500), 6) + gzip_member(plain.substr(1500), 6);
  const auto [members, after] = read("split.tar.gz", split);
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[1].data, entries[1].data);
  EXPECT_EQ(after, -1);
  const std::string one = gzip_member(plain, 6);
  const auto [first, joined_after] = read("joined.tar.gz", one + one);
  EXPECT_EQ(first.size(), 3u);
  EXPECT_EQ(joined_after, static_cast<int64_t>(plain.size())) << "the second archive's first header";
  const auto [padded, padded_after] = read("padded.tar.gz", one + std::string(512, '\0'));
  EXPECT_EQ(padded.size(), 3u);
  EXPECT_EQ(padded_after, -1);
  write_file(dir.file("garbage.tar.gz"), one + "not gzip");
  TarReader tar;
  try {
    tar.open(dir.file("garbage.tar.gz"));
    read_all(tar);
    FAIL() << "bytes after the gzip member that are not one passed";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data after gzip member 1 at compressed byte " + std::to_string(one.size()) +
                                         " that is not another gzip member"),
              std::string::npos)
        << e.what();
  }
}

// What follows a lone zero block is told in a gzip shard as in a plain one,
// wherever the read blocks end: libarchive stops having consumed part of
// the block before the last (a header read across two blocks, which a
// block size not a multiple of 512 makes), or having read the stream's end.
TEST(TarReader, DataAfterALoneZeroBlockIsToldForGzipAsForPlainTar) {
  TempDirectory dir;
  const int64_t mib = int64_t{1} << 20;
  for (const int64_t data_bytes : {int64_t{1}, mib - 3 * 512, mib - 2 * 512 - 100}) {
    // One member (its header, its data to a whole block), one zero block, junk.
    const std::string whole = make_tar({{"0.bin", std::string(static_cast<size_t>(data_bytes), 'd')}},
                                       TarFormat::kUstar);
    const size_t member_bytes = 512 + static_cast<size_t>((data_bytes + 511) / 512 * 512);
    const std::string bytes = whole.substr(0, member_bytes) + std::string(512, '\0') + std::string(100, 'x');
    write_file(dir.file("lone.tar"), bytes);
    write_file(dir.file("lone.tar.gz"), gzip_member(bytes, 6));
    for (const int64_t block : {mib, mib + 100, mib + 300}) {
      SCOPED_TRACE("data " + std::to_string(data_bytes) + ", blocks of " + std::to_string(block));
      TarReader plain(block), gzip(block);
      plain.open(dir.file("lone.tar"));
      gzip.open(dir.file("lone.tar.gz"));
      EXPECT_EQ(read_all(plain).size(), 1u);
      EXPECT_EQ(read_all(gzip).size(), 1u);
      EXPECT_EQ(plain.data_after_end_marker(), static_cast<int64_t>(member_bytes + 512));
      EXPECT_EQ(gzip.data_after_end_marker(), plain.data_after_end_marker());
    }
  }
}

TEST(TarReader, EmptyTarHasNoMembers) {
  const std::string tar_bytes = make_tar({});
  TarReader tar;
  tar.open_memory(tar_bytes.data(), tar_bytes.size(), "empty.tar");
  TarMember member;
  EXPECT_FALSE(tar.next_member(&member));
  EXPECT_FALSE(tar.next_member(&member));
}

TEST(TarReader, TruncatedInsideDataNamesPathOffsetAndMember) {
  TempDirectory dir;
  const std::string whole = make_tar({{"0.txt", "a"}, {"1.bin", std::string(5000, 'z')}});
  const std::string path = dir.file("cut.tar");
  write_file(path, whole.substr(0, 1024 + 512 + 2000));
  const std::string message = expect_data_error(path, CorruptScope::kShard);
  EXPECT_EQ(message.rfind(path + ": byte ", 0), 0u) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  EXPECT_NE(message.find("1.bin"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(TarReader, TruncatedInsideAHeader) {
  const std::string whole = make_tar({{"0.txt", "a"}, {"1.txt", "b"}}, TarFormat::kUstar);
  const std::string cut = whole.substr(0, 1024 + 300);
  TarReader tar;
  tar.open_memory(cut.data(), cut.size(), "cut.tar");
  const std::string message = expect_data_error(tar, CorruptScope::kShard);
  EXPECT_NE(message.find("cut.tar: byte "), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

// A copy cut inside the end-of-archive zeros has every member whole: read as
// one cut at a member boundary is (all members, then "ended without its end
// marker", which the loader warns of), where fewer than 512 of the zeros
// left failed the shard as "the file ends inside a member header". A cut
// past the first zero block reads as ended. The same length of anything but
// zeros is still a cut header.
TEST(TarReader, ACutInsideTheEndMarkerReadsEveryMember) {
  TempDirectory dir;
  const std::string whole = make_tar({{"0.txt", "a"}, {"1.txt", "b"}}, TarFormat::kUstar);
  constexpr size_t kMembersEnd = 2 * 1024;
  ASSERT_GE(whole.size(), kMembersEnd + 1024);
  for (const size_t zeros : {0, 1, 100, 511, 512, 700}) {
    const std::string path = dir.file("cut-" + std::to_string(zeros) + ".tar");
    write_file(path, whole.substr(0, kMembersEnd + zeros));
    TarReader tar;
    tar.open(path);
    std::vector<ReadMember> members;
    try {
      members = read_all(tar);
    } catch (const DataError& error) {
      ADD_FAILURE() << zeros << " zeros: " << error.what();
      continue;
    }
    ASSERT_EQ(members.size(), 2u) << zeros << " zeros";
    EXPECT_EQ(members[1].data, "b");
    EXPECT_EQ(tar.ended_without_end_marker(), zeros < 512) << zeros << " zeros";
  }
  std::string garbage = whole.substr(0, kMembersEnd + 100);
  garbage[kMembersEnd + 50] = 'x';
  const std::string path = dir.file("cut-garbage.tar");
  write_file(path, garbage);
  const std::string message = expect_data_error(path, CorruptScope::kShard);
  EXPECT_NE(message.find("byte 2048: truncated tar archive"), std::string::npos) << message;
}

// A file that ends inside a pax or GNU long-name header, or right after one
// before the header it extends: libarchive says "Damaged tar archive" or
// nothing at all, and the message says the file is cut, at the cut member's
// start. Such a header is what `shards pack` itself writes for a long name.
// Whole, the same member with its real header damaged is still "corrupt".
TEST(TarReader, CutInsideALongNameHeaderSaysTruncated) {
  for (const TarFormat format : {TarFormat::kPax, TarFormat::kGnu}) {
    const std::string whole = make_tar({{"0.txt", "a"}, {kLongName, "long"}, {"2.txt", "c"}}, format);
    // Member 1 starts at 1024 (member 0: a header and a data block); its
    // real header is the first ustar block after its extension's.
    size_t real_header = 1536;
    while (real_header + 512 <= whole.size() &&
           !(whole.compare(real_header + 257, 5, "ustar") == 0 && whole[real_header + 156] == '0'))
      real_header += 512;
    ASSERT_LT(real_header + 512, whole.size());
    TempDirectory dir;
    for (const size_t cut : {size_t{1024 + 512}, size_t{1024 + 700}, real_header, real_header + 100}) {
      const std::string path = dir.file("cut.tar");
      write_file(path, whole.substr(0, cut));
      const std::string message = expect_data_error(path, CorruptScope::kShard);
      EXPECT_EQ(message.rfind(path + ": byte 1024: truncated tar archive: the file ends inside the pax or GNU "
                                     "long-name header", 0),
                0u)
          << "cut at " << cut << ": " << message;
    }
    std::string damaged = whole;
    damaged[real_header + 10] ^= 0x55;  // its checksum no longer matches
    const std::string path = dir.file("damaged.tar");
    write_file(path, damaged);
    const std::string message = expect_data_error(path, CorruptScope::kShard);
    EXPECT_NE(message.find("corrupt tar archive"), std::string::npos) << message;
    EXPECT_EQ(message.find("truncated"), std::string::npos) << message;
  }
}

TEST(TarReader, DamagedHeaderIsAShardError) {
  std::string bytes = make_tar({{"0.txt", "a"}, {"1.txt", "b"}}, TarFormat::kUstar);
  bytes[1024 + 10] ^= 0x55;  // inside the second header's name: its checksum no longer matches
  TarReader tar;
  tar.open_memory(bytes.data(), bytes.size(), "bad.tar");
  const std::string message = expect_data_error(tar, CorruptScope::kShard);
  EXPECT_NE(message.find("bad.tar: byte 1024: corrupt tar archive"), std::string::npos) << message;
}

// Out of file descriptors is the machine's limit, not a corrupt shard:
// scope kEnvironment, which data.on_corrupt=skip never skips and the CLI
// exits 3 on. With every descriptor taken the shard's open is the one
// refused.
TEST(TarReader, OutOfFileDescriptorsIsTheEnvironmentsNotTheShards) {
  TempDirectory dir;
  const std::string path = dir.file("fine.tar");
  write_file(path, std::string(1024, '\0'));  // an empty tar: opens fine
  CorruptScope scope = CorruptScope::kSample;
  std::string message;
  {
    testing::DescriptorsExhausted exhausted;
    ASSERT_TRUE(exhausted.exhausted());
    try {
      TarReader tar;
      tar.open(path);
    } catch (const DataError& error) {
      scope = error.scope();
      message = error.what();
    }
  }
  EXPECT_EQ(scope, CorruptScope::kEnvironment) << message;
  EXPECT_NE(message.find("Too many open files"), std::string::npos) << message;
  EXPECT_NE(message.find("ulimit -n"), std::string::npos) << message;
}

// A read the storage fails (EIO) is the machine's, with the system's words:
// it was a corrupt shard ("cannot open: Error reading fd 7", libarchive's
// words alone), which data.on_corrupt=skip left out of the data set.
// /proc/self/mem is a regular file whose read at offset 0 fails with EIO.
TEST(TarReader, AReadTheStorageFailsIsTheEnvironmentsNotTheShards) {
  CorruptScope scope = CorruptScope::kSample;
  std::string message;
  try {
    TarReader tar;
    tar.open("/proc/self/mem");
  } catch (const DataError& error) {
    scope = error.scope();
    message = error.what();
  }
  EXPECT_EQ(scope, CorruptScope::kEnvironment) << message;
  EXPECT_EQ(message.rfind("/proc/self/mem: cannot open: ", 0), 0u) << message;
  EXPECT_NE(message.find("Input/output error"), std::string::npos) << message;
}

TEST(TarReader, NotATarFailsAtOpen) {
  TempDirectory dir;
  const std::string zip = dir.file("data.zip");
  write_file(zip, std::string("PK\x03\x04", 4) + std::string(2000, '\0'));
  const std::string empty = dir.file("empty.tar");
  write_file(empty, "");
  const std::string text = dir.file("notes.tar");
  write_file(text, std::string(3000, 'x'));
  for (const std::string& path : {zip, empty, text}) {
    TarReader tar;
    try {
      tar.open(path);
      FAIL() << path << " opened";
    } catch (const DataError& error) {
      EXPECT_EQ(error.scope(), CorruptScope::kShard);
      EXPECT_EQ(std::string(error.what()).rfind(path + ": not a tar archive", 0), 0u)
          << error.what();
    }
  }
}

TEST(TarReader, MissingFileNamesThePath) {
  TarReader tar;
  try {
    tar.open("/nonexistent/shard-000.tar");
    FAIL();
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), CorruptScope::kShard);
    EXPECT_EQ(std::string(error.what()),
              "/nonexistent/shard-000.tar: cannot open: No such file or directory");
  }
}

TEST(TarReader, OversizedMemberIsSkippedAndTheNextOneReads) {
  const std::string bytes = make_tar({{"big.bin", std::string(3000, 'b')}, {"small.txt", "s"}});
  TarReader tar;
  tar.open_memory(bytes.data(), bytes.size(), "m.tar");
  TarMember member;
  std::vector<uint8_t> data;
  ASSERT_TRUE(tar.next_member(&member));
  try {
    tar.read_data(&data, 2048);
    FAIL();
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), CorruptScope::kSample);
    EXPECT_EQ(std::string(error.what()),
              "m.tar: byte 0: big.bin is 3000 bytes, more than the limit of 2048");
  }
  ASSERT_TRUE(tar.next_member(&member));
  EXPECT_EQ(member.name, "small.txt");
  tar.read_data(&data, 2048);
  EXPECT_EQ(std::string(data.begin(), data.end()), "s");
}

TEST(TarReader, SkipsAndReusesTheDataBuffer) {
  const std::string bytes = make_tar({{"a", std::string(9000, 'a')},
                                      {"b", "skipped"},
                                      {"c", "cc"},
                                      {"d", std::string(4000, 'd')}});
  TarReader tar;
  tar.open_memory(bytes.data(), bytes.size(), "r.tar");
  TarMember member;
  std::vector<uint8_t> data;
  ASSERT_TRUE(tar.next_member(&member));
  tar.read_data(&data, 1 << 20);
  const uint8_t* buffer = data.data();
  ASSERT_TRUE(tar.next_member(&member));
  tar.skip_data();
  ASSERT_TRUE(tar.next_member(&member));
  tar.read_data(&data, 1 << 20);
  EXPECT_EQ(std::string(data.begin(), data.end()), "cc");
  ASSERT_TRUE(tar.next_member(&member));
  tar.read_data(&data, 1 << 20);
  EXPECT_EQ(data.size(), 4000u);
  EXPECT_EQ(data.data(), buffer) << "the first, largest member's buffer is reused";
  EXPECT_FALSE(tar.next_member(&member));
}

TEST(TarReader, OpeningAnotherShardClosesThePrevious) {
  TempDirectory dir;
  write_file(dir.file("a.tar"), make_tar({{"a.txt", "a"}, {"a2.txt", "a"}}));
  write_file(dir.file("b.tar"), make_tar({{"b.txt", "b"}}));
  TarReader tar;
  tar.open(dir.file("a.tar"));
  TarMember member;
  ASSERT_TRUE(tar.next_member(&member));
  tar.open(dir.file("b.tar"));
  EXPECT_EQ(tar.path(), dir.file("b.tar"));
  ASSERT_TRUE(tar.next_member(&member));
  EXPECT_EQ(member.name, "b.txt");
  EXPECT_FALSE(tar.next_member(&member));
}

}  // namespace
}  // namespace trainbench
