// The user-error contract of the real binary: every bad configuration, bad
// override and bad command line exits 2 with exactly one line on stderr that
// names what is wrong ("trainbench: <message>").
#include <fcntl.h>     // open
#include <signal.h>    // kill
#include <sys/stat.h>  // mkfifo
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, execv, dup2, chdir, mkdtemp

#include <algorithm>   // std::count
#include <chrono>      // the deadline for a child that does not exit
#include <cstdlib>     // setenv, getenv: HOME for the ~/ paths
#include <filesystem>  // the temporary working directory
#include <fstream>     // writing configs, reading stderr
#include <iterator>    // std::istreambuf_iterator
#include <string>
#include <thread>      // sleeping between waitpid polls
#include <vector>

#include <gtest/gtest.h>

#include "kernels/engine.h"                  // built_backends
#include "tests/trainer/bad_config_cases.h"  // the table shared with test_config
#include "trainer/cli.h"                     // default_run_config

namespace trainbench {
namespace {

namespace fs = std::filesystem;

// DESIGN.md: `run` without CONFIG trains tiny without a GPU and a
// GPU-sized model with one (it trained tiny on an H200 too).
TEST(Cli, RunWithoutAConfigTrainsAGpuSizedModelWhereAGpuIsVisible) {
  GpuInventory none;
  none.why_none = "no driver";
  EXPECT_EQ(default_run_config({}, none), "preset:tiny");
  GpuInventory one;
  one.gpus.push_back(GpuInfo{0, "NVIDIA H200", int64_t{141} << 30, 9, 0, "", ""});
  const bool cuda_built = built_backends().find("cuda") != std::string::npos;
  EXPECT_EQ(default_run_config({}, one), cuda_built ? "preset:gpt2-124m" : "preset:tiny")
      << "a build without the CUDA engine trains on the CPU whatever is plugged in";
  // Asked for the CPU on a GPU host: tiny, not GPT-2 on the CPU.
  EXPECT_EQ(default_run_config({"train.device=cuda", "train.device=cpu"}, one), "preset:tiny");
  EXPECT_EQ(default_run_config({"train.device=cuda"}, none), "preset:gpt2-124m")
      << "the cuda engine asked for: its default, whatever then says there is no GPU";
}
using config_cases::BadConfigCase;
using config_cases::bad_config_cases;

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string stderr_text;
};

// Runs `trainbench args...` in `workdir`, stdout discarded, stderr captured.
// A child still running after the deadline (a CLI that accepted a bad config
// and started training) is killed and reported as a failure, not a hang.
RunResult run_trainbench(const std::vector<std::string>& args, const fs::path& workdir) {
  const fs::path stderr_path = workdir / "stderr.txt";
  std::vector<std::string> argv_storage = {TRAINBENCH_BINARY};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int null_fd = open("/dev/null", O_RDWR);
    const int err_fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (null_fd < 0 || err_fd < 0 || chdir(workdir.c_str()) != 0) _exit(126);
    dup2(null_fd, STDIN_FILENO);
    dup2(null_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  RunResult result;
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "trainbench did not exit within 120 s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream stderr_file(stderr_path);
  result.stderr_text.assign(std::istreambuf_iterator<char>(stderr_file), std::istreambuf_iterator<char>());
  return result;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "trainbench-cli-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? fs::path(pattern) : fs::path();
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Exit 2 and exactly one line, "trainbench: ..." containing each of `expected`.
void expect_user_error(const RunResult& result, const std::vector<std::string>& expected) {
  EXPECT_EQ(result.exit_code, 2) << result.stderr_text;
  const std::string& text = result.stderr_text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << "not one line:\n" << text;
  EXPECT_EQ(text.rfind("trainbench: ", 0), 0) << text;
  for (const std::string& item : expected)
    EXPECT_NE(text.find(item), std::string::npos) << "missing '" << item << "' in: " << text;
}

class CliBadConfig : public ::testing::TestWithParam<BadConfigCase> {};

TEST_P(CliBadConfig, ExitsTwoWithOneLine) {
  const BadConfigCase& bad = GetParam();
  const TempDir dir;
  const fs::path config_path = dir.path() / "bad.yaml";
  std::ofstream(config_path) << bad.yaml;
  std::vector<std::string> args = {"run", config_path.string()};
  for (const std::string& override_text : bad.overrides) {
    args.push_back("--set");
    args.push_back(override_text);
  }
  std::vector<std::string> expected = bad.expected;
  // An error in the file names the file; one from --set names the override.
  expected.push_back(bad.overrides.empty() ? config_path.string() : "--set ");
  expect_user_error(run_trainbench(args, dir.path()), expected);
}

INSTANTIATE_TEST_SUITE_P(Cases, CliBadConfig, ::testing::ValuesIn(bad_config_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CliErrors, MissingConfigFileNamesThePath) {
  const TempDir dir;
  const std::string missing = (dir.path() / "no-such.yaml").string();
  expect_user_error(run_trainbench({"run", missing}, dir.path()),
                    {"config file not found: " + missing, "tiny"});
}

// `--set a=1 b=2` takes b=2 for CONFIG: said so.
TEST(CliErrors, ASecondSettingAfterOneSetIsNamed) {
  const TempDir dir;
  expect_user_error(run_trainbench({"plan", "--set", "model.n_layers=3", "model.d_model=32"}, dir.path()),
                    {"config file not found: model.d_model=32", "each KEY=VALUE needs a --set of its own: --set "
                     "model.d_model=32"});
  const RunResult path = run_trainbench({"run", "configs/my=run.yaml"}, dir.path());
  EXPECT_EQ(path.stderr_text.find("--set of its own"), std::string::npos) << path.stderr_text;
}

TEST(CliErrors, BadOverrideOnAPreset) {
  const TempDir dir;
  expect_user_error(run_trainbench({"run", "tiny", "--set", "model.n_heads=6"}, dir.path()),
                    {"--set model.n_heads=6", "model.n_heads"});
}

TEST(CliErrors, StepsNotANumber) {
  const TempDir dir;
  expect_user_error(run_trainbench({"run", "tiny", "--steps", "abc"}, dir.path()), {"--steps"});
}

TEST(CliErrors, UnknownSubcommand) {
  const TempDir dir;
  expect_user_error(run_trainbench({"frobnicate"}, dir.path()), {"frobnicate"});
}

// An option before any command was "A subcommand is required".
TEST(CliErrors, AnUnknownOptionBeforeTheCommandIsNamed) {
  const TempDir dir;
  expect_user_error(run_trainbench({"-v"}, dir.path()), {"unknown option '-v' before the command", "--version"});
  expect_user_error(run_trainbench({"--frob", "run"}, dir.path()), {"unknown option '--frob' before the command"});
}

TEST(CliErrors, UnknownOption) {
  const TempDir dir;
  expect_user_error(run_trainbench({"run", "tiny", "--frobnicate"}, dir.path()), {"--frobnicate"});
}

// What a user typed comes back in the error as one line of bounded length:
// a 100 KB config path, --out and shards SPEC were echoed whole (twice for
// --out), a newline in a word split the line, a terminal escape reached the
// terminal. The start and the remedy at the end are kept.
TEST(CliErrors, WhatWasTypedIsEchoedOnOneBoundedLine) {
  const TempDir dir;
  const std::string long_word(100'000, 'L');
  const std::vector<std::vector<std::string>> commands = {
      {"run", long_word},
      {"run", "tiny", "--out", long_word + "/x.json"},
      {"shards", "verify", long_word},
      {long_word},
      {"run", "--" + long_word},
      {"run", "no\nsuch\rfile\x1b[31m.yaml"},
      {"bench", "no\nsuch"},
  };
  for (const std::vector<std::string>& args : commands) {
    const RunResult result = run_trainbench(args, dir.path());
    const std::string& text = result.stderr_text;
    const std::string shown = args.front().substr(0, 20) + " " + (args.size() > 1 ? args[1].substr(0, 20) : "");
    EXPECT_EQ(result.exit_code, 2) << shown << ": " << text.substr(0, 300);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << shown << ": " << text.substr(0, 300);
    EXPECT_LE(text.size(), 4600u) << shown << ": " << text.substr(0, 300);
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << shown << ": " << text;
    EXPECT_EQ(text.rfind("trainbench: ", 0), 0) << shown << ": " << text.substr(0, 300);
  }
  const RunResult config = run_trainbench({"run", long_word}, dir.path());
  // A name longer than a file name can be: stat says so (ENAMETOOLONG).
  EXPECT_NE(config.stderr_text.find("cannot reach config file LLL"), std::string::npos) << config.stderr_text.substr(0, 200);
  EXPECT_NE(config.stderr_text.find(": File name too long"), std::string::npos) << config.stderr_text.substr(0, 200);
  EXPECT_NE(config.stderr_text.find("bytes left out"), std::string::npos) << config.stderr_text.substr(0, 200);
  const RunResult escaped = run_trainbench({"bench", "no\nsuch"}, dir.path());
  EXPECT_NE(escaped.stderr_text.find("unknown bench command 'no\\nsuch'"), std::string::npos) << escaped.stderr_text;
}

// plan's LoRA row refuses a lora.rank that a full run never uses: the error
// says it is that row's, and names the --set (it named the preset).
TEST(CliErrors, PlansLoraRowNamesWhereItsValueWasSet) {
  const TempDir dir;
  expect_user_error(run_trainbench({"plan", "tiny", "--set", "lora.rank=100"}, dir.path()),
                    {"the LoRA row (plan compares it with full training): --set lora.rank=100: lora.rank: 100 exceeds "
                     "model.d_model (64)"});
}

// A path option's leading ~/ is the home folder, as data.shards' is:
// `--out=~/x` is one word that no shell expands, and a quoted '~/d/*.tar'
// reaches trainbench as typed; both went to a folder named "~" in the
// working folder. Without HOME such a path is refused, naming it.
TEST(CliErrors, APathOptionFromTheHomeFolderIsThere) {
  TempDir dir;
  const fs::path home = dir.path() / "home";
  fs::create_directories(home);
  const char* saved = std::getenv("HOME");
  const std::string home_before = saved != nullptr ? saved : "";
  ::setenv("HOME", home.c_str(), 1);
  const RunResult synth =
      run_trainbench({"shards", "synth", "--out=~/shards", "--count", "1", "--samples", "2", "--tokens", "16"},
                     dir.path());
  EXPECT_EQ(synth.exit_code, 0) << synth.stderr_text;
  EXPECT_TRUE(fs::exists(home / "shards" / "train-000000.tar"));
  const RunResult verify = run_trainbench({"shards", "verify", "~/shards/*.tar"}, dir.path());
  EXPECT_EQ(verify.exit_code, 0) << verify.stderr_text;
  const RunResult project = run_trainbench({"project", "tiny", "--out=~/projection.json"}, dir.path());
  EXPECT_EQ(project.exit_code, 0) << project.stderr_text;
  EXPECT_TRUE(fs::exists(home / "projection.json"));
  EXPECT_FALSE(fs::exists(dir.path() / "~")) << "a folder named ~ in the working folder";
  ::unsetenv("HOME");
  expect_user_error(run_trainbench({"bench", "compute", "tiny", "--out=~/c.json"}, dir.path()),
                    {"--out", "~/c.json starts in the home folder, but $HOME is not set"});
  if (saved != nullptr) ::setenv("HOME", home_before.c_str(), 1);
}

// A FIFO as CONFIG would block the read, a device would never end.
TEST(CliErrors, ConfigThatIsNotARegularFile) {
  const TempDir dir;
  const std::string fifo = (dir.path() / "fifo.yaml").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_user_error(run_trainbench({"run", fifo}, dir.path()), {"config file " + fifo + " is not a regular file"});
  expect_user_error(run_trainbench({"run", "/dev/urandom"}, dir.path()),
                    {"config file /dev/urandom is not a regular file"});
}

// A config larger than any config is refused before it is read whole (a
// data file given as the config, say).
TEST(CliErrors, AConfigFileOfMoreThan16MiBIsRefused) {
  const TempDir dir;
  const fs::path big = dir.path() / "big.yaml";
  { std::ofstream(big) << "model:\n"; }
  fs::resize_file(big, (16 << 20) + 1);
  expect_user_error(run_trainbench({"run", big.string()}, dir.path()),
                    {"config file " + big.string() + " is 16777217 bytes; a config is at most 16777216 (16 MiB)"});
}

// What only the cuda engine does, asked of the cpu engine: exit 2 naming the
// key, not a run that trains fp32 or attends otherwise than asked.
// train.device=cpu is refused with the config; under auto, the engine it
// resolved to is asked (no GPU visible: CUDA_VISIBLE_DEVICES empty).
TEST(CliErrors, WhatOnlyTheCudaEngineDoesIsRefusedOnTheCpuEngine) {
  const TempDir dir;
  expect_user_error(run_trainbench({"run", "tiny", "--set", "train.device=cpu", "--set", "train.precision=bf16"},
                                   dir.path()),
                    {"train.precision: bf16 needs train.device cuda or auto; the CPU backend computes in fp32"});
  expect_user_error(run_trainbench({"run", "tiny", "--set", "train.device=cpu", "--set", "train.attention=cudnn"},
                                   dir.path()),
                    {"train.attention: cudnn is the cuda engine's fused attention, but train.device is cpu"});
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = visible != nullptr ? visible : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const RunResult bf16 = run_trainbench({"run", "tiny", "--set", "train.precision=bf16"}, dir.path());
  const RunResult cudnn = run_trainbench({"run", "tiny", "--set", "train.attention=cudnn"}, dir.path());
  if (visible != nullptr) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else ::unsetenv("CUDA_VISIBLE_DEVICES");
  expect_user_error(bf16, {"train.precision: bf16 needs the cuda engine; the cpu engine is fp32"});
  expect_user_error(cudnn, {"train.attention: cudnn needs the cuda engine"});
}

// Numbers on the command line: a range that names the option, not CLI11's
// saturated values, 309-digit bounds, or nan taken as a number.
TEST(CliErrors, OptionNumbersOutOfRange) {
  const TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {{"bench", "io", "--readers", "0"}, {"--readers: must be an integer between 1 and 256 (got '0')"}},
      {{"bench", "io", "--readers", "1,100000"}, {"--readers", "between 1 and 256", "100000"}},
      {{"bench", "io", "--readers", "a"}, {"--readers", "between 1 and 256"}},
      {{"bench", "io", "--seconds", "0"}, {"--seconds: must be a number between"}},
      {{"bench", "io", "--seconds", "nan"}, {"--seconds", "'nan'"}},
      {{"bench", "comm", "--iters", "0"}, {"--iters", "between 1 and"}},
      {{"bench", "comm", "--factor", "nan"}, {"--factor", "'nan'"}},
      {{"project", "--layers", "0"}, {"--layers: must be an integer between 1 and 65536 (got '0')"}},
      {{"project", "--steps", "99999999999999999999"}, {"--steps", "between 1 and"}},
      // CLI11's delimiter dropped the empty item: 2,,4 projected from 2 and 4.
      {{"project", "--layers", "2,,4"}, {"--layers", "item 2 of '2,,4'"}},
      // A long value is quoted cut short, not whole on the one line.
      {{"project", "--fabric", std::string(300, 'x')}, {"--fabric '" + std::string(80, 'x') + "… (300 bytes)'"}},
      {{"project", "--nodes", "1,,2"}, {"--nodes", "item 2 of '1,,2'"}},
      {{"burnin", "tiny", "--duration", "0.5s"}, {"--duration 0.5s: at least 1s"}},
      {{"burnin", "tiny", "--duration", "5s", "--baseline", ""}, {"--baseline", "the path is empty"}},
      {{"plan", "--gpu-memory", "nan"}, {"--gpu-memory", "'nan'"}},
      {{"plan", "--gpu-memory", "inf"}, {"--gpu-memory", "'inf'"}},
      {{"plan", "--nodes", "99999999999999999999"}, {"--nodes", "between 1 and"}},
      // As run's: "" is no path (these wrote their default file, exit 0).
      {{"burnin", "tiny", "--out", ""}, {"--out", "the path is empty"}},
      {{"bench", "instrument", "--out", ""}, {"--out", "the path is empty"}},
      {{"bench", "compute", "--out", ""}, {"--out", "the path is empty"}},
      {{"bench", "io", "--out", ""}, {"--out", "the path is empty"}},
      {{"bench", "comm", "--out", ""}, {"--out", "the path is empty"}},
      // Exit 3, "filesystem error: cannot make absolute path: Invalid argument []".
      {{"shards", "pack", "", "--out", "/tmp/never-made-pack"}, {"INPUT_DIR", "the path is empty"}},
      // The measurement's own two-step job: train.steps=-5 was overridden
      // unseen and accepted.
      {{"bench", "compute", "--set", "train.steps=-5"},
       {"--set train.steps=-5: bench compute sets its own job's train.steps and train.warmup_steps"}},
      {{"bench", "instrument", "--set", " train.warmup_steps =0"},
       {"--set  train.warmup_steps =0: bench instrument sets its own job's"}},
      // Ignored without a word: the result went to the default name.
      {{"bench", "compute", "--set", "report.out=bc.json"},
       {"--set report.out=bc.json: bench compute writes its result where --out says"}},
      {{"bench", "instrument", "--set", "report.out=bi.json"}, {"bench instrument writes its result where --out says"}},
      {{"bench", "comm", "--set", "report.out=bc.json"}, {"bench comm writes its result where --out says"}},
      {{"bench", "io", "--set", "report.out=bi.json"}, {"bench io writes its result where --out says"}},
      // bench io makes the run's shards whatever data.source says: ones its
      // reader refused were written first, then called corrupt (exit 2 late).
      {{"bench", "io", "tiny", "--set", "data.source=synthetic", "--set", "data.max_sample_bytes=1000"},
       {"data.max_sample_bytes: 1000 is below the largest member of the shards made for the run", "3072 bytes"}},
      {{"project", "--set", "report.out=p.json"}, {"project writes its result where --out says"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.args[1] + " " + c.args[2] + " " + c.args.back());
    const RunResult result = run_trainbench(c.args, dir.path());
    expect_user_error(result, c.expected);
    EXPECT_EQ(result.stderr_text.find("179769313486"), std::string::npos) << result.stderr_text;
  }
}

// NCCL reduces device buffers: asked for on the cpu engine it is a
// contradiction in the config (exit 2), named by the override that made it.
TEST(CliErrors, NcclOnTheCpuEngine) {
  const TempDir dir;
  expect_user_error(
      run_trainbench({"run", "tiny", "--set", "train.device=cpu", "--set", "comm.backend=nccl"}, dir.path()),
      {"--set comm.backend=nccl", "comm.backend", "needs the cuda engine"});
}

// A fault aimed at a rank the job does not have was injected nowhere, and
// the burn-in meant to catch it said PASS.
TEST(CliErrors, AFaultInjectedIntoNoRankOfTheJob) {
  const TempDir dir;
  expect_user_error(run_trainbench({"burnin", "tiny", "--duration", "5s", "--set", "burnin.inject_slow_ms=50", "--set",
                                    "burnin.inject_slow_rank=1"},
                                   dir.path()),
                    {"burnin.inject_slow_rank 1 is not a rank of this job (ranks 0..0)"});
  expect_user_error(run_trainbench({"run", "tiny", "--steps", "6", "--set", "burnin.inject_bitflip_step=3", "--set",
                                    "burnin.inject_bitflip_rank=2"},
                                   dir.path()),
                    {"burnin.inject_bitflip_rank 2 is not a rank of this job"});
  expect_user_error(run_trainbench({"run", "tiny", "--steps", "6", "--set", "comm.inject_divergence_step=3"}, dir.path()),
                    {"comm.inject_divergence_step: one rank has no other to diverge from"});
  // The slow network on one rank held no collective, and the run passed.
  expect_user_error(run_trainbench({"run", "tiny", "--steps", "6", "--set", "comm.inject_delay_ms=50"}, dir.path()),
                    {"comm.inject_delay_ms: one rank has no collective to hold",
                     "(the fault would be injected nowhere)"});
  // Slow storage where nothing is read or written: exit 0, untouched.
  expect_user_error(run_trainbench({"run", "tiny", "--steps", "6", "--set", "data.source=synthetic", "--set",
                                    "data.inject_delay_ms=5"},
                                   dir.path()),
                    {"data.inject_delay_ms: data.source is synthetic", "(the fault would be injected nowhere)"});
  expect_user_error(run_trainbench({"run", "tiny", "--steps", "6", "--set", "checkpoint.every_steps=0", "--set",
                                    "checkpoint.inject_delay_ms=5"},
                                   dir.path()),
                    {"checkpoint.inject_delay_ms: checkpoint.every_steps is 0", "(the fault would be injected nowhere)"});
}

// Untimed steps left the burn-in's straggler and drift checks nothing to
// read, and its verdict was a PASS that had checked nothing.
TEST(CliErrors, ABurnInOfUntimedSteps) {
  const TempDir dir;
  expect_user_error(
      run_trainbench({"burnin", "tiny", "--duration", "5s", "--set", "report.instrument=false"}, dir.path()),
      {"report.instrument", "untimed", "straggler"});
  EXPECT_FALSE(fs::exists(dir.path() / "trainbench-burnin.json"));
}

// A checkpoint.dir holding a run's checkpoints: run offers --resume, which
// burnin and bench instrument do not have (they rejected the advice).
TEST(CliErrors, AUsedCheckpointFolderOffersResumeOnlyWhereThereIsOne) {
  const TempDir dir;
  const std::string ckpt = "checkpoint.dir=" + (dir.path() / "ckpt").string();
  const RunResult first = run_trainbench({"run", "tiny", "--steps", "4", "--set", "train.warmup_steps=1", "--set",
                                          "checkpoint.every_steps=2", "--set", ckpt},
                                         dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.stderr_text;
  const RunResult again = run_trainbench({"run", "tiny", "--steps", "4", "--set", "train.warmup_steps=1", "--set",
                                          "checkpoint.every_steps=2", "--set", ckpt},
                                         dir.path());
  expect_user_error(again, {"already holds checkpoints", "continue with --resume latest"});
  const RunResult burnin = run_trainbench(
      {"burnin", "tiny", "--duration", "5s", "--set", "checkpoint.every_steps=2", "--set", ckpt}, dir.path());
  expect_user_error(burnin, {"already holds checkpoints", "this command starts afresh: choose an empty checkpoint.dir"});
  EXPECT_EQ(burnin.stderr_text.find("--resume"), std::string::npos) << burnin.stderr_text;
  const RunResult instrument = run_trainbench({"bench", "instrument", "tiny", "--pairs", "2", "--block-steps", "2",
                                               "--set", "checkpoint.every_steps=1", "--set", ckpt},
                                              dir.path());
  expect_user_error(instrument, {"already holds checkpoints", "this command starts afresh"});
  EXPECT_EQ(instrument.stderr_text.find("--resume"), std::string::npos) << instrument.stderr_text;
}

// The data source's host memory is checked with the model's, before any of
// it is allocated: 4096 synthetic batches of 12000 x 128 tokens (~50 GB)
// failed part way through allocating them, as "the data loader's batch
// ring" (no loader here), or met the OOM killer. Needs less than ~50 GB of
// MemAvailable, as on CI.
TEST(CliErrors, DataThatCannotFitInHostMemoryIsSaidBeforeItIsAllocated) {
  const TempDir dir;
  const std::vector<std::string> common = {"--steps", "6", "--set", "checkpoint.every_steps=0", "--set",
                                           "train.micro_batch=12000", "--set", "model.seq_len=128"};
  std::vector<std::string> synthetic = {"run", "tiny", "--set", "data.source=synthetic", "--set",
                                        "data.synthetic_batches=4096"};
  synthetic.insert(synthetic.end(), common.begin(), common.end());
  const RunResult result = run_trainbench(synthetic, dir.path());
  EXPECT_EQ(result.exit_code, 3) << result.stderr_text;
  const std::string& text = result.stderr_text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << "not one line:\n" << text;
  EXPECT_EQ(text.rfind("trainbench: the data source needs 46.88 GiB of host memory per rank (data.synthetic_batches "
                       "4096 batches held in memory)", 0), 0) << text;
  EXPECT_NE(text.find("lower data.synthetic_batches"), std::string::npos) << text;
  EXPECT_EQ(text.find("batch ring"), std::string::npos) << text;
}

// A plan that does not fit names what fills it first: it named the batch
// and the depth whatever the plan held, never the widths (ffn_hidden
// 2147483647, 48 TiB, was told to lower train.micro_batch).
TEST(CliErrors, AModelThatCannotFitInHostMemoryNamesWhatFillsIt) {
  const TempDir dir;
  const auto refusal = [&](const std::vector<std::string>& sets) {
    std::vector<std::string> args = {"run", "tiny", "--steps", "6", "--set", "checkpoint.every_steps=0"};
    for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
    const RunResult result = run_trainbench(args, dir.path());
    EXPECT_EQ(result.exit_code, 3) << result.stderr_text;
    EXPECT_EQ(std::count(result.stderr_text.begin(), result.stderr_text.end(), '\n'), 1) << result.stderr_text;
    return result.stderr_text;
  };
  // 275e9 parameters (4.4 TB with gradients and AdamW state, past any
  // host), a short batch: the weights, gradients and AdamW state first.
  const std::string wide = refusal({"model.d_model=16384", "model.n_heads=128", "model.n_kv_heads=8",
                                    "model.n_layers=64", "model.ffn_hidden=65536", "model.seq_len=8",
                                    "train.micro_batch=1"});
  EXPECT_NE(wide.find("is available: lower the model: model.n_layers, d_model, ffn_hidden or vocab (weights, "
                      "gradients and AdamW state "),
            std::string::npos)
      << wide;
  EXPECT_NE(wide.find(", or train.micro_batch or model.seq_len (activations and workspace "), std::string::npos)
      << wide;
  // tiny's model, a long batch: the activations first.
  const std::string batch = refusal({"train.micro_batch=2000000"});  // about 2 TB
  EXPECT_NE(batch.find("is available: lower train.micro_batch or model.seq_len (activations and workspace "),
            std::string::npos)
      << batch;
}

// With train.device auto, whether nccl can run depends on the machine: no
// GPU (or no NCCL in the build) is an environment failure, exit 3, one line.
TEST(CliErrors, NcclWithoutAGpuExitsThreeWithOneLine) {
  const TempDir dir;
  const RunResult result = run_trainbench(
      {"run", "tiny", "--steps", "6", "--set", "comm.backend=nccl", "--set", "checkpoint.every_steps=0"}, dir.path());
  if (result.exit_code == 0) GTEST_SKIP() << "a GPU and the NCCL backend are here: the run trained";
  EXPECT_EQ(result.exit_code, 3) << result.stderr_text;
  const std::string& text = result.stderr_text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << "not one line:\n" << text;
  EXPECT_EQ(text.rfind("trainbench: comm.backend=nccl", 0), 0) << text;
}

}  // namespace
}  // namespace trainbench
