// webdataset sample semantics: key/extension split as webdataset's
// base_plus_ext, grouping of consecutive members, what is skipped, and corrupt
// samples that leave the rest of the shard readable.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/tar_reader.h"
#include "dataloader/webdataset.h"
#include "tests/dataloader/read_test_tars.h"

namespace trainbench {
namespace {

using testing::make_tar;
using testing::TestEntry;

struct Split {
  std::string path;
  bool kept;
  std::string key;
  std::string extension;
};

TEST(SplitKeyExtension, FollowsWebdatasetsRegex) {
  const std::vector<Split> cases = {
      {"000.txt", true, "000", "txt"},
      {"a.b/c.d.u16", true, "a.b/c", "d.u16"},
      {"shard/Sample.Tokens.U16", true, "shard/Sample", "tokens.u16"},
      {"a/b.c/d.e", true, "a/b.c/d", "e"},
      {"trailing.", true, "trailing", ""},
      {"dir/.hidden", true, "dir/", "hidden"},  // the regex's key may end in '/'
      {".hidden", false, "", ""},
      {"a.b/.hidden", false, "", ""},
      {"noext", false, "", ""},
      {"dir.v2/noext", false, "", ""},
      {"__key__", false, "", ""},
      {"__meta__.json", false, "", ""},
      {"dir/__x.txt", false, "", ""},
      {"__meta__/a.txt", false, "", ""},  // webdataset's skip_meta
      {"__a/b.txt", true, "__a/b", "txt"},
      {"", false, "", ""},
  };
  for (const Split& expected : cases) {
    std::string key = "unchanged";
    std::string extension = "unchanged";
    EXPECT_EQ(split_key_extension(expected.path, &key, &extension), expected.kept) << expected.path;
    if (expected.kept) {
      EXPECT_EQ(key, expected.key) << expected.path;
      EXPECT_EQ(extension, expected.extension) << expected.path;
    }
  }
}

struct ReadSample {
  std::string key;
  int64_t offset;
  int64_t bytes;
  std::vector<std::pair<std::string, std::string>> members;  // extension, data
};

ReadSample copy_of(const Sample& sample) {
  ReadSample copy{sample.key, sample.offset, sample.bytes, {}};
  for (size_t i = 0; i < sample.member_count; ++i) {
    const SampleMember& member = sample.members[i];
    copy.members.emplace_back(member.extension,
                              std::string(member.data.begin(), member.data.end()));
  }
  return copy;
}

// Every sample of a tar, with the corrupt ones' messages in `errors`.
std::vector<ReadSample> read_samples(const std::string& tar_bytes,
                                     std::vector<std::string>* errors = nullptr,
                                     int64_t max_member_bytes = 1 << 20) {
  TarReader tar;
  tar.open_memory(tar_bytes.data(), tar_bytes.size(), "s.tar");
  SampleReader reader(tar, max_member_bytes);
  Sample sample;
  std::vector<ReadSample> samples;
  for (;;) {
    try {
      if (!reader.next(&sample)) return samples;
      samples.push_back(copy_of(sample));
    } catch (const DataError& error) {
      if (errors == nullptr) throw;
      EXPECT_EQ(error.scope(), CorruptScope::kSample) << error.what();
      errors->push_back(error.what());
    }
  }
}

TEST(SampleReader, GroupsConsecutiveMembersWithTheSameKey) {
  const std::string tar_bytes = make_tar(
      {{"s0.tokens.u16", "ab"}, {"s0.JSON", "{}"}, {"s1.tokens.u16", "cdef"}, {"s0.txt", "again"}});
  const std::vector<ReadSample> samples = read_samples(tar_bytes);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].key, "s0");
  EXPECT_EQ(samples[0].offset, 0);
  EXPECT_EQ(samples[0].bytes, 4);
  ASSERT_EQ(samples[0].members.size(), 2u);
  EXPECT_EQ(samples[0].members[0], (std::pair<std::string, std::string>{"tokens.u16", "ab"}));
  EXPECT_EQ(samples[0].members[1], (std::pair<std::string, std::string>{"json", "{}"}));
  EXPECT_EQ(samples[1].key, "s1");
  EXPECT_GT(samples[1].offset, 0);
  // A key seen before but not adjacent starts a new sample, as in webdataset.
  EXPECT_EQ(samples[2].key, "s0");
  EXPECT_EQ(samples[2].members[0].first, "txt");
}

TEST(SampleReader, SkippedEntriesDoNotEndASample) {
  const std::string tar_bytes = make_tar({{"k/a.txt", "1"},
                                          {"k", "", TestEntry::kDirectory},
                                          {"README", "no dot"},
                                          {"__meta__.json", "{}"},
                                          {"k/a.link", "", TestEntry::kSymlink, "a.txt"},
                                          {"k/a.hard", "", TestEntry::kHardlink, "k/a.txt"},
                                          {"k/a.bin", "2"}});
  const std::vector<ReadSample> samples = read_samples(tar_bytes);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].key, "k/a");
  ASSERT_EQ(samples[0].members.size(), 2u);
  EXPECT_EQ(samples[0].members[1].first, "bin");
}

TEST(SampleReader, RepeatedExtensionSpoilsOnlyThatSample) {
  // Extensions compare lower-cased: .TXT and .txt are the same member.
  const std::string tar_bytes =
      make_tar({{"a.txt", "a"}, {"b.txt", "1"}, {"b.u16", "xx"}, {"b.TXT", "2"}, {"c.txt", "c"}});
  std::vector<std::string> errors;
  const std::vector<ReadSample> samples = read_samples(tar_bytes, &errors);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].key, "a");
  EXPECT_EQ(samples[1].key, "c");
  EXPECT_EQ(samples[1].members[0].second, "c");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "s.tar: byte 3072: sample b has a second .txt member (b.TXT)");
}

TEST(SampleReader, NamesInMessagesStayOnOneLine) {
  std::vector<std::string> errors;
  read_samples(make_tar({{"b\n.txt", "1"}, {"b\n.txt", "2"}}), &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "s.tar: byte 1024: sample b\\x0a has a second .txt member (b\\x0a.txt)");
}

TEST(SampleReader, OversizedMemberSpoilsOnlyThatSample) {
  const std::string tar_bytes =
      make_tar({{"a.bin", std::string(5000, 'x')}, {"a.txt", "small"}, {"b.txt", "b"}});
  std::vector<std::string> errors;
  const std::vector<ReadSample> samples = read_samples(tar_bytes, &errors, 4096);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].key, "b");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "s.tar: byte 0: a.bin is 5000 bytes, more than the limit of 4096");
}

TEST(SampleReader, TruncatedShardIsAShardError) {
  const std::string whole = make_tar({{"a.txt", "a"}, {"b.bin", std::string(3000, 'b')}});
  const std::string cut = whole.substr(0, 2048);
  try {
    read_samples(cut);
    FAIL() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), CorruptScope::kShard);
    EXPECT_NE(std::string(error.what()).find("truncated"), std::string::npos) << error.what();
  }
}

// Cut inside the header after sample a's last member: a was read whole and
// is yielded (as webdataset does); the broken archive is the next call's
// error. It was thrown with a, which was lost: one sample short.
TEST(SampleReader, ASampleReadWholeBeforeACutHeaderIsYieldedFirst) {
  const std::string whole = make_tar({{"a.txt", "a"}, {"a.u16", "aa"}, {"b.txt", "b"}}, testing::TarFormat::kUstar);
  const std::string cut = whole.substr(0, 4 * 512 + 300);  // a's two headers and data blocks, then 300 bytes
  TarReader tar;
  tar.open_memory(cut.data(), cut.size(), "cut.tar");
  SampleReader reader(tar, 1 << 20);
  Sample sample;
  ASSERT_TRUE(reader.next(&sample));
  EXPECT_EQ(sample.key, "a");
  EXPECT_EQ(sample.member_count, 2u);
  try {
    reader.next(&sample);
    FAIL() << "expected a DataError";
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), CorruptScope::kShard);
    EXPECT_NE(std::string(error.what()).find("cut.tar: byte 2048: truncated"), std::string::npos) << error.what();
  }
}

TEST(SampleReader, ReusesMemberBuffersAcrossSamples) {
  const std::string tar_bytes = make_tar({{"a.u16", std::string(4000, 'a')},
                                          {"b.u16", std::string(100, 'b')},
                                          {"b.txt", "t"},
                                          {"c.u16", std::string(3000, 'c')}});
  TarReader tar;
  tar.open_memory(tar_bytes.data(), tar_bytes.size(), "r.tar");
  SampleReader reader(tar, 1 << 20);
  Sample sample;
  ASSERT_TRUE(reader.next(&sample));
  const uint8_t* first_buffer = sample.members[0].data.data();
  ASSERT_TRUE(reader.next(&sample));
  EXPECT_EQ(sample.member_count, 2u);
  ASSERT_NE(sample.find("txt"), nullptr);
  EXPECT_EQ(sample.find("json"), nullptr);
  ASSERT_TRUE(reader.next(&sample));
  EXPECT_EQ(sample.member_count, 1u);
  EXPECT_GE(sample.members.size(), 2u) << "spare buffers are kept";
  EXPECT_EQ(sample.members[0].data.data(), first_buffer);
  EXPECT_EQ(sample.find("txt"), nullptr) << "spare members are not part of the sample";
  EXPECT_FALSE(reader.next(&sample));
  EXPECT_FALSE(reader.next(&sample));
}

}  // namespace
}  // namespace trainbench
