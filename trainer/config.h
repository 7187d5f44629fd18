// The run configuration: YAML presets and files, `--set section.key=value`
// overrides, and validation that names the offending key before anything is
// allocated. Every key has a default; a file only states what it changes.
#pragma once

#include <cstddef>    // size_t
#include <cstdint>    // int64_t
#include <stdexcept>  // ConfigError
#include <array>
#include <functional>  // std::less<>: keys_given looked up by string_view
#include <optional>    // decimal_number
#include <set>         // keys_given
#include <string>
#include <string_view>  // excerpt
#include <vector>

#include <nlohmann/json.hpp>  // the resolved config in the result JSON

#include "dataloader/shard_tools.h"  // SynthOptions: the run's own shards
#include "kernels/model_shape.h"  // ModelShape is the `model` section

namespace trainbench {

struct TrainSection {
  int64_t micro_batch = 4;     // sequences per rank per micro-step
  int64_t grad_accum = 1;      // micro-steps per optimizer step
  int64_t steps = 30;          // optimizer steps, warm-up included
  int64_t warmup_steps = 5;    // excluded from the statistics
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;      // 0 disables clipping
  std::string precision = "auto";  // auto | fp32 | bf16  (auto: fp32 on cpu, bf16 on cuda)
  std::string mode = "full";       // full | lora (base frozen, adapters trained: the lora section)
  std::string device = "auto";     // auto | cpu | cuda
  std::string attention = "auto";  // auto | cudnn | gemm  (cuda engine; kernels/engine.h EngineOptions)
  bool deterministic = true;       // false: cuDNN's fastest attention backward, not bitwise repeatable
  int64_t threads = 0;             // CPU threads; 0 = all hardware threads
  int64_t seed = 1234;             // parameter initialisation
};

struct DataSection {
  std::string source = "shards";     // shards: webdataset tar shards; synthetic: tokens held in memory
  std::string shards;                // shard list spec (dataloader/shard_list.h); "" = make
                                     //   synthetic shards in a temporary folder for this run
  std::string field = "u16";         // extension of the token member: u16 | u32 | npy | txt (or x.u16, ...)
  int64_t readers = 2;               // reader threads per rank
  int64_t prefetch = 4;              // ready micro-batches each reader may hold
  int64_t shuffle_buffer = 256;      // samples; 0 = read order
  int64_t seed = 1;                  // shard order, sample shuffle, synthetic tokens
  int64_t eos_token = -1;            // separator between packed samples; -1 = model.vocab - 1
  std::string on_corrupt = "fail";   // fail | skip (count, report and go on)
  int64_t max_sample_bytes = 256LL << 20;  // largest member read
  int64_t block_bytes = 4LL << 20;   // read block size (>= 1 MiB)
  double timeout_s = 300;            // longest wait for one batch before the run aborts
  int64_t synthetic_batches = 8;     // source synthetic: distinct micro-batches, cycled
  // The temporary shards when data.shards is empty.
  int64_t synth_shards = 8;          // at least data.readers; more when there are more
  int64_t synth_tokens_per_sample = 1024;
  int64_t synth_payload_bytes = 0;   // filler member per sample, emulating images/audio
  int64_t synth_samples_per_shard = 0;  // 0 = sized for the run's steps (a resumed run takes its checkpoint's)
  double inject_delay_ms = 0;        // fault injection: sleep per sample read (slow storage)
};

struct CommSection {
  std::string backend = "auto";  // auto | local | mpi | nccl  (auto: nccl for a multi-rank cuda run when
                                 // built, else mpi when started by an MPI launcher, else local)
  double bucket_mb = 25;         // gradient bucket size (the first is 1 MiB), as DDP's bucket_cap_mb
  bool overlap = true;           // all-reduce buckets during backward; false: one all-reduce after it
  int64_t zero = 0;              // 1: ZeRO-1, the optimizer state sharded across ranks
  int64_t check_every = 10;      // compare a parameter checksum across ranks every N steps (and at the end)
  double timeout_s = 300;        // a collective that takes longer aborts every rank
  int64_t inject_divergence_step = 0;  // fault injection: perturb the last rank's parameters before this step
  double inject_delay_ms = 0;    // fault injection: each gradient all-reduce is held this long (a slow network)
};

struct CheckpointSection {
  std::string dir;               // where checkpoints go; "" = a temporary folder for this run, removed at exit
  int64_t every_steps = 10;      // a checkpoint after every N-th step; 0 = none
  int64_t keep = 2;              // committed checkpoints retained; 0 = all
  bool async = true;             // false: the loop waits for snapshot, write and commit
  std::string when_busy = "wait";  // wait | skip: a checkpoint due while the previous one still persists
  std::string on_full = "fail";    // fail | skip: what a full disk does to the run
  bool direct_io = false;        // O_DIRECT writes (bypass the page cache)
  int64_t writers = 2;           // files (and writer threads) per rank
  int64_t block_bytes = 64LL << 20;  // bytes per write call, a multiple of 4096
  double timeout_s = 1800;       // a rank's write (or rank 0's commit) still unfinished after this fails the checkpoint
  double inject_delay_ms = 0;    // fault injection: each rank's writer sleeps this long per checkpoint (slow disk)
  bool include_base = false;     // train.mode lora: also save the frozen base (else adapters + optimizer only)
  // A resume's reading of the slices of the state the ranks hold alike: own
  // (each rank reads its own, the ranks pass them on: the job reads the
  // checkpoint once) | all (every rank reads every slice: N reads, no passing on).
  std::string resume_read = "own";
};

// train.mode lora: adapters of this rank on these projections (LoraSpec).
struct LoraSection {
  int64_t rank = 16;
  double alpha = 32;                // the adapters' output is scaled by alpha / rank
  std::string targets = "q,k,v,o";  // any of q, k, v, o, gate, up, down (MLPerf's Llama-2-70B LoRA: q,k,v,o)
};

// `trainbench burnin` (trainer/burnin.h): its checks' thresholds, and test hooks.
struct BurninSection {
  int64_t golden_every = 100;      // recompute the golden step on every rank every N steps
  double straggler_pct = 10;       // a rank whose median own step time (waits for peers excluded) exceeds the
                                   //   other ranks' median by more than this fails as a straggler
  double degrade_pct = 10;         // a drop beyond this (tokens/s first vs last tenth, busbw, write GB/s) fails
  double health_every_s = 600;     // short fabric (busbw) and storage (write GB/s) measurements this often
  double nvml_every_s = 5;         // GPU health sample period (CUDA builds with a driver)
  double baseline_tolerance_pct = 10;  // --baseline: a figure more than this below the known-good one fails
  int64_t inject_bitflip_step = 0; // test hook: at the first golden check at or after this step, one bit of
  int64_t inject_bitflip_rank = 0; //   this rank's golden gradient is flipped (a silent data corruption)
  double inject_slow_ms = 0;       // test hook: this rank sleeps this long in every step (a straggler)
  int64_t inject_slow_rank = 0;
};

struct ReportSection {
  std::string out;              // result JSON path; empty = trainbench-result.json
  int64_t progress_every = 10;  // progress line every N steps; 0 = none
  bool instrument = true;       // false: no per-step timing, only the measured steps' wall time (its cost)
  bool op_times = false;        // true: compute_s broken down by kind of op (both engines)
  double gemm_ceiling_s = 1.0;  // seconds the GEMM ceiling is timed for before training; 0 = not timed
};

// The model a file gets for keys it does not state: the shape of configs/tiny.yaml.
inline ModelShape default_model_shape() {
  return ModelShape{.vocab = 512, .d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                    .ffn_hidden = 192, .seq_len = 64};
}

struct Config {
  ModelShape model = default_model_shape();
  // model.n_layers_full: the customer's whole depth, which `trainbench project`
  // projects a run of fewer layers to (0 = model.n_layers). In the model
  // section for the user, but kept out of ModelShape, which the engines build.
  int64_t n_layers_full = 0;
  TrainSection train;
  LoraSection lora;
  DataSection data;
  CommSection comm;
  CheckpointSection checkpoint;
  ReportSection report;
  BurninSection burnin;
  std::string origin;  // the file path or "preset:<name>" the config came from
  // The keys ("section.key") the file or a --set gave, the rest defaults: a
  // command that picks its own default for a key (burnin's progress lines)
  // keeps the one the user wrote.
  std::set<std::string, std::less<>> keys_given;
};

// Limits that no real model or machine reaches (the largest Llama 3 has 126
// layers and 4e11 parameters), checked before anything is allocated so that
// a typo is exit 2 naming the key, and every size computed later in int64
// (bytes, shards, the memory plan) is exact.
inline constexpr int64_t kMaxLayers = 65536;                       // model.n_layers, model.n_layers_full
inline constexpr int64_t kMaxParameters = int64_t{1} << 40;        // the whole model, and each matrix
inline constexpr int64_t kMaxActivationElements = int64_t{1} << 56;  // one micro-batch, all layers
inline constexpr int64_t kMaxThreads = 1024;                       // train.threads
inline constexpr int64_t kMaxStepTokens = int64_t{1} << 40;  // micro_batch x grad_accum x seq_len, per rank
inline constexpr int64_t kMaxWriters = 1024;                 // checkpoint.writers
inline constexpr int64_t kMaxSyntheticBatches = 4096;        // data.synthetic_batches
// comm.timeout_s and data.timeout_s, a year: the deadlines are steady-clock
// nanoseconds, which 9.3e9 s overflowed (every collective "timed out" at once).
inline constexpr int64_t kMaxTimeoutSeconds = 365 * 24 * 3600;

// A user error in the configuration. what() is one line that names the file
// or key and what is wrong; the CLI prints it and exits 2.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads CONFIG (a YAML file path, or the name of an embedded preset such as
// "tiny"), applies `section.key=value` overrides in order, and validates.
// Throws ConfigError.
Config load_config(const std::string& path_or_preset,
                   const std::vector<std::string>& overrides = {});

// What the last `--set KEY=VALUE` of `overrides` gives KEY, its value read
// as apply_override reads it (YAML: quotes and spaces as in a file), or
// `otherwise` when none sets it or the value is not a scalar. For a choice
// made before a config is loaded (run's default preset follows train.device).
std::string last_override_scalar(const std::vector<std::string>& overrides, const std::string& key,
                                 const std::string& otherwise);
// Same, from YAML text; `origin` names it in error messages.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});
// Cross-key checks (n_heads divides d_model, ...). Throws ConfigError.
void validate_config(const Config& config);

// Embedded presets (configs/*.yaml compiled into the binary).
std::vector<std::string> preset_names();
bool is_preset(const std::string& name);

// A value, key or path as an error message quotes it: whole up to
// kExcerptBytes, else its first kExcerptBytes (not splitting a UTF-8
// character) and its length. A 200 KB value was echoed whole into the
// one-line message.
inline constexpr size_t kExcerptBytes = 80;
std::string excerpt(std::string_view text);

// Shortest text that reads back as the same double, in the form a person
// would write: 500000 and 0.001 rather than 5e+05 and 1e-03, but 1e-05.
// (The config's values as printed; options compared across ranks exactly.)
std::string format_double(double value);

// The engine's LoraSpec for this config: rank 0 unless train.mode is lora.
LoraSpec lora_spec(const Config& config);

// The samples of the shards a run makes when data.shards is empty: the
// data.synth_* means with half of each as spread, data.field, model.vocab
// and data.seed (no folder, count or samples per shard: the run's).
SynthOptions run_shard_samples(const Config& config);

// Strict checks of a number typed on the command line, for the commands'
// CLI11 validators: CLI11 alone saturates 99999999999999999999 to INT64_MAX,
// reads 010 as octal and takes nan and inf. Each returns "" when `text` is
// an integer (a finite number) in [low, high], else what is wrong, e.g.
// "must be an integer between 1 and 256 (got 0)".
std::string integer_in_range(const std::string& text, int64_t low, int64_t high);
// An integer integer_in_range accepted ("010", "+7") written plainly ("10",
// "7"); other text unchanged.
std::string decimal_integer_text(const std::string& text);
std::string number_in_range(const std::string& text, double low, double high);
// The whole of `text` as a finite decimal number (an optional sign, digits,
// a fraction, an exponent), or nothing: "0x10", "inf", "+-5" and "5 " are
// not; *out_of_range says a number past a double's range ("1e400") apart
// from text that is no number. What the config's and the options' numbers
// are read with.
std::optional<double> decimal_number(std::string_view text, bool* out_of_range);
// Bytes as every command reads them: an integer with an optional suffix, K
// M G T (or KiB MiB GiB TiB) in powers of 1024 as dd and nccl-tests read
// them, KB MB GB TB in powers of 1000, B or none for bytes. "" when `text`
// is such a size in [low, high], with *bytes set; else what is wrong.
std::string byte_size_in_range(const std::string& text, int64_t low, int64_t high, int64_t* bytes);
// A path written ~/... as the home folder's, as a shell makes a word that
// starts so: "" when done (or nothing to do), else what is wrong ($HOME not
// set). For the path keys (checkpoint.dir, data.shards, report.out) and
// every command's path options: `--out=~/r.json`, `--set k=~/x` and a
// quoted '~/data/*.tar' reach trainbench as typed.
std::string expand_home(std::string* path);

nlohmann::json config_to_json(const Config& config);

// What train.precision auto trains in on an engine ("cuda", "cpu"), or ""
// when the engine is not known (yet).
std::string precision_of_auto_on(const std::string& engine);

// object[section][key] of a config (or manifest) as JSON, null where a part is
// missing or not an object; key "" gives the section.
nlohmann::json json_entry(const nlohmann::json& object, const char* section, const char* key);

// The first of `keys` ({section, key}, or {section, ""} for the whole
// section, then named by its first differing key) whose value differs
// between two config_to_json objects: key "model.d_model" with both values;
// an empty key when they agree on all. What a resume and a burn-in baseline
// must share with the run. lora.targets compare as the adapters they build
// (names in layer order, spaces and repeats aside); model.n_layers_full,
// which builds nothing, is not compared.
struct ConfigDifference {
  std::string key;
  nlohmann::json first, second;
};
ConfigDifference first_config_difference(const nlohmann::json& first, const nlohmann::json& second,
                                         const std::vector<std::array<const char*, 2>>& keys);
// Flat "section.key: value" lines, in declaration order, for the console.
std::vector<std::string> config_to_lines(const Config& config);

// The keys that inject a fault (slow storage, network or disk, a divergence,
// a flipped bit, a straggler), {section, key}; not the rank selectors, which
// name a rank and inject nothing.
inline constexpr std::array<std::array<const char*, 2>, 6> kInjectedFaultKeys = {{
    {"data", "inject_delay_ms"},
    {"comm", "inject_delay_ms"},
    {"comm", "inject_divergence_step"},
    {"checkpoint", "inject_delay_ms"},
    {"burnin", "inject_bitflip_step"},
    {"burnin", "inject_slow_ms"},
}};
// "comm.inject_delay_ms=20" for each of them this config sets (not 0).
std::vector<std::string> injected_faults(const Config& config);

}  // namespace trainbench
