// trainer/config: presets, YAML files, --set overrides, validation and the
// one-line errors that name the key.
#include "trainer/config.h"

#include <sys/stat.h>  // mkfifo
#include <unistd.h>  // mkdtemp, chdir

#include <algorithm>   // std::count, std::find
#include <array>       // the keys first_config_difference compares
#include <cstdint>     // INT64_MAX
#include <filesystem>  // temporary config files, configs/ in the source tree
#include <fstream>     // writing them
#include <set>         // comparing name sets
#include <string>
#include <utility>     // std::pair: accepted lora.targets and how they are kept
#include <vector>

#include <gtest/gtest.h>

#include "dataloader/shard_tools.h"            // kMaxSynthShards
#include "tests/trainer/bad_config_cases.h"  // the table shared with test_cli_errors
#include "trainer/data_source.h"              // synth_samples_per_shard_for_run
#include "trainer/json_text.h"                // utf8_escaped: config strings into JSON

namespace trainbench {
namespace {

namespace fs = std::filesystem;
using config_cases::BadConfigCase;
using config_cases::bad_config_cases;
using config_cases::valid_yaml_with;

const fs::path kConfigsDir = fs::path(TRAINBENCH_SOURCE_DIR) / "configs";

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "trainbench-config-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? fs::path(pattern) : fs::path();
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return path_ / name;
  }

 private:
  fs::path path_;
};

// The message of the ConfigError `load` throws; a failure when it throws none.
template <typename Load>
std::string config_error(Load load) {
  try {
    load();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError thrown";
  return "";
}

TEST(Presets, TheDocumentedPresetsAreEmbedded) {
  const std::vector<std::string> names = preset_names();
  for (const char* name : {"tiny", "cpu-small", "gpt2-124m", "llama3-8b", "llama3-70b"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    EXPECT_TRUE(is_preset(name)) << name;
  }
  EXPECT_FALSE(is_preset("tiny.yaml"));
  EXPECT_FALSE(is_preset("huge"));
}

TEST(Presets, EveryPresetLoadsAndValidates) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const Config config = load_config(name);
    EXPECT_EQ(config.origin, "preset:" + name);
    EXPECT_NO_THROW(validate_config(config));
  }
}

// The embedded text must be the checked-in text: a stale build would
// otherwise benchmark a shape nobody can read.
TEST(Presets, EmbeddedPresetsEqualTheSourceTree) {
  std::set<std::string> file_names;
  for (const auto& entry : fs::directory_iterator(kConfigsDir)) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string name = entry.path().stem().string();
    file_names.insert(name);
    SCOPED_TRACE(name);
    const Config from_file = load_config(entry.path().string());
    EXPECT_EQ(from_file.origin, entry.path().string());
    EXPECT_EQ(config_to_json(from_file), config_to_json(load_config(name)));
  }
  const std::vector<std::string> names = preset_names();
  EXPECT_EQ(file_names, std::set<std::string>(names.begin(), names.end()));
}

TEST(Presets, TinyHasTheDocumentedShape) {
  const Config tiny = load_config((kConfigsDir / "tiny.yaml").string());
  EXPECT_EQ(tiny.model.vocab, 512);
  EXPECT_EQ(tiny.model.d_model, 64);
  EXPECT_EQ(tiny.model.n_layers, 2);
  EXPECT_EQ(tiny.model.n_heads, 4);
  EXPECT_EQ(tiny.model.n_kv_heads, 2);
  EXPECT_EQ(tiny.model.ffn_hidden, 192);
  EXPECT_EQ(tiny.model.seq_len, 64);
  EXPECT_EQ(tiny.train.micro_batch, 8);
  EXPECT_EQ(tiny.train.grad_accum, 1);
  EXPECT_EQ(tiny.train.steps, 40);
  EXPECT_EQ(tiny.train.warmup_steps, 5);
  EXPECT_DOUBLE_EQ(tiny.train.lr, 1e-3);
}

TEST(Presets, Llama3ShapesMatchParamsJson) {
  const Config llama8b = load_config("llama3-8b");
  EXPECT_EQ(llama8b.model.d_model, 4096);
  EXPECT_EQ(llama8b.model.n_layers, 32);
  EXPECT_EQ(llama8b.model.heads_per_kv(), 4);
  EXPECT_EQ(llama8b.model.head_dim(), 128);
  EXPECT_EQ(llama8b.model.ffn_hidden, 14336);
  EXPECT_EQ(llama8b.model.vocab, 128256);
  EXPECT_DOUBLE_EQ(llama8b.model.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(llama8b.model.norm_eps, 1e-5);
  const Config llama70b = load_config("llama3-70b");
  EXPECT_EQ(llama70b.model.n_layers, 80);
  EXPECT_EQ(llama70b.model.heads_per_kv(), 8);
  EXPECT_EQ(llama70b.model.ffn_hidden, 28672);
  EXPECT_EQ(llama70b.train.micro_batch, 1);
}

TEST(LoadConfig, PresetNamesInEveryForm) {
  // In a directory without configs/, "configs/tiny.yaml" falls back to the
  // embedded preset, as when trainbench runs outside the source tree.
  const TempDir dir;
  const fs::path previous = fs::current_path();
  fs::current_path(dir.path());
  EXPECT_EQ(load_config("tiny").origin, "preset:tiny");
  EXPECT_EQ(load_config("tiny.yaml").origin, "preset:tiny");
  EXPECT_EQ(load_config("configs/tiny.yaml").origin, "preset:tiny");
  EXPECT_EQ(load_config("./configs/tiny.yaml").origin, "preset:tiny");
  // A file that exists wins over the preset of the same name.
  dir.write("tiny.yaml", valid_yaml_with({{"model.n_layers", "3"}}));
  EXPECT_EQ(load_config("tiny.yaml").origin, "tiny.yaml");
  EXPECT_EQ(load_config("tiny.yaml").model.n_layers, 3);
  // Elsewhere a path is only a path.
  EXPECT_NE(config_error([] { load_config("other/tiny.yaml"); }), "");
  // "preset:NAME" is the embedded preset even beside a file of that name:
  // the commands' default when no CONFIG is given.
  dir.write("tiny", valid_yaml_with({{"model.n_layers", "3"}}));
  EXPECT_EQ(load_config("tiny").model.n_layers, 3);
  const Config preset = load_config("preset:tiny");
  EXPECT_EQ(preset.origin, "preset:tiny");
  EXPECT_EQ(preset.model.n_layers, 2);
  const std::string unknown = config_error([] { load_config("preset:tiny.yaml"); });
  EXPECT_EQ(unknown.rfind("no embedded preset tiny.yaml (", 0), 0) << unknown;
  fs::current_path(previous);
}

TEST(LoadConfig, MissingFileNamesThePathAndThePresets) {
  const std::string message = config_error([] { load_config("/nonexistent/run.yaml"); });
  EXPECT_EQ(message.rfind("config file not found: /nonexistent/run.yaml (embedded presets: ", 0), 0)
      << message;
  EXPECT_NE(message.find("tiny"), std::string::npos) << message;
}

TEST(LoadConfig, DirectoryIsRefused) {
  const TempDir dir;
  const std::string message = config_error([&] { load_config(dir.path().string()); });
  EXPECT_NE(message.find(dir.path().string()), std::string::npos) << message;
  EXPECT_NE(message.find("directory"), std::string::npos) << message;
}

// Stat before open: a FIFO would block reading the config, a device
// (/dev/urandom) would be read without end.
TEST(LoadConfig, SpecialFilesAreRefused) {
  const TempDir dir;
  const std::string fifo = (dir.path() / "fifo.yaml").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/urandom"), std::string("/dev/null")}) {
    const std::string message = config_error([&] { load_config(path); });
    EXPECT_EQ(message, "config file " + path + " is not a regular file");
  }
}

// A regular file whose read fails (/proc/self/mem reads EIO at offset 0):
// libstdc++ threw ios_base::failure, an internal error (exit 1).
TEST(LoadConfig, AFileThatCannotBeReadIsNamed) {
  const std::string message = config_error([&] { load_config("/proc/self/mem"); });
  EXPECT_EQ(message.rfind("cannot read config file /proc/self/mem: ", 0), 0u) << message;
}

// A config file that is there but cannot be reached, or a link to nothing,
// was "not found", and configs/tiny.yaml of that kind ran the embedded
// preset tiny in the user's file's place.
TEST(LoadConfig, AFileThatCannotBeReachedIsNotTakenForThePresetOfItsName) {
  const TempDir dir;
  const fs::path previous = fs::current_path();
  fs::current_path(dir.path());
  fs::create_directory("configs");
  fs::create_symlink("/nonexistent/run.yaml", "configs/tiny.yaml");
  EXPECT_EQ(config_error([] { load_config("configs/tiny.yaml"); }),
            "config file configs/tiny.yaml is a link to /nonexistent/run.yaml, which does not exist");
  // A link to itself: stat fails with ELOOP (a folder without search
  // permission fails with EACCES, which root does not see).
  fs::create_symlink("loop", "loop");
  const std::string message = config_error([] { load_config("loop/../configs/gpt2-124m.yaml"); });
  EXPECT_EQ(message.rfind("cannot reach config file loop/../configs/gpt2-124m.yaml: ", 0), 0u) << message;
  fs::current_path(previous);
}

// A trailing "---" adds an empty document, which loses nothing.
TEST(ParseConfig, AnEmptyDocumentAfterTheFirstIsAllowed) {
  EXPECT_EQ(parse_config("model:\n  n_layers: 3\n---\n", "x.yaml").model.n_layers, 3);
}

// Real shapes stay far below the size limits, long contexts included.
TEST(Validate, RealModelsAreWithinTheSizeLimits) {
  EXPECT_NO_THROW(load_config("llama3-70b", {"model.seq_len=131072"}));
  EXPECT_NO_THROW(load_config("llama3-70b", {"model.n_layers=126", "model.d_model=16384", "model.n_heads=128",
                                             "model.ffn_hidden=53248", "model.n_layers_full=126"}));
  EXPECT_NO_THROW(load_config("tiny", {"train.threads=1024", "data.readers=256", "model.n_layers=65536"}));
}

// A fault-injection delay sleeps: past an hour it is a typo, and 1e300
// overflowed the sleep into none at all.
TEST(Validate, InjectedDelaysAreAtMostAnHour) {
  for (const char* key : {"data.inject_delay_ms", "comm.inject_delay_ms", "checkpoint.inject_delay_ms",
                          "burnin.inject_slow_ms"}) {
    EXPECT_NO_THROW(load_config("tiny", {std::string(key) + "=3600000"})) << key;
    const std::string message = config_error([&] { load_config("tiny", {std::string(key) + "=1e300"}); });
    EXPECT_NE(message.find(std::string(key) + ": must be between 0 and 3600000"), std::string::npos) << message;
  }
}

// Periods and a timeout whose tiny or huge values are typos: 1e300 overflowed
// the NVML sampler's wait into a busy loop, 1e-300 made every step a health
// check, and comm.timeout_s=0.003 failed burn-in as "hung ... 0 s".
TEST(Validate, BurninPeriodsAndTheTimeoutsHaveARange) {
  const std::vector<std::array<std::string, 4>> ranges = {
      // key, smallest, largest, what is refused on either side
      {"burnin.nvml_every_s", "0.01", "3600", "must be between 0.01 and 3600"},
      {"burnin.health_every_s", "1", "86400", "must be between 1 and 86400"},
      {"comm.timeout_s", "1", "31536000", "must be between 1 and 31536000"},
      {"checkpoint.timeout_s", "1", "31536000", "must be between 1 and 31536000"},
  };
  for (const auto& [key, low, high, refusal] : ranges) {
    EXPECT_NO_THROW(load_config("tiny", {key + "=" + low})) << key;
    EXPECT_NO_THROW(load_config("tiny", {key + "=" + high})) << key;
    // 0 and -1 too: they were "must be > 0", which 0.5 is and is refused.
    for (const char* bad : {"1e300", "1e-300", "0.001", "0", "-1"}) {
      const std::string setting = key + "=" + bad;  // (clang before 16 cannot capture `key`, a structured binding)
      const std::string message = config_error([&] { load_config("tiny", {setting}); });
      EXPECT_NE(message.find(key + ": " + refusal), std::string::npos) << key << "=" << bad << ": " << message;
    }
  }
}

// The command lines' strict numbers: what CLI11 alone would saturate, read
// as octal or take as nan.
// What a resume or a burn-in baseline compares: the adapters, however their
// targets are written, and not the depth `project` projects to. Another
// model or other adapters still differ, named.
TEST(ConfigDifference, TargetsCompareAsTheAdaptersTheyBuild) {
  const auto json_of = [](const std::vector<std::string>& sets) {
    return config_to_json(load_config("tiny", sets));
  };
  const std::vector<std::array<const char*, 2>> keys = {{"model", ""}, {"lora", ""}};
  const nlohmann::json written = json_of({"train.mode=lora", "lora.targets=q,k,v,o"});
  for (const char* same : {"lora.targets=q, k, v, o", "lora.targets=o,q,k,v", "lora.targets=q,k,v,o,"})
    EXPECT_EQ(first_config_difference(written, json_of({"train.mode=lora", same}), keys).key, "") << same;
  EXPECT_EQ(first_config_difference(written, json_of({"train.mode=lora", "model.n_layers_full=32"}), keys).key, "");
  const ConfigDifference other = first_config_difference(written, json_of({"train.mode=lora", "lora.targets=q,v"}), keys);
  EXPECT_EQ(other.key, "lora.targets");
  EXPECT_EQ(other.first, "q,k,v,o");
  EXPECT_EQ(first_config_difference(written, json_of({"train.mode=lora", "model.n_layers=3"}), keys).key,
            "model.n_layers");
}

TEST(CommandLineNumbers, IntegersAndNumbersInRange) {
  EXPECT_EQ(integer_in_range("4", 1, 256), "");
  EXPECT_EQ(integer_in_range("256", 1, 256), "");
  EXPECT_EQ(integer_in_range("0", 1, 256), "must be an integer between 1 and 256 (got '0')");
  EXPECT_NE(integer_in_range("99999999999999999999", 1, INT64_MAX), "");
  EXPECT_NE(integer_in_range("0x10", 1, 256), "");
  EXPECT_NE(integer_in_range("a", 1, 256), "");
  EXPECT_NE(integer_in_range("", 1, 256), "");
  EXPECT_EQ(number_in_range("2.5", 0.001, 86400), "");
  EXPECT_EQ(number_in_range("nan", 0.001, 86400), "must be a number between 0.001 and 86400 (got 'nan')");
  EXPECT_NE(number_in_range("inf", 0.001, 86400), "");
  EXPECT_NE(number_in_range("0", 0.001, 86400), "");
}

// Sizes as the commands read them: exact in every digit, and a large
// integer is out of range, not "expected an integer" (it said so of
// 9000000000000000000, an integer).
TEST(CommandLineNumbers, ByteSizesAreExactAndLargeOnesAreOutOfRange) {
  const int64_t high = int64_t{9} * 1000 * 1000 * 1000 * 1000 * 1000 * 1000;
  int64_t bytes = -1;
  EXPECT_EQ(byte_size_in_range("64K", 0, high, &bytes), "");
  EXPECT_EQ(bytes, 65536);
  EXPECT_EQ(byte_size_in_range("64KB", 0, high, &bytes), "");
  EXPECT_EQ(bytes, 64000);
  EXPECT_EQ(byte_size_in_range("8999999999999999999", 0, high, &bytes), "");
  EXPECT_EQ(bytes, 8999999999999999999) << "not rounded through a double";
  EXPECT_EQ(byte_size_in_range("1234567890123456", 0, high, &bytes), "") << "16 digits, in range";
  EXPECT_EQ(bytes, 1234567890123456);
  for (const char* big : {"9000000000000000001", "99999999999999999999999", "99999999T", "8192P0"}) {
    const std::string error = byte_size_in_range(big, 0, high, &bytes);
    if (std::string(big) == "8192P0")
      EXPECT_EQ(error.rfind("expected bytes as an integer", 0), 0u) << error;
    else
      EXPECT_EQ(error, "must be between 0 and 9000000000000000000 bytes (got '" + std::string(big) + "')");
  }
  EXPECT_EQ(byte_size_in_range("", 0, high, &bytes).rfind("expected bytes", 0), 0u);
  EXPECT_EQ(byte_size_in_range("1X", 0, high, &bytes).rfind("expected bytes", 0), 0u);
  EXPECT_EQ(byte_size_in_range("0", 1, high, &bytes), "must be between 1 and 9000000000000000000 bytes (got '0')");
}

// A path key written ~/... is in the home folder, in a file and in --set
// (one word, which no shell expands: the run made a folder named "~");
// without HOME it is refused, naming the key. Only a leading ~/ is taken.
TEST(ParseConfig, PathsWrittenFromTheHomeFolderAreExpanded) {
  const char* saved = std::getenv("HOME");
  const std::string home_before = saved != nullptr ? saved : "";
  ::setenv("HOME", "/home/someone", 1);
  const Config config = parse_config("checkpoint:\n  dir: ~/ck\n", "x.yaml",
                                     {"data.shards=~/data/{0..3}.tar", "report.out=~/r.json"});
  EXPECT_EQ(config.checkpoint.dir, "/home/someone/ck");
  EXPECT_EQ(config.data.shards, "/home/someone/data/{0..3}.tar");
  EXPECT_EQ(config.report.out, "/home/someone/r.json");
  EXPECT_EQ(parse_config("", "x.yaml", {"checkpoint.dir=a/~/b"}).checkpoint.dir, "a/~/b");
  EXPECT_EQ(parse_config("", "x.yaml", {"checkpoint.dir=~other/b"}).checkpoint.dir, "~other/b");
  ::unsetenv("HOME");
  // Named where it was written, as every other refusal of a value is (the
  // file's line was missing).
  const auto refusal = [](const std::string& yaml, const std::vector<std::string>& overrides) -> std::string {
    try {
      parse_config(yaml, "x.yaml", overrides);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "accepted without HOME";
  };
  EXPECT_EQ(refusal("", {"checkpoint.dir=~/ck"}),
            "--set checkpoint.dir=~/ck: checkpoint.dir: ~/ck starts in the home folder, but $HOME is not set: write "
            "the whole path");
  EXPECT_EQ(refusal("train:\n  steps: 4\ncheckpoint:\n  dir: ~/ck\n", {}),
            "x.yaml:4: checkpoint.dir: ~/ck starts in the home folder, but $HOME is not set: write the whole path");
  if (saved != nullptr) ::setenv("HOME", home_before.c_str(), 1);
}

// `--set checkpoint.dir=~` is YAML's null, which a string key took as its
// default "": checkpoints went to a temporary folder removed at exit, in
// silence. A path key's bare ~ is refused, on the command line and in a
// file; null, "" and nothing after the colon keep the default.
TEST(ParseConfig, APathKeysBareTildeIsRefused) {
  for (const char* key : {"checkpoint.dir", "data.shards", "report.out"}) {
    for (const char* value : {"~", " ~ "}) {
      try {
        parse_config("", "x.yaml", {std::string(key) + "=" + value});
        ADD_FAILURE() << key << "=" << value << " accepted";
      } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(key) + ": '~' alone is YAML's null (the default \"\"), not "
                                             "the home folder"),
                  std::string::npos) << e.what();
      }
    }
  }
  const std::string problem = "'~' alone is YAML's null (the default \"\"), not the home folder";
  EXPECT_EQ(config_error([] { parse_config("checkpoint:\n  dir: ~\n", "x.yaml"); })
                .rfind("x.yaml:2: checkpoint.dir: " + problem, 0), 0u);
  EXPECT_EQ(config_error([] { parse_config("data: {shards: ~}\n", "x.yaml"); }).rfind("x.yaml:1: data.shards: " + problem, 0),
            0u);
  EXPECT_EQ(config_error([] { parse_config("report:\n  out: ~  # home\n", "x.yaml"); })
                .rfind("x.yaml:2: report.out: " + problem, 0), 0u);
  EXPECT_EQ(config_error([] { parse_config("\xef\xbb\xbf# caf\xc3\xa9\ncheckpoint:\n  dir: ~\n", "x.yaml"); })
                .rfind("x.yaml:3: checkpoint.dir: " + problem, 0), 0u) << "after a byte-order mark and a 2-byte letter";
  for (const char* nothing : {"checkpoint:\n  dir:\n", "checkpoint:\n  dir: null\n", "checkpoint:\n  dir: \"\"\n",
                              "checkpoint: {dir: , keep: 2}\n", "checkpoint:\n  dir:\n  keep: 2\nreport:\n  out: ~/r.json\n"})
    EXPECT_EQ(parse_config(nothing, "x.yaml").checkpoint.dir, "") << nothing;
  EXPECT_EQ(parse_config("checkpoint:\n  dir: ~x\n", "x.yaml").checkpoint.dir, "~x");
  EXPECT_EQ(parse_config("", "x.yaml", {"checkpoint.dir=null"}).checkpoint.dir, "");
  EXPECT_EQ(parse_config("", "x.yaml", {"checkpoint.dir=\"~\""}).checkpoint.dir, "~");
}

// A NUL byte was "malformed YAML: unknown escape character" with the byte
// after it; it is named as what it is, where it is.
TEST(ParseConfig, ANulByteIsNamedWithItsLineAndColumn) {
  try {
    parse_config(std::string("model:\n  n_layers: 3\n  d_\0model: 64\n", 30), "bin.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "bin.yaml:3:5: a NUL byte: a config is YAML text (a binary file, or UTF-16 "
                                     "without its byte-order mark?)");
  }
  // UTF-16 with its mark is YAML too: NULs and all.
  std::string utf16 = "\xff\xfe";
  for (const char c : std::string("model:\n  n_layers: 3\n")) utf16 += std::string{c, '\0'};
  EXPECT_EQ(parse_config(utf16, "wide.yaml").model.n_layers, 3);
}

TEST(ParseConfig, EmptyFileKeepsEveryDefault) {
  // Every key has a default, the model's included (the tiny shape), so an
  // empty file is a runnable config.
  for (const std::string text : {"", "# only a comment\n", "---\n"}) {
    const Config config = parse_config(text, "empty.yaml");
    const Config defaults;
    EXPECT_EQ(config_to_json(config), config_to_json(defaults));
    EXPECT_EQ(config.model.d_model, default_model_shape().d_model);
  }
  // A file that states one key changes only that key.
  const Config one_key = parse_config("model:\n  n_layers: 5\n", "one.yaml");
  EXPECT_EQ(one_key.model.n_layers, 5);
  EXPECT_EQ(one_key.model.d_model, default_model_shape().d_model);
}

TEST(ParseConfig, EmptySectionsAreAllowed) {
  const Config config = parse_config(valid_yaml_with({}) + "data:\nreport:\n", "x.yaml");
  EXPECT_EQ(config.data.source, "shards");
}

TEST(ParseConfig, NumbersAsPeopleWriteThem) {
  struct Case {
    std::string value;
    double expected;
  };
  for (const Case& c : std::vector<Case>{{"1e-3", 1e-3}, {"3e-4", 3e-4}, {"3E-4", 3e-4},
                                         {"0.0005", 5e-4}, {".5", 0.5}, {"2", 2.0}, {"+1e-2", 1e-2}}) {
    SCOPED_TRACE(c.value);
    EXPECT_DOUBLE_EQ(parse_config(valid_yaml_with({{"train.lr", c.value}}), "x.yaml").train.lr,
                     c.expected);
  }
  EXPECT_EQ(parse_config(valid_yaml_with({{"train.steps", "1000"}}), "x.yaml").train.steps, 1000);
  EXPECT_EQ(parse_config(valid_yaml_with({{"train.steps", "+7"}}), "x.yaml").train.steps, 7);
  // Quoted scalars are the same text to a person.
  EXPECT_EQ(parse_config(valid_yaml_with({{"train.steps", "\"9\""}}), "x.yaml").train.steps, 9);
  EXPECT_EQ(parse_config(valid_yaml_with({{"report.out", "'r.json'"}}), "x.yaml").report.out, "r.json");
}

TEST(Overrides, ChangeValuesInOrder) {
  const Config tiny = load_config("tiny");
  const Config config = load_config(
      "tiny", {"model.n_layers=3", "train.lr=3e-4", "model.n_layers=5", "report.out=out/r.json",
               "train.device=cpu", "train.precision=fp32"});
  EXPECT_EQ(config.model.n_layers, 5);  // the later override wins
  EXPECT_DOUBLE_EQ(config.train.lr, 3e-4);
  EXPECT_EQ(config.report.out, "out/r.json");
  EXPECT_EQ(config.train.device, "cpu");
  EXPECT_EQ(config.train.precision, "fp32");
  EXPECT_EQ(config.model.d_model, tiny.model.d_model);  // untouched keys keep the file's value
  EXPECT_EQ(config.train.steps, tiny.train.steps);
}

TEST(Overrides, RepairAFileBecauseValidationComesLast) {
  const std::string broken = valid_yaml_with({{"model.n_heads", "6"}});
  EXPECT_NE(config_error([&] { parse_config(broken, "x.yaml"); }), "");
  EXPECT_EQ(parse_config(broken, "x.yaml", {"model.n_heads=8"}).model.n_heads, 8);
}

// train.deterministic: on by default (bit-exact runs); off lets the cuda
// engine take cuDNN's fastest attention backward; anything else is refused.
TEST(Overrides, DeterministicIsABooleanOnByDefault) {
  EXPECT_TRUE(load_config("tiny").train.deterministic);
  EXPECT_FALSE(load_config("tiny", {"train.deterministic=false"}).train.deterministic);
  const std::string message = config_error([] { load_config("tiny", {"train.deterministic=sometimes"}); });
  EXPECT_NE(message.find("train.deterministic"), std::string::npos) << message;
}

TEST(Overrides, ValueMayContainEquals) {
  EXPECT_EQ(load_config("tiny", {"report.out=a=b.json"}).report.out, "a=b.json");
}

TEST(Output, JsonIsNestedAndTyped) {
  const nlohmann::json json = config_to_json(load_config("tiny"));
  ASSERT_EQ(json.size(), 8u);
  for (const char* section : {"model", "train", "lora", "data", "comm", "checkpoint", "report", "burnin"})
    EXPECT_TRUE(json.contains(section)) << section;
  EXPECT_TRUE(json["model"]["vocab"].is_number_integer());
  EXPECT_EQ(json["model"]["vocab"], 512);
  EXPECT_TRUE(json["train"]["lr"].is_number_float());
  EXPECT_TRUE(json["comm"]["overlap"].is_boolean());
  EXPECT_DOUBLE_EQ(json["train"]["lr"].get<double>(), 1e-3);
  EXPECT_EQ(json["train"]["precision"], "auto");
  EXPECT_EQ(json["data"]["source"], "shards");
  EXPECT_EQ(json["report"]["out"], "");
}

TEST(Output, LinesFollowTheTableAndRoundTripThroughOverrides) {
  const Config tiny = load_config("tiny");
  const std::vector<std::string> lines = config_to_lines(tiny);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front(), "model.vocab: 512");
  EXPECT_NE(std::find(lines.begin(), lines.end(), "train.lr: 0.001"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "report.out: \"\""), lines.end());
  // Every printed key is a valid --set key, and feeding the lines back
  // reproduces the config: the table really drives all four paths.
  std::vector<std::string> overrides;
  size_t json_keys = 0;
  const nlohmann::json json = config_to_json(tiny);
  for (const auto& [section, keys] : json.items()) json_keys += keys.size();
  EXPECT_EQ(lines.size(), json_keys);
  for (const std::string& line : lines) {
    const size_t colon = line.find(": ");
    ASSERT_NE(colon, std::string::npos) << line;
    overrides.push_back(line.substr(0, colon) + "=" + line.substr(colon + 2));
  }
  const Config rebuilt = parse_config("", "lines", overrides);
  EXPECT_EQ(config_to_json(rebuilt), config_to_json(tiny));
}

TEST(Validate, AcceptsProgrammaticConfigAndNamesOrigin) {
  Config config = load_config("tiny");
  EXPECT_NO_THROW(validate_config(config));
  config.model.n_heads = 6;
  EXPECT_EQ(config_error([&] { validate_config(config); }),
            "preset:tiny: model.n_heads: 6 does not divide model.d_model (64)");
}

// Each bad input, written to a file and loaded like a user's config.
class BadConfig : public ::testing::TestWithParam<BadConfigCase> {};

TEST_P(BadConfig, IsRefusedWithOneLineNamingTheKey) {
  const BadConfigCase& bad = GetParam();
  const TempDir dir;
  const fs::path path = dir.write("x.yaml", bad.yaml);
  const std::string message = config_error([&] { load_config(path.string(), bad.overrides); });
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 0) << message;
  for (const std::string& expected : bad.expected)
    EXPECT_NE(message.find(expected), std::string::npos) << "missing '" << expected << "' in: " << message;
  // An error in the file names the file; one from --set names the override.
  if (bad.overrides.empty())
    EXPECT_EQ(message.rfind(path.string() + ":", 0), 0) << message;
  else
    EXPECT_EQ(message.rfind("--set ", 0), 0) << message;
  if (!bad.at_line_with.empty()) {
    const size_t at = bad.yaml.find(bad.at_line_with);
    ASSERT_NE(at, std::string::npos);
    const auto line = 1 + std::count(bad.yaml.begin(), bad.yaml.begin() + at, '\n');
    EXPECT_EQ(message.rfind(path.string() + ":" + std::to_string(line) + ":", 0), 0) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BadConfig, ::testing::ValuesIn(bad_config_cases()),
                         [](const auto& info) { return info.param.name; });

// An error line: control bytes and bytes that are not UTF-8 escaped, UTF-8
// kept; a long one cut in its middle on a character's start, its start and
// its end (the remedy) kept.
TEST(ErrorLine, IsOneLineOfBoundedLength) {
  EXPECT_EQ(error_line("a\nb\rc\td\x1b[0m\x7f caf\xc3\xa9 \xff"), "a\\nb\\rc\\td\\x1b[0m\\x7f caf\xc3\xa9 \\xff");
  EXPECT_EQ(error_line(std::string("nul\0byte", 8)), "nul\\x00byte");
  std::string long_text = "config file not found: ";
  for (int i = 0; i < 20000; ++i) long_text += "\xc3\xa9";  // é, two bytes each
  long_text += " (see --help)";
  const std::string line = error_line(long_text);
  EXPECT_LE(line.size(), kMaxErrorLineBytes + 64);
  EXPECT_EQ(line.rfind("config file not found: \xc3\xa9", 0), 0) << line.substr(0, 80);
  EXPECT_EQ(line.substr(line.size() - 13), " (see --help)");
  EXPECT_NE(line.find(" bytes left out) … "), std::string::npos);
  EXPECT_EQ(utf8_escaped(line), line) << "a cut inside a character";
  const std::string short_text(kMaxErrorLineBytes, 'x');
  EXPECT_EQ(error_line(short_text), short_text);
}

// Config strings go into JSON (the result, the manifest) with their bytes
// that are not UTF-8 as \xNN; valid UTF-8 is unchanged, so is plain ASCII.
TEST(ConfigJson, StringsThatAreNotUtf8AreEscapedByteByByte) {
  EXPECT_EQ(utf8_escaped("/data/shards-{000..007}.tar"), "/data/shards-{000..007}.tar");
  EXPECT_EQ(utf8_escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(utf8_escaped("a\xff"), "a\\xff");
  EXPECT_EQ(utf8_escaped("\xc3"), "\\xc3") << "a sequence cut short";
  EXPECT_EQ(utf8_escaped("\xc0\xaf"), "\\xc0\\xaf") << "an overlong '/'";
  EXPECT_EQ(utf8_escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80") << "a surrogate";
  EXPECT_EQ(utf8_escaped("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80") << "above U+10FFFF";
  Config config;
  config.checkpoint.dir = "/ck\xfd";
  const nlohmann::json json = config_to_json(config);
  EXPECT_EQ(json.at("checkpoint").at("dir"), "/ck\\xfd");
  EXPECT_NO_THROW(json.dump());
  EXPECT_EQ(json_text(nlohmann::json("x\xff")), "\"x\xef\xbf\xbd\"") << "U+FFFD where nothing escaped it";
}

TEST(ConfigErrors, MalformedYamlNamesLineAndColumn) {
  const std::string message =
      config_error([] { parse_config("model:\n  vocab: 512\n  d_model: 64: 3\n", "configs/x.yaml"); });
  EXPECT_EQ(message.rfind("configs/x.yaml:3:", 0), 0) << message;
  EXPECT_NE(message.find(": malformed YAML: "), std::string::npos) << message;
}

// yaml-cpp 0.7 reads a quoted scalar left open before the file's final
// newline as running to its end: `out: "r.json` swallowed the train section
// into a file name, exit 0 on the defaults.
TEST(ConfigErrors, AQuoteLeftOpenIsMalformedNotTheRestOfTheFile) {
  for (const char* text : {"report:\n  out: \"/tmp/r.json\ntrain:\n  steps: 2\n",
                           "report:\n  out: '/tmp/r.json\ntrain:\n  steps: 2\n\n  \n",
                           "report:\n  out: \"abc\\\"\n"}) {
    const std::string message = config_error([&] { parse_config(text, "configs/x.yaml"); });
    EXPECT_EQ(message.rfind("configs/x.yaml:", 0), 0) << text << ": " << message;
    EXPECT_NE(message.find(": malformed YAML: "), std::string::npos) << text << ": " << message;
  }
}

// yaml-cpp's LoadAll never ends on a ',' outside [ ] or { }: it made empty
// documents until memory ran out (a config file "," was exit 3 "out of
// memory", or the OOM killer). Malformed YAML, with its place.
TEST(ConfigErrors, AStrayCommaIsMalformedNotEndlessDocuments) {
  EXPECT_EQ(config_error([] { parse_config(",\n", "x.yaml"); }),
            "x.yaml:1:1: malformed YAML: a ',' outside [ ] or { } (or more than 64 documents)");
  EXPECT_EQ(config_error([] { parse_config("[a,b],", "x.yaml"); }),
            "x.yaml:1:6: malformed YAML: a ',' outside [ ] or { } (or more than 64 documents)");
}

// One token leaves nothing to predict: the loss was exactly 0 at every
// step, every check passed. A --set value of two YAML documents set the
// first in silence.
TEST(ConfigErrors, ATokenlessVocabularyAndASetOfTwoDocumentsAreRefused) {
  EXPECT_NE(config_error([] { load_config("tiny", {"model.vocab=1"}); }).find("model.vocab: 1 token leaves nothing to predict"),
            std::string::npos);
  EXPECT_NO_THROW(load_config("tiny", {"model.vocab=2", "data.eos_token=1"}));
  EXPECT_EQ(config_error([] { load_config("tiny", {"train.steps=3\n---\n9"}); }),
            "--set train.steps=3 --- 9: train.steps: the value holds 2 YAML documents; a --set takes one");
  EXPECT_EQ(load_config("tiny", {"train.steps=30\n---\n"}).train.steps, 30) << "an empty document after it loses nothing";
}

TEST(ConfigErrors, UnknownKeySuggestsTheClosest) {
  EXPECT_EQ(config_error([] { load_config("tiny", {"train.warmup=3"}); }),
            "--set train.warmup=3: unknown key 'train.warmup' (did you mean 'train.warmup_steps'?)");
  EXPECT_EQ(config_error([] { load_config("tiny", {"lr=3e-4"}); }),
            "--set lr=3e-4: unknown key 'lr' (did you mean 'train.lr'?)");
  EXPECT_EQ(config_error([] { load_config("tiny", {"zzz.qqq=3"}); }),
            "--set zzz.qqq=3: unknown key 'zzz.qqq'");
  EXPECT_EQ(config_error([] { load_config("tiny", {"model=3"}); }),
            "--set model=3: unknown key 'model' ('model' is a section, not a key: name one of its keys, e.g. "
            "model.vocab)");
}

// Hints where the closest name by edits was wrong or none: a section used as
// a key ("train.lora" was "did you mean 'train.lr'?"), a YAML merge key
// (which yaml-cpp does not read), a name in capitals, the --set spelling as
// a file's section, a key that is not a name, and a file of CR line ends.
TEST(ConfigErrors, HintsForSectionsMergeKeysCapitalsAndLineEnds) {
  EXPECT_EQ(config_error([] { parse_config("train:\n  lora:\n    rank: 8\n", "x.yaml"); }),
            "x.yaml:2: unknown key 'train.lora' ('lora' is a section, not a key: name one of its keys, e.g. lora.rank)");
  EXPECT_EQ(config_error([] { parse_config("train:\n  <<: {lr: 1}\n", "x.yaml"); }),
            "x.yaml:2: unknown key 'train.<<' (a YAML merge key, which yaml-cpp does not read: write the keys out)");
  EXPECT_EQ(config_error([] { load_config("tiny", {"MODEL.N_LAYERS=3"}); }),
            "--set MODEL.N_LAYERS=3: unknown key 'MODEL.N_LAYERS' (did you mean 'model.n_layers'? names are lower "
            "case)");
  EXPECT_EQ(config_error([] { parse_config("model.n_layers: 3\n", "x.yaml"); }),
            "x.yaml:1: unknown section 'model.n_layers': in a file, write model: and under it, indented, n_layers:");
  const std::string null_section = config_error([] { parse_config("~: 1\n", "x.yaml"); });
  EXPECT_EQ(null_section.rfind("x.yaml:1: a section's name is an empty value; sections are model, ", 0), 0u)
      << null_section;
  EXPECT_EQ(config_error([] { parse_config("model:\n  [a, b]: 1\n", "x.yaml"); }),
            "x.yaml:2: model: a key's name is a list");
  EXPECT_EQ(config_error([] { parse_config("model:\r  n_layers: 3\r", "x.yaml"); }),
            "x.yaml: its lines end in a lone carriage return (CR), which YAML does not read as a line end; save it "
            "with LF or CRLF line endings");
  EXPECT_EQ(parse_config("model:\r\n  n_layers: 3\r\n", "x.yaml").model.n_layers, 3) << "CRLF is read";
}

// A shard glob or brace pattern unquoted on the command line is YAML
// syntax: "the referenced anchor is not defined", "a map is not a string".
TEST(ConfigErrors, AStringValueThatIsYamlSyntaxSaysToQuoteIt) {
  EXPECT_EQ(config_error([] { load_config("tiny", {"data.shards=*.tar"}); }),
            "--set data.shards=*.tar: data.shards: malformed value: the referenced anchor is not defined (a value "
            "starting with '*' is YAML syntax: quote it, e.g. --set 'data.shards=\"*.tar\"')");
  EXPECT_EQ(config_error([] { load_config("tiny", {"data.shards={a,b}.tar"}); }),
            "--set data.shards={a,b}.tar: data.shards: a map is not a string (a value starting with '{' is YAML "
            "syntax: quote it, e.g. --set 'data.shards=\"{a,b}.tar\"')");
  EXPECT_EQ(load_config("tiny", {"data.shards=\"*.tar\""}).data.shards, "*.tar");
  // A number key's list is no quoting matter.
  EXPECT_EQ(config_error([] { load_config("tiny", {"model.n_layers=[3]"}); }).find("quote it"), std::string::npos);
}

// yaml-cpp 0.7 reads a quote left open before a final newline as closed at
// the end: `--set 'checkpoint.dir="/tmp/ck<newline>'` was the folder
// "/tmp/ck " (exit 0), where without the newline it is malformed.
TEST(Overrides, AQuoteLeftOpenBeforeANewlineIsMalformed) {
  for (const char* text : {"checkpoint.dir=\"/tmp/ck\n", "checkpoint.dir='/tmp/ck\n", "model.n_layers=\"3\n"}) {
    const std::string message = config_error([&] { load_config("tiny", {text}); });
    EXPECT_NE(message.find("malformed value: illegal EOF in scalar"), std::string::npos) << message;
  }
  EXPECT_EQ(load_config("tiny", {"model.n_layers=3\n"}).model.n_layers, 3);
  EXPECT_EQ(last_override_scalar({"checkpoint.dir=\"/tmp/ck\n"}, "checkpoint.dir", "x"), "x");
}

// lora.targets: names of q, k, v, o, gate, up, down separated by commas,
// blanks around a name allowed and one comma after the last. An empty entry
// ("q,,k" trained q and k, printed as written), a blank inside a name ("q k"
// was read as 'qk') and a list of nothing (",", which YAML reads as nothing
// on the command line) are refused naming the entry.
TEST(ConfigErrors, LoraTargetsRefuseEmptyEntriesAndBlanksInsideNames) {
  const auto targets_error = [](const std::string& value) {
    return config_error([&] { load_config("tiny", {"train.mode=lora", "lora.targets=" + value}); });
  };
  EXPECT_EQ(targets_error("q,,k"),
            "--set lora.targets=q,,k: lora.targets: entry 2 of 'q,,k' is empty (names are separated by single commas)");
  EXPECT_EQ(targets_error(",q"),
            "--set lora.targets=,q: lora.targets: entry 1 of ',q' is empty (names are separated by single commas)");
  EXPECT_EQ(targets_error("q,k,,"),
            "--set lora.targets=q,k,,: lora.targets: entry 3 of 'q,k,,' is empty (names are separated by single "
            "commas)");
  EXPECT_EQ(targets_error("q k"), "--set lora.targets=q k: lora.targets: 'q k' is not one of q, k, v, o, gate, up, "
                                  "down (names are separated by commas)");
  for (const std::string value : {",", "\",\"", " , "})
    EXPECT_EQ(targets_error(value), "--set lora.targets=" + value + ": lora.targets: ',' names no projection, only "
                                    "empty entries (list any of q, k, v, o, gate, up, down, separated by commas)");
  EXPECT_EQ(targets_error("q,v,q"), "--set lora.targets=q,v,q: lora.targets: 'q' is listed twice");
  EXPECT_EQ(targets_error("q, k ,q"), "--set lora.targets=q, k ,q: lora.targets: 'q' is listed twice");
  EXPECT_EQ(targets_error("[q, k]"), "--set lora.targets=[q, k]: lora.targets: a list is not a string; write the "
                                     "names separated by commas, e.g. q,k,v,o");
  // Checked in every mode, and in a file with its line.
  EXPECT_EQ(config_error([] { parse_config("lora:\n  targets: q,,k\n", "x.yaml"); }),
            "x.yaml:2: lora.targets: entry 2 of 'q,,k' is empty (names are separated by single commas)");
  EXPECT_EQ(config_error([] { parse_config("lora:\n  targets: [q, k]\n", "x.yaml"); }),
            "x.yaml:2: lora.targets: a list is not a string; write the names separated by commas, e.g. q,k,v,o");
  // Accepted, and kept (printed, recorded) as the adapters it builds, in the order written.
  for (const auto& [value, kept] : std::vector<std::pair<std::string, std::string>>{
           {"q,k,v,o", "q,k,v,o"}, {"q, k, v, o", "q,k,v,o"}, {" o ,\tq ", "o,q"}, {"q,k,v,o,", "q,k,v,o"},
           {"gate,up,down", "gate,up,down"}, {"\"q, v\"", "q,v"}}) {
    EXPECT_EQ(load_config("tiny", {"train.mode=lora", "lora.targets=" + value}).lora.targets, kept) << value;
    EXPECT_EQ(parse_config("lora:\n  targets: " + value + "\n", "x.yaml").lora.targets, kept) << value;
  }
  // Nothing is no adapters: refused in lora mode, allowed in full mode.
  EXPECT_EQ(targets_error(""), "--set lora.targets=: lora.targets: names no projection (any of q, k, v, o, gate, "
                               "up, down)");
  EXPECT_EQ(load_config("tiny", {"lora.targets="}).lora.targets, "");
}

// A value, key or override in a message is cut to its first 80 bytes (never
// inside a UTF-8 character) and its length: a 200 KB value was echoed whole.
TEST(ConfigErrors, LongValuesAreShortenedInMessages) {
  const std::string big(200000, 'x');
  const std::string shown = std::string(80, 'x') + "… (200000 bytes)";
  EXPECT_EQ(config_error([&] { parse_config("train:\n  precision: " + big + "\n", "x.yaml"); }),
            "x.yaml:2: train.precision: '" + shown + "' is not one of auto, fp32, bf16");
  EXPECT_EQ(config_error([&] { parse_config("data:\n  field: " + big + "\n", "x.yaml"); }),
            "x.yaml:2: data.field: '" + shown + "': the last extension must be a token format: u16, u32, npy or txt");
  EXPECT_EQ(config_error([&] { parse_config("train:\n  steps: " + std::string(200000, '9') + "\n", "x.yaml"); }),
            "x.yaml:2: train.steps: '" + std::string(80, '9') + "… (200000 bytes)' is out of range");
  // --set: the override as well as the value.
  EXPECT_EQ(config_error([&] { load_config("tiny", {"train.precision=" + big}); }),
            "--set train.precision=" + std::string(64, 'x') + "… (200016 bytes): train.precision: '" + shown +
                "' is not one of auto, fp32, bf16");
  EXPECT_EQ(config_error([&] { load_config("tiny", {"train." + big + "=1"}); }),
            "--set train." + std::string(74, 'x') + "… (200008 bytes): unknown key 'train." + std::string(74, 'x') +
                "… (200006 bytes)'");
  // 'é' is two bytes: 40 of them fit in 80, the 41st would be cut in half.
  std::string accents;
  for (int i = 0; i < 100; ++i) accents += "é";
  std::string forty;
  for (int i = 0; i < 40; ++i) forty += "é";
  EXPECT_EQ(config_error([&] { parse_config("train:\n  precision: x" + accents + "\n", "x.yaml"); }),
            "x.yaml:2: train.precision: 'x" + forty.substr(0, 78) + "… (201 bytes)' is not one of auto, fp32, bf16");
  // 80 bytes are shown whole.
  EXPECT_EQ(config_error([] { parse_config("train:\n  precision: " + std::string(80, 'y') + "\n", "x.yaml"); }),
            "x.yaml:2: train.precision: '" + std::string(80, 'y') + "' is not one of auto, fp32, bf16");
}

// yaml-cpp stops at 499 levels of lists and maps within each other and
// said "bad file"; the message says what is wrong and where.
TEST(ConfigErrors, NestingTooDeepIsSaidAsSuch) {
  // (Read without its trailing newline: the mark is on the line it is on.)
  EXPECT_EQ(config_error([] { parse_config(std::string(10000, '[') + "\n", "deep.yaml"); }),
            "deep.yaml:1:1: YAML nested too deep: at most 499 levels of lists and maps are read");
  std::string maps;
  for (int depth = 0; depth < 1000; ++depth) maps += std::string(static_cast<size_t>(depth), ' ') + "a:\n";
  EXPECT_EQ(config_error([&] { parse_config(maps, "deep.yaml"); }),
            "deep.yaml:499:501: YAML nested too deep: at most 499 levels of lists and maps are read");
  EXPECT_EQ(config_error([] { load_config("tiny", {"train.steps=" + std::string(600, '[')}); }),
            "--set train.steps=" + std::string(68, '[') + "… (612 bytes): train.steps: value nested too deep: at "
            "most 499 levels of lists and maps are read");
  // As deep as the limit allows is read, and refused for what it is.
  EXPECT_EQ(config_error([] { parse_config("train: " + std::string(498, '[') + std::string(498, ']'), "x.yaml"); }),
            "x.yaml:1: train: expected a map of keys, not a list");
}

// A custom tag (!foo, !!binary, a %TAG handle's) asked for a type that
// trainbench has no reading of and was dropped without a word; YAML's
// standard tags are read as the key reads the value untagged.
TEST(ConfigErrors, CustomTagsAreRefusedStandardTagsAreRead) {
  const std::string rest = " is not one trainbench reads; remove it (YAML's standard !!str, !!int, !!float, !!bool "
                           "and !!null may stay)";
  EXPECT_EQ(config_error([] { parse_config("train:\n  precision: !foo bf16\n", "x.yaml"); }),
            "x.yaml:2: train.precision: tag !foo" + rest);
  EXPECT_EQ(config_error([] { parse_config("train:\n  steps: !foo\n", "x.yaml"); }),
            "x.yaml:2: train.steps: tag !foo" + rest);
  EXPECT_EQ(config_error([] { parse_config("train:\n  steps: !!binary 10\n", "x.yaml"); }),
            "x.yaml:2: train.steps: tag !!binary" + rest);
  EXPECT_EQ(config_error([] { parse_config("train:\n  !foo steps: 10\n", "x.yaml"); }),
            "x.yaml:2: train.steps: tag !foo" + rest);
  EXPECT_EQ(config_error([] { parse_config("train: !foo\n  steps: 10\n", "x.yaml"); }),
            "x.yaml:1: train: tag !foo" + rest);
  EXPECT_EQ(config_error([] { parse_config("--- !foo\ntrain:\n  steps: 10\n", "x.yaml"); }),
            "x.yaml:1: the top level: tag !foo" + rest);
  EXPECT_EQ(config_error([] {
              parse_config("%TAG !e! tag:example.com,2000:\n---\ntrain:\n  steps: !e!n 10\n", "x.yaml");
            }),
            "x.yaml:4: train.steps: tag !<tag:example.com,2000:n>" + rest);
  EXPECT_EQ(config_error([] { load_config("tiny", {"train.precision=!foo bf16"}); }),
            "--set train.precision=!foo bf16: train.precision: tag !foo" + rest);
  // Standard tags: the value is checked for the key as ever.
  const Config tagged = parse_config(
      "train:\n  steps: !!int 12\n  lr: !!float 0.01\n  precision: !!str fp32\n  deterministic: !!bool false\n"
      "  device: !<tag:yaml.org,2002:str> cpu\nreport: !!map\n  out: !!null\n",
      "x.yaml");
  EXPECT_EQ(tagged.train.steps, 12);
  EXPECT_DOUBLE_EQ(tagged.train.lr, 0.01);
  EXPECT_EQ(tagged.train.precision, "fp32");
  EXPECT_FALSE(tagged.train.deterministic);
  EXPECT_EQ(tagged.train.device, "cpu");
  EXPECT_EQ(tagged.report.out, "");
  EXPECT_EQ(load_config("tiny", {"train.steps=!!str 12"}).train.steps, 12);
  EXPECT_EQ(config_error([] { parse_config("train:\n  steps: !!int ten\n", "x.yaml"); }),
            "x.yaml:2: train.steps: 'ten' is not an integer");
}

// The default run's synthetic shards hold about the run's tokens, at most
// 2^30: train.steps has no upper bound, and its product with the batch and
// the world size once overflowed int64 (a negative count, then 1 sample).
TEST(SyntheticShards, SizedToTheRunAndCappedWithoutOverflow) {
  Config config = load_config("tiny");
  const int64_t count = synth_shard_count(config, 1);
  const int64_t small = synth_samples_per_shard_for_run(config, 1);
  config.train.steps *= 2;
  EXPECT_GT(synth_samples_per_shard_for_run(config, 1), small) << "twice the steps, more samples";
  config.train.steps = INT64_MAX / 2;
  const int64_t cap = ((int64_t{1} << 30) / config.data.synth_tokens_per_sample + count - 1) / count;
  EXPECT_EQ(synth_samples_per_shard_for_run(config, 1), cap);
  EXPECT_EQ(synth_samples_per_shard_for_run(config, 4096),
            ((int64_t{1} << 30) / config.data.synth_tokens_per_sample + synth_shard_count(config, 4096) - 1) /
                synth_shard_count(config, 4096));
}

// The run's own shards deal every reader of the job as many (8 for 3
// readers were 3, 3 and 2, which given shards are warned of).
TEST(SyntheticShards, EveryReaderOfTheJobGetsAsMany) {
  Config config = load_config("tiny");
  config.data.synth_shards = 8;
  for (const int64_t readers : {1, 2, 3, 4, 5}) {
    config.data.readers = readers;
    for (const int64_t world : {1, 2, 3, 16}) {
      const int64_t count = synth_shard_count(config, world);
      EXPECT_EQ(count % (readers * world), 0) << readers << " readers, " << world << " ranks";
      EXPECT_GE(count, 8);
      EXPECT_LT(count, std::max<int64_t>(8, readers * world) + readers * world);
    }
  }
  config.data.readers = 3;
  config.data.synth_shards = kMaxSynthShards;
  EXPECT_EQ(synth_shard_count(config, 1), kMaxSynthShards) << "not past the limit";
}

// The run's own shards against its reader's limit: a limit exactly the
// largest member is enough, a byte less is refused; given shards are the
// user's and are not judged by it.
TEST(SyntheticShards, TheirLargestMemberMustPassTheSampleLimit) {
  const Config config = load_config("tiny");
  const int64_t largest = synth_largest_member_bytes(run_shard_samples(config));
  EXPECT_EQ(largest, (1024 + 512) * 2) << "u16 ids, up to half again data.synth_tokens_per_sample";
  EXPECT_NO_THROW(load_config("tiny", {"data.max_sample_bytes=" + std::to_string(largest)}));
  EXPECT_THROW(load_config("tiny", {"data.max_sample_bytes=" + std::to_string(largest - 1)}), ConfigError);
  EXPECT_NO_THROW(load_config("tiny", {"data.max_sample_bytes=1", "data.shards=/data/train-{000..007}.tar"}));
  EXPECT_NO_THROW(load_config("tiny", {"data.max_sample_bytes=1", "data.source=synthetic"}));
  // payload.bin, when it is the larger: 1.5 × its mean.
  EXPECT_EQ(synth_largest_member_bytes(run_shard_samples(load_config(
                "tiny", {"data.synth_payload_bytes=100000", "data.max_sample_bytes=150000"}))),
            150000);
  EXPECT_THROW(load_config("tiny", {"data.synth_payload_bytes=100000", "data.max_sample_bytes=149999"}),
               ConfigError);
}

}  // namespace
}  // namespace trainbench
