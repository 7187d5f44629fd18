#include "trainer/shards_command.h"

#include <unistd.h>  // access

#include <CLI/CLI.hpp>  // the command line parser
#include <cstdint>      // INT64_MAX
#include <cctype>       // std::isdigit, std::toupper
#include <chrono>       // timing for MB/s
#include <cstdio>
#include <filesystem>  // creating output directories
#include <stdexcept>   // std::invalid_argument, std::runtime_error
#include <string>
#include <tuple>    // std::tie
#include <utility>  // std::pair
#include <vector>

#include "dataloader/data_error.h"    // DataError: a bad spec or unknown field
#include "dataloader/shard_list.h"    // resolve_shard_list for verify's SPEC; has_shard_extension, repeated_shards
#include "dataloader/shard_tools.h"   // synthesize_shards, pack_directory, verify_shards
#include "dataloader/shard_writer.h"  // shard_name: checking pack's --out pattern; first_shard_from: the leftovers
#include "dataloader/token_decode.h"  // field_is_an_extension: verify --field
#include "comm/launch_detect.h"        // launcher_rank, launcher_task_count: one writer under mpirun
#include "trainer/cli.h"              // exit codes
#include "trainer/cli_validators.h"  // integer_range: numbers checked as typed
#include "trainer/config.h"          // DataSection: verify's member limit is the loader's
#include "trainer/interrupt_cleanup.h"  // wait_if_interrupted: no error line after a signal
#include "trainer/json_text.h"          // error_line: what is printed of a failure
#include "trainer/progress_display.h"   // ProgressDisplay: synth, pack and verify on stderr
#include "trainer/report.h"           // human_bytes

namespace trainbench {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

[[noreturn]] void user_error(const std::string& message) { throw CommandError{kExitUserError, message}; }

// Sizes as every command reads them (byte_size_in_range): 64K = 65536, 64KB = 64000.
int64_t parse_bytes(const std::string& text, const std::string& option) {
  int64_t bytes = 0;
  const std::string error = byte_size_in_range(text, 0, int64_t{9} * 1000 * 1000 * 1000 * 1000 * 1000 * 1000, &bytes);
  if (!error.empty()) user_error(option + ": " + error);
  return bytes;
}

int64_t parse_count(const std::string& text, const std::string& option) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) user_error(option + " '" + text + "': expected an integer");
  return value;
}

// "MEAN" or "MEAN:SPREAD"; a missing SPREAD is 0.
template <typename Parse>
std::pair<int64_t, int64_t> parse_mean_spread(const std::string& text, const std::string& option,
                                              Parse parse) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return {parse(text, option), 0};
  return {parse(text.substr(0, colon), option), parse(text.substr(colon + 1), option)};
}

// Output directories are created up front, so a path the user cannot write
// is a user error naming the option, not a failure halfway through. The
// folders made for it are removed again, if still empty, when the command
// fails before writing into them: a mistyped INPUT_DIR, an input with no
// files or a full disk leaves no empty folder behind.
class OutputDirectory {
 public:
  OutputDirectory(const std::string& dir, const std::string& option) {
    std::error_code error;
    for (fs::path p = fs::absolute(dir, error); !error && !p.empty() && !fs::exists(p, error);
         p = p.parent_path()) {
      created_.push_back(p);  // deepest first
      if (p == p.parent_path()) break;
    }
    error.clear();
    fs::create_directories(dir, error);
    if (error) user_error(option + " " + dir + ": cannot create the directory: " + error.message());
    if (access(dir.c_str(), W_OK) != 0) user_error(option + " " + dir + ": the directory is not writable");
  }
  OutputDirectory(const OutputDirectory&) = delete;
  OutputDirectory& operator=(const OutputDirectory&) = delete;
  ~OutputDirectory() {
    std::error_code ignored;  // fs::remove removes a folder only while it is empty
    for (const fs::path& p : created_) fs::remove(p, ignored);
  }
  // The command succeeded: whatever it made stays.
  void keep() { created_.clear(); }

 private:
  std::vector<fs::path> created_;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void print_summary_line(const char* name, const std::string& value) {
  std::printf("%-9s%s\n", name, value.c_str());
}

void print_throughput(int64_t bytes, double seconds) {
  print_summary_line("bytes", std::to_string(bytes) + " (" + human_bytes(static_cast<double>(bytes)) + ")");
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f", seconds);
  print_summary_line("seconds", text);
  std::snprintf(text, sizeof(text), "%.1f", seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0);
  print_summary_line("MB/s", text);
}

std::string shard_range(const std::vector<std::string>& paths) {
  if (paths.empty()) return "0";
  if (paths.size() == 1) return "1 (" + paths.front() + ")";
  return std::to_string(paths.size()) + " (" + paths.front() + " .. " + paths.back() + ")";
}

// After --overwrite: a directory spec would read a shard left by an
// earlier, longer run too.
void note_shards_left_from_earlier_run(const std::string& pattern, size_t written) {
  // Any number past the last written, not only the next: an earlier series
  // with a gap (shards removed by hand) left its later shards all the same.
  const std::string next = first_shard_from(pattern, static_cast<int64_t>(written));
  if (!next.empty())
    std::fprintf(stderr,
                 "trainbench: note: %s and later shards are from an earlier run; remove them if a directory "
                 "spec should not read them\n",
                 next.c_str());
}

}  // namespace

ShardsCommand::ShardsCommand(CLI::App& app) {
  shards_ = app.add_subcommand("shards", "make, convert and check webdataset tar shards");

  synth_ = shards_->add_subcommand(
      "synth", "write seeded synthetic token shards (the same options give byte-identical files)");
  SynthArguments& s = synth_args_;
  synth_->add_option("--out", s.out, "output directory (created if missing)")
      ->type_name("DIR")
      ->required()
      ->transform(home_path());
  synth_->add_option("--prefix", s.prefix, "shard file prefix: DIR/PREFIX-000000.tar, ... (default: train)")
      ->type_name("PREFIX");
  synth_->add_option("--count", s.count, "number of shards")
      ->type_name("N")
      ->required()
      ->transform(integer_range(1, kMaxSynthShards));
  CLI::Option* samples = synth_->add_option("--samples", s.samples, "samples per shard")
                             ->type_name("N")
                             ->transform(integer_range(1, kMaxSynthSamplesPerShard));
  CLI::Option* size = synth_
                          ->add_option("--size", s.size,
                                       "target shard size: a shard ends before the sample that would pass it "
                                       "(64M = 64 MiB, 1GB = 10^9)")
                          ->type_name("BYTES");
  samples->excludes(size);
  synth_
      ->add_option("--tokens", s.tokens,
                   "tokens per sample, uniform in [MEAN-SPREAD, MEAN+SPREAD]; SPREAD is below MEAN and "
                   "defaults to 0 (default: 512:256)")
      ->type_name("MEAN[:SPREAD]");
  synth_->add_option("--vocab", s.vocab, "token ids are uniform in [0, V) (default: 50257)")
      ->type_name("V")
      ->transform(integer_range(1, int64_t{1} << 31));
  synth_
      ->add_option(
          "--field", s.field,
          "token member: u16, u32 (raw little-endian), npy, txt (printable ASCII bytes) (default: u16)")
      ->type_name("u16|u32|npy|txt");
  synth_
      ->add_option("--payload-bytes", s.payload_bytes,
                   "a random payload.bin member per sample of this size, uniform in [BYTES-SPREAD, "
                   "BYTES+SPREAD] (emulates images/audio; default: none)")
      ->type_name("BYTES[:SPREAD]");
  synth_->add_option("--seed", s.seed, "random seed (default: 1)")
      ->type_name("S")
      ->transform(integer_range(0, INT64_MAX));
  synth_->add_flag("--overwrite", s.overwrite, "write over shards of the same names already in DIR");

  pack_ = shards_->add_subcommand("pack",
                                  "pack a directory tree into shards: files sharing a path up to the first "
                                  "dot of their name form one sample");
  pack_->add_option("INPUT_DIR", pack_args_.input_dir, "the tree to pack")
      ->type_name("DIR")
      ->required()
      ->transform(home_path());
  pack_
      ->add_option("--out", pack_args_.out,
                   "output directory (shards DIR/shard-000000.tar, ...) or a name pattern with %06d")
      ->type_name("DIR|PATTERN")
      ->required()
      ->transform(home_path());
  pack_
      ->add_option("--max-size", pack_args_.max_size,
                   "start a new shard before a sample would pass this size (default: 1G; 0 = no limit)")
      ->type_name("BYTES");
  pack_
      ->add_option("--max-count", pack_args_.max_count,
                   "at most this many samples per shard (default: no limit)")
      ->type_name("N")
      ->transform(integer_range(0, INT64_MAX));
  pack_->add_flag("--overwrite", pack_args_.overwrite, "write over shards of the same names already there");

  verify_ = shards_->add_subcommand(
      "verify", "read every shard whole and list every error (exit 2 when the data has any)");
  verify_
      ->add_option("SPEC", verify_args_.spec,
                   "shards as data.shards takes them: brace pattern, glob, directory, list file or path")
      ->type_name("SPEC")
      ->required()
      ->transform(home_path());
  verify_
      ->add_option("--field", verify_args_.field, "also decode this token member (u16, u32, npy, txt, or e.g. tokens.u16)")
      ->type_name("EXT");
  // Without --field: refused in run_verify, saying which member to name
  // (CLI11's "--vocab requires --field" did not).
  verify_->add_option("--vocab", verify_args_.vocab, "with --field: token ids must be below V")
      ->type_name("V")
      ->transform(integer_range(1, int64_t{1} << 31));
  verify_
      ->add_option("--max-sample-bytes", verify_args_.max_sample_bytes,
                   "a member larger than this is an error, as for the loader (default: data.max_sample_bytes' "
                   "default, 256M)")
      ->type_name("BYTES");
}

bool ShardsCommand::parsed() const { return shards_->parsed(); }

int ShardsCommand::run() {
  // What failed once a signal arrived is the cleanup removing the output
  // from under the writer: no message, the signal ends the process.
  const auto report = [](const std::string& message, int code) {
    wait_if_interrupted();
    std::fprintf(stderr, "trainbench: %s\n", error_line(message).c_str());
    return code;
  };
  // Started as several tasks (mpirun -np N, srun -n N, as DLIO's generator
  // is): every task would write the same shards. Rank 0 does the work, the
  // others end at once.
  if (const int tasks = launcher_task_count(); tasks > 1) {
    if (launcher_rank() > 0) return kExitOk;
    std::fprintf(stderr, "trainbench: note: started as %d tasks; shards runs in one process, rank 0's\n", tasks);
  }
  try {
    if (synth_->parsed()) return run_synth();
    if (pack_->parsed()) return run_pack();
    if (verify_->parsed()) return run_verify();
    user_error("shards: a subcommand is required (synth, pack, verify; see trainbench shards --help)");
  } catch (const CommandError& e) {
    return report(e.message, e.code);
  } catch (const std::invalid_argument& e) {
    return report(e.what(), kExitUserError);
  } catch (const DataError& e) {
    return report(e.what(), e.scope() == CorruptScope::kEnvironment ? kExitEnvironmentError : kExitUserError);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitEnvironmentError);
  } catch (const std::runtime_error& e) {
    // Writing or reading failed underneath valid options: disk full, I/O error.
    return report(e.what(), kExitEnvironmentError);
  }
}

int ShardsCommand::run_synth() {
  const SynthArguments& a = synth_args_;
  SynthOptions options;
  options.out_dir = a.out;
  options.prefix = a.prefix;
  options.count = a.count;
  // Given, not non-empty: `--size ''` was "give --samples N or --size BYTES".
  const bool size_given = synth_->count("--size") > 0;
  if (a.samples == 0 && !size_given) user_error("shards synth: give --samples N or --size BYTES");
  options.samples_per_shard = a.samples;
  if (size_given) options.shard_bytes = parse_bytes(a.size, "--size");
  std::tie(options.tokens_mean, options.tokens_spread) = parse_mean_spread(a.tokens, "--tokens", parse_count);
  std::tie(options.payload_bytes, options.payload_spread) =
      parse_mean_spread(a.payload_bytes, "--payload-bytes", parse_bytes);
  options.vocab = a.vocab;
  options.field = a.field;
  options.seed = a.seed;
  options.overwrite = a.overwrite;
  // Options first (they name what is wrong), then the directory: a bad
  // option leaves no empty directory behind.
  check_synth_options(options);
  OutputDirectory out_dir(a.out, "--out");

  const Clock::time_point start = Clock::now();
  SynthResult result;
  {
    ProgressDisplay display("shards synth");
    result = synthesize_shards(options, display.callback());
  }
  out_dir.keep();
  const double seconds = seconds_since(start);
  print_summary_line("shards", shard_range(result.paths));
  print_summary_line("samples", std::to_string(result.samples));
  print_summary_line("tokens", std::to_string(result.tokens));
  print_throughput(result.bytes, seconds);
  note_shards_left_from_earlier_run(pattern_literal(a.out) + "/" + a.prefix + "-%06d.tar", result.paths.size());
  return kExitOk;
}

int ShardsCommand::run_pack() {
  PackOptions options;
  // "" read as no folder at all: exit 3, "filesystem error: cannot make absolute path".
  if (pack_args_.input_dir.empty()) user_error("INPUT_DIR: the path is empty");
  options.input_dir = pack_args_.input_dir;
  options.max_bytes = parse_bytes(pack_args_.max_size, "--max-size");
  options.max_count = pack_args_.max_count;
  options.overwrite = pack_args_.overwrite;
  if (options.max_count < 0) user_error("--max-count: must be >= 0 (0 = no limit)");
  const std::string& out = pack_args_.out;
  // "" + "/shard-%06d.tar" is a shard in the root folder.
  if (out.empty()) user_error("--out: an output directory (or a NAME-%06d.tar pattern) is required");
  std::error_code not_a_folder;
  if (out.find('%') != std::string::npos && !fs::is_directory(out, not_a_folder)) {
    std::string first;
    try {
      first = shard_name(out, 0);
    } catch (const std::invalid_argument& e) {
      user_error("--out " + std::string(e.what()));
    }
    // The shards are written as plain tar: a compressor's name on them is a
    // file that gzip, zstd or the loader's reader would take for another.
    for (const std::string_view compressed : {".gz", ".tgz", ".zst", ".zstd", ".bz2", ".xz"})
      if (std::string_view(first).ends_with(compressed))
        user_error("--out " + out + ": shards pack writes uncompressed tar, not " + std::string(compressed) +
                   ": name the shards *.tar (and compress them afterwards if you want)");
    options.out_pattern = out;
  } else {
    // "p3/data.tar" made a folder of that name with shard-000000.tar in it:
    // a name like a shard's is taken for one, unless such a folder is there.
    std::error_code ignored;
    if (has_shard_extension(out) && !fs::is_directory(out, ignored))
      user_error("--out " + out +
                 (fs::exists(out, ignored) ? ": is a file (a shard?), and --out is a folder for the shards "
                                             "(shard-NNNNNN.tar in it)"
                                           : ": is a folder for the shards (shard-NNNNNN.tar in it), and this one "
                                             "is named like a shard") +
                 "; give a folder, or a pattern such as " + (fs::path(out).parent_path() / "data-%06d.tar").string());
    options.out_pattern = pattern_literal(out) + "/shard-%06d.tar";
  }
  // Before the output folder is made: not a folder left inside INPUT_DIR.
  check_pack_destination(options);
  // The first shard's folder: a pattern's "%%" is one '%' there.
  const std::string dir = fs::path(shard_name(options.out_pattern, 0)).parent_path().string();
  OutputDirectory out_dir(dir.empty() ? "." : dir, "--out");

  const Clock::time_point start = Clock::now();
  PackResult result;
  {
    ProgressDisplay display("shards pack");
    result = pack_directory(options, display.callback());
  }
  out_dir.keep();
  const double seconds = seconds_since(start);
  print_summary_line("shards", shard_range(result.paths));
  print_summary_line("samples", std::to_string(result.samples));
  print_summary_line("files", std::to_string(result.files));
  print_throughput(result.bytes, seconds);
  print_summary_line("skipped", std::to_string(result.skipped_non_regular) + " not regular files, " +
                                    std::to_string(result.skipped_unnamed) +
                                    " without an extension or named __*");
  note_shards_left_from_earlier_run(options.out_pattern, result.paths.size());
  return kExitOk;
}

int ShardsCommand::run_verify() {
  if (verify_->count("--vocab") > 0 && verify_->count("--field") == 0)
    user_error("--vocab checks token ids, which needs --field: name the token member to decode (u16, u32, npy, "
               "txt, or e.g. tokens.u16)");
  VerifyOptions options;
  options.field = verify_args_.field;
  if (verify_->count("--field") > 0 && !field_is_an_extension(options.field))
    user_error("--field '" + options.field + "': " + kFieldExtensionRule);
  // Its format too, before any shard is read, named as the option (the
  // loader's words named data.field, a key this command has not).
  if (!options.field.empty()) {
    try {
      (void)token_format_of_field(options.field);
    } catch (const DataError& e) {
      const std::string message = e.what();
      const std::string key = "data.field ";
      user_error(message.rfind(key, 0) == 0 ? "--field " + message.substr(key.size()) : message);
    }
  }
  // The loader's limit, not 1 GiB: a shard with a 300 MB member verified
  // "errors 0", and a run on it failed at that member.
  options.max_member_bytes = DataSection{}.max_sample_bytes;
  // Given, not non-empty: `--max-sample-bytes ''` verified at the default, saying nothing.
  if (verify_->count("--max-sample-bytes") > 0) {
    options.max_member_bytes = parse_bytes(verify_args_.max_sample_bytes, "--max-sample-bytes");
    if (options.max_member_bytes <= 0) user_error("--max-sample-bytes: must be > 0");
  }
  try {
    options.shards = resolve_shard_list(verify_args_.spec);
  } catch (const DataError& e) {
    // The list's errors name data.shards, the config key it reads for a run:
    // here the shards came as SPEC.
    const std::string key = "data.shards: ";
    const std::string message = e.what();
    if (message.rfind(key, 0) != 0) throw;
    const std::string said = "SPEC " + verify_args_.spec + ": " + message.substr(key.size());
    if (e.scope() != CorruptScope::kConfig) throw DataError(e.scope(), said);  // a listing the machine stopped
    user_error(said);
  }
  options.vocab = verify_args_.vocab;
  if (options.vocab < 0) user_error("--vocab: must be > 0");

  const Clock::time_point start = Clock::now();
  VerifyResult result;
  {
    ProgressDisplay display("shards verify");
    result = verify_shards(options, display.callback());
  }
  const double seconds = seconds_since(start);
  for (const std::string& line : result.error_lines) std::printf("%s\n", line.c_str());
  print_summary_line("shards", std::to_string(result.shards));
  print_summary_line("samples", std::to_string(result.samples));
  print_summary_line("tokens",
                     options.field.empty() ? std::string("- (no --field)") : std::to_string(result.tokens));
  print_throughput(result.bytes, seconds);
  print_summary_line("errors", std::to_string(result.errors));
  // Counted once per listing, as a run reads them: said, as run and bench io
  // say it (a repeated shard is how some lists up-weight a source).
  if (const std::vector<RepeatedShard> repeated = repeated_shards(options.shards); !repeated.empty())
    std::printf("warning: SPEC lists %s: every listing was read and counted, as a run reads each one every epoch\n",
                repeated_shards_text(repeated).c_str());
  if (result.errors > 0) {
    std::fflush(stdout);
    user_error("shards verify: " + std::to_string(result.errors) + " error" +
               (result.errors == 1 ? "" : "s") + " in " + verify_args_.spec + " (listed on stdout)");
  }
  return kExitOk;
}

}  // namespace trainbench
