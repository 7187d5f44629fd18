// Shard lists: brace expansion as webdataset's braceexpand does it, globs,
// directories, list files, and errors that name what is missing.
#include <gtest/gtest.h>
#include <sys/stat.h>  // mkdir
#include <unistd.h>    // symlink; setuid, geteuid: a folder root could read

#include <cstdio>   // std::fprintf: the refusal, from the death test's child
#include <cstdlib>  // std::_Exit

#include <string>
#include <vector>

#include "dataloader/data_error.h"
#include "dataloader/shard_list.h"
#include "tests/dataloader/read_test_tars.h"

namespace trainbench {
namespace {

using testing::make_tar;
using testing::TempDirectory;
using testing::write_file;
using Names = std::vector<std::string>;

std::string config_error_of(const std::string& spec, bool expand_only = false) {
  try {
    expand_only ? expand_braces(spec) : resolve_shard_list(spec);
  } catch (const DataError& error) {
    EXPECT_EQ(error.scope(), CorruptScope::kConfig) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "no error for " << spec;
  return "";
}

TEST(ExpandBraces, RangesListsAndPadding) {
  EXPECT_EQ(expand_braces("plain.tar"), Names{"plain.tar"});
  EXPECT_EQ(expand_braces("train-{000000..000002}.tar"),
            (Names{"train-000000.tar", "train-000001.tar", "train-000002.tar"}));
  EXPECT_EQ(expand_braces("s{8..11}"), (Names{"s8", "s9", "s10", "s11"}));
  EXPECT_EQ(expand_braces("s{07..10}"), (Names{"s07", "s08", "s09", "s10"}))
      << "zero padding follows the wider bound";
  EXPECT_EQ(expand_braces("s{3..1}"), (Names{"s3", "s2", "s1"}));
  EXPECT_EQ(expand_braces("s{0..6..3}"), (Names{"s0", "s3", "s6"}));
  EXPECT_EQ(expand_braces("s{-1..1}"), (Names{"s-1", "s0", "s1"}));
  EXPECT_EQ(expand_braces("{a,b}/{0..1}.tar"), (Names{"a/0.tar", "a/1.tar", "b/0.tar", "b/1.tar"}));
  EXPECT_EQ(expand_braces("x{,.bak}"), (Names{"x", "x.bak"}));
  EXPECT_EQ(expand_braces("p{2.{5..6},3}"), (Names{"p2.5", "p2.6", "p3"}));
  EXPECT_EQ(expand_braces("lone{a}"), Names{"lone{a}"}) << "like bash and braceexpand";
}

TEST(ExpandBraces, MalformedPatternsAreConfigErrors) {
  EXPECT_EQ(config_error_of("s{1..3", true), "data.shards: unbalanced '{' in 's{1..3'");
  EXPECT_EQ(config_error_of("s}", true), "data.shards: unbalanced '}' in 's}'");
  EXPECT_EQ(config_error_of("s{}.tar", true), "data.shards: empty braces {} in 's{}.tar'");
  EXPECT_EQ(config_error_of("s{a..c}", true),
            "data.shards: range bound 'a' in 's{a..c}' is not an integer");
  EXPECT_NE(config_error_of("{0..9999999}{0..9999999}", true).find("expands to more than"),
            std::string::npos);
}

// For a death test's child: resolves `spec` as user nobody (root reads any
// folder) and exits 0 where it is accepted, else prints the refusal and
// exits 2 for the config's scope, 3 for the environment's (9: privileges
// not dropped).
[[noreturn]] void resolve_as_nobody_and_exit(const std::string& spec) {
  if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) std::_Exit(9);
  try {
    resolve_shard_list(spec);
  } catch (const DataError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(e.scope() == CorruptScope::kConfig ? 2 : 3);
  }
  std::_Exit(0);
}

class ShardList : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"train-000.tar", "train-001.tar", "train-002.tar", "b.tar.gz", "c.tgz", "d.tar.zst", "e.tar.bz2",
          "f.tar.xz"}) {
      write_file(dir_.file(name), make_tar({{"x.txt", "x"}}));
    }
    write_file(dir_.file("notes.md"), "not a shard");
  }
  std::string at(const std::string& name) const { return dir_.file(name); }
  TempDirectory dir_;
};

TEST_F(ShardList, BracesGlobsDirectoriesAndSeparators) {
  EXPECT_EQ(resolve_shard_list(at("train-{000..002}.tar")),
            (Names{at("train-000.tar"), at("train-001.tar"), at("train-002.tar")}));
  EXPECT_EQ(resolve_shard_list(at("train-00[21].tar")),
            (Names{at("train-001.tar"), at("train-002.tar")}))
      << "glob matches come sorted";
  EXPECT_EQ(resolve_shard_list(dir_.path()),
            (Names{at("b.tar.gz"), at("c.tgz"), at("d.tar.zst"), at("e.tar.bz2"), at("f.tar.xz"),
                   at("train-000.tar"), at("train-001.tar"), at("train-002.tar")}));
  EXPECT_EQ(
      resolve_shard_list(at("c.tgz") + ", " + at("b.tar.gz") + "\n" + at("train-{000,002}.tar")),
      (Names{at("c.tgz"), at("b.tar.gz"), at("train-000.tar"), at("train-002.tar")}));
}

// A directory spec reads what the shell's * would: macOS's AppleDouble
// ._name.tar beside each shard copied from its disks is no shard.
TEST_F(ShardList, ADirectoryLeavesHiddenFilesOut) {
  TempDirectory copied;
  write_file(copied.file("a.tar"), make_tar({{"x.txt", "x"}}));
  write_file(copied.file("._a.tar"), std::string(4096, '\0'));
  write_file(copied.file(".partial.tar"), make_tar({{"y.txt", "y"}}));
  EXPECT_EQ(resolve_shard_list(copied.path()), (Names{copied.file("a.tar")}));
  // Named, a hidden shard is read.
  EXPECT_EQ(resolve_shard_list(copied.file(".partial.tar")), (Names{copied.file(".partial.tar")}));
}

TEST_F(ShardList, ListFileWithCommentsAndRelativePaths) {
  write_file(at("shards.txt"), "# training shards\n\ntrain-001.tar\n  " + at("c.tgz") + "  \r\n" +
                                  "train-002.tar  # a comment after blanks\ntrain-000.tar\t#tabbed\n");
  EXPECT_EQ(resolve_shard_list(at("shards.txt")),
            (Names{at("train-001.tar"), at("c.tgz"), at("train-002.tar"), at("train-000.tar")}));
  // A '#' inside a name is the name's.
  write_file(at("sharp#1.tar"), make_tar({{"x.txt", "x"}}));
  write_file(at("sharp.txt"), "sharp#1.tar\n");
  EXPECT_EQ(resolve_shard_list(at("sharp.txt")), Names{at("sharp#1.tar")});
  // A tar without a shard extension is a shard, not a list.
  write_file(at("shard-without-extension"), make_tar({{"x.txt", "x"}}));
  EXPECT_EQ(resolve_shard_list(at("shard-without-extension")),
            Names{at("shard-without-extension")});
  // A byte-order mark (an editor's UTF-8) is not part of the first path.
  write_file(at("bom.txt"), "\xef\xbb\xbftrain-002.tar\n");
  EXPECT_EQ(resolve_shard_list(at("bom.txt")), Names{at("train-002.tar")});
}

// A file that is neither: its bytes were printed back as the "path" of a
// missing shard (cut at the first NUL, terminal escapes and all).
TEST_F(ShardList, ABinaryFileWithoutAShardSignatureIsNeitherShardNorList) {
  write_file(at("v7-tar"), std::string("s0.u16\0\0\0\0\0\0", 12) + std::string(500, '\0'));
  write_file(at("data.bin"), "junk\x1b[31mRED\n");
  for (const char* name : {"v7-tar", "data.bin"}) {
    const std::string error = config_error_of(at(name));
    EXPECT_EQ(error.rfind("data.shards: shard or list file " + at(name) + ": neither a shard by its first bytes", 0),
              0u)
        << error;
    EXPECT_NE(error.find("nor a list file of paths (it holds binary bytes)"), std::string::npos) << error;
    EXPECT_EQ(error.find('\x1b'), std::string::npos) << error;
  }
}

// A folder or a shard whose name holds a space or a comma, given whole, is
// that one path; split, it was "shard sp does not exist".
TEST_F(ShardList, AWholeSpecThatExistsIsOnePathSpacesAndCommasIncluded) {
  TempDirectory parent;
  const std::string spaced = parent.path() + "/sp ace, and {more}";
  ASSERT_EQ(::mkdir(spaced.c_str(), 0755), 0);
  write_file(spaced + "/a b.tar", make_tar({{"x.txt", "x"}}));
  EXPECT_EQ(resolve_shard_list(spaced), Names{spaced + "/a b.tar"});
  EXPECT_EQ(resolve_shard_list(spaced + "/a b.tar"), Names{spaced + "/a b.tar"});
  // Not a path as written: items as before.
  EXPECT_EQ(resolve_shard_list(at("c.tgz") + " " + at("b.tar.gz")), (Names{at("c.tgz"), at("b.tar.gz")}));
}

// A name that exists as written is that file though it holds glob
// characters: "train-00[1].tar" read train-001.tar, the pattern's match,
// while the file of that very name was left out. One that does not exist is
// still a pattern.
TEST_F(ShardList, ANameWithGlobCharactersThatExistsIsThatFile) {
  write_file(at("train-00[1].tar"), make_tar({{"y.txt", "y"}}));
  EXPECT_EQ(resolve_shard_list(at("train-00[1].tar")), Names{at("train-00[1].tar")});
  EXPECT_EQ(resolve_shard_list(at("train-00[2].tar")), Names{at("train-002.tar")});
}

TEST_F(ShardList, MissingShardsAreNamedAndCounted) {
  EXPECT_EQ(config_error_of(at("train-{000..004}.tar")),
            "data.shards: shard " + at("train-003.tar") +
                " does not exist (2 of 5 listed shards are missing)");
  EXPECT_EQ(config_error_of(at("none-*.tar")), "data.shards: no file matches " + at("none-*.tar") +
                                                   " (1 of 1 listed shards are missing)");
  // A listed path names the line of the list file to mend (comments and
  // blank lines counted as lines, as an editor counts them).
  write_file(at("list.txt"), "train-000.tar\n# spare\n\ngone.tar\n");
  EXPECT_EQ(config_error_of(at("list.txt")), "data.shards: shard " + at("gone.tar") + " (line 4 of list file " +
                                                 at("list.txt") + ") does not exist (1 of 2 listed shards are missing)");
  ASSERT_EQ(::mkdir(at("folder.tar").c_str(), 0755), 0);
  write_file(at("list2.txt"), "train-000.tar\nfolder.tar\n");
  EXPECT_EQ(config_error_of(at("list2.txt")), "data.shards: shard " + at("folder.tar") + " (line 2 of list file " +
                                                  at("list2.txt") + ") is not a regular file");
}

TEST_F(ShardList, LinksThatLeadNowhereSayWhy) {
  // The user can see these names in ls: "does not exist" would be wrong.
  ASSERT_EQ(::symlink("gone.tar", at("dangling.tar").c_str()), 0);
  EXPECT_EQ(config_error_of(at("dangling.tar")),
            "data.shards: shard " + at("dangling.tar") +
                " is a symbolic link to nothing (its target does not exist) (1 of 1 listed shards are missing)");
  ASSERT_EQ(::symlink("loop-b.tar", at("loop-a.tar").c_str()), 0);
  ASSERT_EQ(::symlink("loop-a.tar", at("loop-b.tar").c_str()), 0);
  EXPECT_EQ(config_error_of(at("loop-a.tar")),
            "data.shards: shard " + at("loop-a.tar") +
                " is a symbolic link loop (1 of 1 listed shards are missing)");
}

// Found in a folder or by a glob, a link to nothing is said as one named
// is, before step 1: it was listed, and the run failed at its first step
// ("cannot open"), or under on_corrupt skip read as a corrupt shard.
TEST_F(ShardList, LinksToNothingFoundInAFolderOrByAGlobSayWhy) {
  TempDirectory folder;
  write_file(folder.path() + "/a-000.tar", make_tar({{"x.txt", "x"}}));
  ASSERT_EQ(::symlink("gone.tar", (folder.path() + "/a-001.tar").c_str()), 0);
  const std::string why = " is a symbolic link to nothing (its target does not exist)";
  EXPECT_EQ(config_error_of(folder.path()), "data.shards: shard " + folder.path() + "/a-001.tar" + why);
  EXPECT_EQ(config_error_of(folder.path() + "/a-*.tar"), "data.shards: shard " + folder.path() + "/a-001.tar" + why);
}

TEST_F(ShardList, EmptyListsAreConfigErrors) {
  EXPECT_EQ(config_error_of(""), "data.shards: no shards given ('')");
  EXPECT_EQ(config_error_of(" , "), "data.shards: no shards given (' , ')");
  TempDirectory empty;
  EXPECT_EQ(config_error_of(empty.path()),
            "data.shards: directory " + empty.path() +
                " holds no shards (*.tar, *.tar.gz, *.tgz, *.tar.zst, *.tar.zstd, *.tar.bz2, *.tar.xz)");
  write_file(at("empty.txt"), "# nothing yet\n");
  EXPECT_EQ(config_error_of(at("empty.txt")),
            "data.shards: no shards given ('" + at("empty.txt") + "')");
}

// A list file whose read fails is not an empty list: /proc/self/mem is a
// regular file whose read at offset 0 fails with EIO (page 0 is unmapped).
TEST_F(ShardList, AListFileThatCannotBeReadSaysSo) {
  EXPECT_EQ(config_error_of("/proc/self/mem"), "data.shards: list file /proc/self/mem: read failed after 0 paths");
}

// A glob that cannot read one of the folders it walks is refused, though
// another folder matched: that folder's shards were left out of the data
// set without a word. Unreadable for an unprivileged user (root reads any
// folder), so each resolve runs in a child process that drops to nobody.
TEST_F(ShardList, AGlobThatCannotReadOneOfItsFoldersIsRefused) {
  for (const char* folder : {"a", "b"}) {
    ASSERT_EQ(::mkdir(at(folder).c_str(), 0755), 0);
    write_file(at(std::string(folder) + "/x.tar"), make_tar({{"x.txt", "x"}}));
  }
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(at("b").c_str(), 0), 0);
  EXPECT_EXIT(
      resolve_as_nobody_and_exit(at("*/*.tar")),
      ::testing::ExitedWithCode(2), "data.shards: cannot read " + at("b") + " for " + at("\\*/\\*.tar") +
                                        " \\(its shards would be left out\\): Permission denied");
  // A last part without glob characters is looked up, not listed: the
  // lookup's refusal was "no such file" to glob(3).
  EXPECT_EXIT(
      resolve_as_nobody_and_exit(at("*/x.tar")),
      ::testing::ExitedWithCode(2), "data.shards: cannot look up " + at("b/x.tar") + " for " + at("\\*/x.tar") +
                                        " \\(its shards would be left out\\): Permission denied");
  ASSERT_EQ(::chmod(at("b").c_str(), 0755), 0);  // for the folder's removal
  for (const char* pattern : {"*/*.tar", "*/x.tar"})
    EXPECT_EQ(resolve_shard_list(at(pattern)), (Names{at("a/x.tar"), at("b/x.tar")})) << pattern;
  // A folder without the file (and files the folder glob met) are no lookup failure.
  ASSERT_EQ(::mkdir(at("c").c_str(), 0755), 0);
  EXPECT_EQ(resolve_shard_list(at("*/x.tar")), (Names{at("a/x.tar"), at("b/x.tar")}));
}

// The same file listed twice, however spelt, is read twice an epoch: named
// with its count, each repeated file once and in list order.
TEST_F(ShardList, RepeatedShardsAreFoundHoweverSpelt) {
  EXPECT_TRUE(repeated_shards(resolve_shard_list(dir_.path())).empty());
  ASSERT_EQ(::symlink(at("c.tgz").c_str(), at("link-to-c.tgz").c_str()), 0);
  const Names listed = resolve_shard_list(at("train-000.tar") + "," + dir_.path() + "/./train-000.tar," +
                                          at("c.tgz") + "," + at("train-00*.tar"));
  const std::vector<RepeatedShard> repeated = repeated_shards(listed);
  ASSERT_EQ(repeated.size(), 1u);
  EXPECT_EQ(repeated[0].path, at("train-000.tar"));
  EXPECT_EQ(repeated[0].listings, 3);
  const std::vector<RepeatedShard> linked = repeated_shards({at("link-to-c.tgz"), at("b.tar.gz"), at("c.tgz")});
  ASSERT_EQ(linked.size(), 1u);
  EXPECT_EQ(linked[0].path, at("link-to-c.tgz"));
  EXPECT_EQ(linked[0].listings, 2);
}

TEST(ShardExtension, WebdatasetShardNames) {
  for (const char* name :
       {"a.tar", "a.tar.gz", "a.tgz", "a.tar.zst", "a.tar.zstd", "a.tar.bz2", "a.tar.xz", "dir.x/b.tar"}) {
    EXPECT_TRUE(has_shard_extension(name)) << name;
  }
  for (const char* name : {"a.txt", "tar", ".tar", "a.tar.bak", "a.zip"}) {
    EXPECT_FALSE(has_shard_extension(name)) << name;
  }
}

}  // namespace
}  // namespace trainbench
