#include "trainer/config.h"

#include <algorithm>    // std::min for the edit distance
#include <array>        // the path keys written ~/
#include <cctype>       // isdigit, toupper: byte sizes; tolower: a key in capitals
#include <cerrno>       // errno after a failed read
#include <charconv>     // std::from_chars / to_chars: strict number parsing, shortest printing
#include <cstdint>      // INT32_MAX for token ids
#include <cstdio>       // std::snprintf: a key's smallest value
#include <cstdlib>      // std::getenv: HOME for a path written ~/
#include <cmath>        // std::isfinite
#include <cstring>      // std::strerror
#include <filesystem>   // does CONFIG name a file?
#include <fstream>      // reading the config file
#include <iterator>     // std::istreambuf_iterator
#include <limits>       // std::numeric_limits<float>: the fp32 floor
#include <map>          // where each value came from
#include <optional>     // parse results and errors
#include <set>          // duplicate-key detection
#include <sstream>      // the YAML parser's stream
#include <string_view>
#include <type_traits>  // dispatch on a key's value type
#include <utility>      // std::pair: the path keys
#include <variant>      // a key's typed storage

#include <yaml-cpp/depthguard.h>    // YAML::DeepRecursion: lists and maps nested past yaml-cpp's limit
#include <yaml-cpp/eventhandler.h>  // YAML::EventHandler: the documents counted by their events
#include <yaml-cpp/yaml.h>          // YAML::Load, YAML::Node, YAML::Exception

#include "dataloader/data_error.h"    // DataError from token_format_of_field
#include "dataloader/shard_tools.h"   // kMaxSynth*: data.synth_* share the limits of shards synth; their largest member
#include "dataloader/token_decode.h"  // token_format_of_field, field_is_an_extension: data.field
#include "trainer/json_text.h"  // utf8_escaped: config strings into JSON
#include "trainer/presets.h"  // embedded_presets(): configs/*.yaml compiled in

namespace trainbench {
namespace {

// Where a key's value lives in Config, typed.
using FieldPtr = std::variant<int64_t*, double*, std::string*, bool*>;

// Per-key range checks, applied by validate_config.
enum class Bound {
  kAny,
  kPositive,     // > 0
  kNonNegative,  // >= 0
  kUnit,         // in [0, 1)
  kPercent,      // in (0, 100)
};

struct KeySpec {
  std::string_view name;  // "section.key"
  FieldPtr (*field)(Config&);
  Bound bound = Bound::kAny;
  std::vector<std::string_view> choices = {};  // allowed strings; empty = any
  // > 0: the largest value accepted. Counts and sizes that allocate memory,
  // threads or files get one that no real setup reaches, so that a typo
  // (an extra zero, a value in bytes instead of MiB) is an error naming the
  // key rather than a crash, a hang or a full disk.
  int64_t max = 0;
  // > 0 (with max): the smallest value accepted, where a tiny positive one
  // is a typo that turns a period into a busy loop or a timeout into a
  // false failure.
  double min = 0;
};

// Fault injection sleeps for these: an hour is more than any test or probe
// asks, and 1e300 overflowed sleep_for's duration into no delay at all.
constexpr int64_t kMaxInjectedDelayMs = 3'600'000;
// The temporary shards' samples spread half the mean either way
// (write_run_shards): a mean up to these keeps the largest sample within
// `shards synth`'s limits, which named its own --tokens/--payload-bytes to a
// run that never used them.
constexpr int64_t kMaxSynthTokensMean = (2 * kMaxSynthTokensPerSample + 1) / 3;  // 11184811
constexpr int64_t kMaxSynthPayloadMean = (2 * kMaxSynthPayloadBytes + 1) / 3;    // 715827883
// The GEMM ceiling's timing is a calibration, not the run: a minute is more
// than any ceiling needs to settle, and a typo (600 for 0.6) is an error
// rather than ten minutes of a GEMM before the first step.
constexpr int64_t kMaxGemmCeilingSeconds = 60;
// A collective timeout under a second is no timeout a real step meets: a
// typo (0.003 for 300) that failed every run, and burn-in's hang watch
// with it ("hung ... 0 s").
constexpr double kMinCommTimeoutSeconds = 1;
// The same for the data: a wait under a second for a batch is a typo (0.3
// for 300) that ended runs whose storage was fine (exit 3) and called a
// reader still in its read at the end stuck ("its storage stopped
// responding").
constexpr double kMinDataTimeoutSeconds = 1;
// RoPE's base: below 1 the rotation frequencies rise along the head instead
// of falling, and near 0 they overflow: 1e-300 made the first loss NaN, a
// failed check (exit 4) for a config error. The most, far above any model's
// (Llama 3: 500000; long-context ones 1e8), since a minimum needs one.
constexpr double kMinRopeTheta = 1;
constexpr int64_t kMaxRopeTheta = 1'000'000'000'000;
// Nor a checkpoint's under a second, which no real write meets.
constexpr double kMinCheckpointTimeoutSeconds = 1;
// Burn-in's periods: its health checks (a collective each, so at least a
// second apart) and the NVML sampler (10 ms is finer than NVML updates).
// 1e300 overflowed the sampler's wait into a busy loop; 1e-300 made every
// step a health check. A day and an hour are longer than any burn-in needs.
constexpr int64_t kMaxHealthEverySeconds = 86'400;
constexpr double kMinHealthEverySeconds = 1;
constexpr int64_t kMaxNvmlEverySeconds = 3'600;
constexpr double kMinNvmlEverySeconds = 0.01;
// RMSNorm's and AdamW's epsilons are fp32 in both engines: 1e308 became inf,
// every norm's output 0 and the loss flat at ln(vocab) for a run that exited
// 0; 5e-324 became 0, and AdamW divided 0 by 0. Real ones are 1e-5 .. 1e-8.
constexpr int64_t kMaxEpsilon = 1;
constexpr double kMinEpsilon = 1e-30;
static_assert(kMinEpsilon >= std::numeric_limits<float>::min(), "a normal fp32 number");
// The adapters' scale alpha / rank is fp32 in both engines: 1e300 became
// inf and the first step's loss NaN (a failed check, exit 4, for what is a
// config error). Real ones are 8 .. 512.
constexpr int64_t kMaxLoraAlpha = 1'000'000;
// AdamW's learning rate and weight decay are fp32 in both engines too: 1e39
// became inf and the loss NaN at step 2 (exit 4); an lr of 1e-46 became 0,
// and a run that trained nothing exited 0. So are the adapters' alpha (1e-45
// scaled them by 0) and the gradient-clip scale (grad_clip 1e-46 clipped
// every gradient to 0). Checked in check_train: a value fp32 holds, the
// nonzero ones at least this (an lr of 1e30 is allowed, and diverges).
constexpr double kMinFp32Setting = 1e-30;

// The name is spelled from the member path, so a key and the field it sets
// cannot drift apart.
#define TRAINBENCH_KEY(section, member, ...)                                       \
  KeySpec {                                                                       \
    #section "." #member, [](Config& c) -> FieldPtr { return &c.section.member; }, \
        __VA_ARGS__                                                               \
  }

// Every configuration key, in the order they are printed. Parsing, --set,
// validation of single values, config_to_json and config_to_lines all read
// this table: a new key is one line here.
const std::vector<KeySpec>& key_table() {
  static const std::vector<KeySpec> keys = {
      TRAINBENCH_KEY(model, vocab, Bound::kPositive),
      TRAINBENCH_KEY(model, d_model, Bound::kPositive),
      TRAINBENCH_KEY(model, n_layers, Bound::kPositive, {}, kMaxLayers),
      KeySpec{"model.n_layers_full", [](Config& c) -> FieldPtr { return &c.n_layers_full; }, Bound::kNonNegative, {},
              kMaxLayers},
      TRAINBENCH_KEY(model, n_heads, Bound::kPositive),
      TRAINBENCH_KEY(model, n_kv_heads, Bound::kPositive),
      TRAINBENCH_KEY(model, ffn_hidden, Bound::kPositive),
      TRAINBENCH_KEY(model, seq_len, Bound::kPositive),
      TRAINBENCH_KEY(model, rope_theta, Bound::kPositive, {}, kMaxRopeTheta, kMinRopeTheta),
      TRAINBENCH_KEY(model, norm_eps, Bound::kPositive, {}, kMaxEpsilon, kMinEpsilon),
      TRAINBENCH_KEY(train, micro_batch, Bound::kPositive),
      TRAINBENCH_KEY(train, grad_accum, Bound::kPositive),
      TRAINBENCH_KEY(train, steps, Bound::kPositive),
      TRAINBENCH_KEY(train, warmup_steps, Bound::kNonNegative),
      TRAINBENCH_KEY(train, lr, Bound::kPositive),
      TRAINBENCH_KEY(train, beta1, Bound::kUnit),
      TRAINBENCH_KEY(train, beta2, Bound::kUnit),
      TRAINBENCH_KEY(train, eps, Bound::kPositive, {}, kMaxEpsilon, kMinEpsilon),
      TRAINBENCH_KEY(train, weight_decay, Bound::kNonNegative),
      TRAINBENCH_KEY(train, grad_clip, Bound::kNonNegative),
      TRAINBENCH_KEY(train, precision, Bound::kAny, {"auto", "fp32", "bf16"}),
      TRAINBENCH_KEY(train, mode, Bound::kAny, {"full", "lora"}),
      TRAINBENCH_KEY(train, device, Bound::kAny, {"auto", "cpu", "cuda"}),
      TRAINBENCH_KEY(train, attention, Bound::kAny, {"auto", "cudnn", "gemm"}),
      TRAINBENCH_KEY(train, deterministic),
      TRAINBENCH_KEY(train, threads, Bound::kNonNegative, {}, kMaxThreads),
      TRAINBENCH_KEY(train, seed, Bound::kNonNegative),
      TRAINBENCH_KEY(lora, rank, Bound::kPositive),
      TRAINBENCH_KEY(lora, alpha, Bound::kPositive, {}, kMaxLoraAlpha, kMinFp32Setting),
      TRAINBENCH_KEY(lora, targets),
      TRAINBENCH_KEY(data, source, Bound::kAny, {"shards", "synthetic"}),
      TRAINBENCH_KEY(data, shards),
      TRAINBENCH_KEY(data, field),
      TRAINBENCH_KEY(data, readers, Bound::kPositive, {}, 256),
      TRAINBENCH_KEY(data, prefetch, Bound::kPositive, {}, 1024),
      TRAINBENCH_KEY(data, shuffle_buffer, Bound::kNonNegative, {}, int64_t{1} << 20),
      TRAINBENCH_KEY(data, seed, Bound::kNonNegative),
      TRAINBENCH_KEY(data, eos_token),
      TRAINBENCH_KEY(data, on_corrupt, Bound::kAny, {"fail", "skip"}),
      TRAINBENCH_KEY(data, max_sample_bytes, Bound::kPositive),
      TRAINBENCH_KEY(data, block_bytes, Bound::kPositive),  // 1 MiB .. 256 MiB: validate()
      TRAINBENCH_KEY(data, timeout_s, Bound::kPositive, {}, kMaxTimeoutSeconds, kMinDataTimeoutSeconds),
      TRAINBENCH_KEY(data, synthetic_batches, Bound::kPositive, {}, kMaxSyntheticBatches),
      TRAINBENCH_KEY(data, synth_shards, Bound::kPositive, {}, kMaxSynthShards),
      TRAINBENCH_KEY(data, synth_tokens_per_sample, Bound::kPositive, {}, kMaxSynthTokensMean),
      TRAINBENCH_KEY(data, synth_payload_bytes, Bound::kNonNegative, {}, kMaxSynthPayloadMean),
      TRAINBENCH_KEY(data, synth_samples_per_shard, Bound::kNonNegative, {}, kMaxSynthSamplesPerShard),
      TRAINBENCH_KEY(data, inject_delay_ms, Bound::kNonNegative, {}, kMaxInjectedDelayMs),
      TRAINBENCH_KEY(comm, backend, Bound::kAny, {"auto", "local", "mpi", "nccl"}),
      TRAINBENCH_KEY(comm, bucket_mb, Bound::kPositive),
      TRAINBENCH_KEY(comm, overlap),
      TRAINBENCH_KEY(comm, zero, Bound::kNonNegative),
      TRAINBENCH_KEY(comm, check_every, Bound::kNonNegative),
      TRAINBENCH_KEY(comm, timeout_s, Bound::kPositive, {}, kMaxTimeoutSeconds, kMinCommTimeoutSeconds),
      TRAINBENCH_KEY(comm, inject_divergence_step, Bound::kNonNegative),
      TRAINBENCH_KEY(comm, inject_delay_ms, Bound::kNonNegative, {}, kMaxInjectedDelayMs),
      TRAINBENCH_KEY(checkpoint, dir),
      TRAINBENCH_KEY(checkpoint, every_steps, Bound::kNonNegative),
      TRAINBENCH_KEY(checkpoint, keep, Bound::kNonNegative),
      TRAINBENCH_KEY(checkpoint, async),
      TRAINBENCH_KEY(checkpoint, when_busy, Bound::kAny, {"wait", "skip"}),
      TRAINBENCH_KEY(checkpoint, on_full, Bound::kAny, {"fail", "skip"}),
      TRAINBENCH_KEY(checkpoint, direct_io),
      TRAINBENCH_KEY(checkpoint, writers, Bound::kPositive, {}, kMaxWriters),
      TRAINBENCH_KEY(checkpoint, block_bytes, Bound::kPositive),
      TRAINBENCH_KEY(checkpoint, timeout_s, Bound::kPositive, {}, kMaxTimeoutSeconds, kMinCheckpointTimeoutSeconds),
      TRAINBENCH_KEY(checkpoint, inject_delay_ms, Bound::kNonNegative, {}, kMaxInjectedDelayMs),
      TRAINBENCH_KEY(checkpoint, include_base),
      TRAINBENCH_KEY(checkpoint, resume_read, Bound::kAny, {"own", "all"}),
      TRAINBENCH_KEY(report, out),
      TRAINBENCH_KEY(report, progress_every, Bound::kNonNegative),
      TRAINBENCH_KEY(report, instrument),
      TRAINBENCH_KEY(report, op_times),
      TRAINBENCH_KEY(report, gemm_ceiling_s, Bound::kNonNegative, {}, kMaxGemmCeilingSeconds),
      TRAINBENCH_KEY(burnin, golden_every, Bound::kPositive),
      TRAINBENCH_KEY(burnin, straggler_pct, Bound::kPositive),
      TRAINBENCH_KEY(burnin, degrade_pct, Bound::kPercent),
      TRAINBENCH_KEY(burnin, health_every_s, Bound::kPositive, {}, kMaxHealthEverySeconds, kMinHealthEverySeconds),
      TRAINBENCH_KEY(burnin, nvml_every_s, Bound::kPositive, {}, kMaxNvmlEverySeconds, kMinNvmlEverySeconds),
      TRAINBENCH_KEY(burnin, baseline_tolerance_pct, Bound::kPercent),
      TRAINBENCH_KEY(burnin, inject_bitflip_step, Bound::kNonNegative),
      TRAINBENCH_KEY(burnin, inject_bitflip_rank, Bound::kNonNegative),
      TRAINBENCH_KEY(burnin, inject_slow_ms, Bound::kNonNegative, {}, kMaxInjectedDelayMs),
      TRAINBENCH_KEY(burnin, inject_slow_rank, Bound::kNonNegative),
  };
  return keys;
}
#undef TRAINBENCH_KEY

// Every message is one line (the CLI prints it after "trainbench: ").
[[noreturn]] void fail(std::string message) {
  for (char& ch : message)
    if (ch == '\n' || ch == '\r') ch = ' ';
  throw ConfigError(message);
}

std::string_view section_of(std::string_view key) { return key.substr(0, key.find('.')); }

std::vector<std::string_view> section_names() {
  std::vector<std::string_view> sections;
  for (const KeySpec& spec : key_table())
    if (sections.empty() || sections.back() != section_of(spec.name))
      sections.push_back(section_of(spec.name));
  return sections;
}

const KeySpec* find_key(std::string_view name) {
  for (const KeySpec& spec : key_table())
    if (spec.name == name) return &spec;
  return nullptr;
}

// Reads through a non-const binding; callers of this overload only read.
FieldPtr field_of(const Config& config, const KeySpec& spec) {
  return spec.field(const_cast<Config&>(config));
}

std::string join(const std::vector<std::string_view>& items, std::string_view separator) {
  std::string out;
  for (std::string_view item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

// " (did you mean 'model.d_model'?)" for a near miss, else "".
std::string suggestion(std::string_view unknown, const std::vector<std::string_view>& known) {
  if (unknown.size() > kExcerptBytes) return "";  // not a typo of a key; and the edit distance is quadratic
  const std::string_view leaf = unknown.substr(unknown.find('.') + 1);
  // `<<: *base` was "unknown key 'train.<<' (did you mean 'train.lr'?)".
  if (leaf == "<<") return " (a YAML merge key, which yaml-cpp does not read: write the keys out)";
  // A section where a key goes: `--set model=3`, or `train: {lora: {rank: 8}}`
  // ("did you mean 'train.lr'?"). Not in a list of sections, where it is known.
  if (std::find(known.begin(), known.end(), leaf) == known.end())
    for (const KeySpec& spec : key_table())
      if (section_of(spec.name) == leaf)
        return " ('" + std::string(leaf) + "' is a section, not a key: name one of its keys, e.g. " +
               std::string(spec.name) + ")";
  // "MODEL.N_LAYERS" is many edits from its key.
  std::string lower(unknown);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower != unknown && std::find(known.begin(), known.end(), lower) != known.end())
    return " (did you mean '" + lower + "'? names are lower case)";
  // A known key under another section ("train.seq_len" -> "model.seq_len").
  for (std::string_view name : known)
    if (name.find('.') != std::string_view::npos && name.substr(name.find('.') + 1) == leaf)
      return " (did you mean '" + std::string(name) + "'?)";
  // A truncated key ("train.warmup" -> "train.warmup_steps"); not a bare
  // section ("model"), which starts every key of it.
  if (unknown.find('.') != std::string_view::npos && leaf.size() >= 3)
    for (std::string_view name : known)
      if (name.starts_with(unknown)) return " (did you mean '" + std::string(name) + "'?)";
  std::string_view best;
  size_t best_distance = std::max<size_t>(2, unknown.size() / 4) + 1;
  for (std::string_view name : known) {
    const size_t distance = edit_distance(unknown, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best.empty() ? "" : " (did you mean '" + std::string(best) + "'?)";
}

std::vector<std::string_view> key_names() {
  std::vector<std::string_view> names;
  for (const KeySpec& spec : key_table()) names.push_back(spec.name);
  return names;
}

}  // namespace

std::string format_double(double value) {
  char buffer[64];  // fixed notation is used only below 1e15: under 40 characters
  const double magnitude = std::fabs(value);
  const bool fixed = magnitude == 0 || (magnitude >= 1e-4 && magnitude < 1e15);
  const auto result = fixed ? std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed)
                            : std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

namespace {

std::string format_value(const FieldPtr& field) {
  struct Formatter {
    std::string operator()(const int64_t* v) const { return std::to_string(*v); }
    std::string operator()(const double* v) const { return format_double(*v); }
    std::string operator()(const std::string* v) const { return v->empty() ? "\"\"" : *v; }
    std::string operator()(const bool* v) const { return *v ? "true" : "false"; }
  };
  return std::visit(Formatter{}, field);
}

// How a rejected value is shown: the scalar quoted and shortened, or its kind.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return "'" + excerpt(node.Scalar()) + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "an empty value";
  }
}

// The whole of `text` as a T, or nothing. from_chars is locale-independent and
// strict: "1k" and "12.5" are not integers, "0x10" is not a number. Doubles
// take what a person writes for a rate (0.001, 1e-3, 3E-4, 500000) but not
// inf or nan, which no key means anything by.
template <typename T>
std::optional<T> parse_number(std::string_view text, bool* out_of_range) {
  if (text.starts_with('+') && !text.starts_with("+-")) text.remove_prefix(1);  // from_chars takes only '-'
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  *out_of_range = error == std::errc::result_out_of_range;
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) return std::nullopt;
  }
  return value;
}

// Stores `node` into `field`; on a type mismatch returns what is wrong.
std::optional<std::string> assign(const FieldPtr& field, const YAML::Node& node) {
  const auto store = [&node](auto* target) -> std::optional<std::string> {
    using T = std::remove_pointer_t<decltype(target)>;
    if constexpr (std::is_same_v<T, std::string>) {
      if (node.IsNull()) {  // `out:` with nothing after it: the empty string
        target->clear();
        return std::nullopt;
      }
      if (!node.IsScalar()) return describe(node) + " is not a string";
      // A NUL ("\0" in a quoted YAML string) would silently cut a path short
      // where it reaches the operating system.
      if (node.Scalar().find('\0') != std::string::npos)
        return "the string contains a NUL byte (\\0) at position " + std::to_string(node.Scalar().find('\0')) +
               ", which would cut it short";
      *target = node.Scalar();
    } else if constexpr (std::is_same_v<T, bool>) {
      const std::string text = node.IsScalar() ? node.Scalar() : "";
      if (text != "true" && text != "false") return describe(node) + " is not true or false";
      *target = text == "true";
    } else {  // int64_t or double
      bool out_of_range = false;
      const std::optional<T> value =
          node.IsScalar() ? parse_number<T>(node.Scalar(), &out_of_range) : std::nullopt;
      if (out_of_range) return describe(node) + " is out of range";
      if (!value) return describe(node) + (std::is_integral_v<T> ? " is not an integer" : " is not a number");
      *target = *value;
    }
    return std::nullopt;
  };
  return std::visit(store, field);
}

// A node's tag as the user wrote it ("!foo", "!!binary") when it is not one
// of YAML's core schema, else nothing. Untagged, "!" (a quoted scalar) and
// !!str, !!int, !!float, !!bool, !!null, !!map, !!seq are read as the key
// reads the value untagged; any other tag (a custom !foo, !!binary, a %TAG
// handle's) asks for a type trainbench has no reading of, and was dropped
// without a word.
std::optional<std::string> unknown_tag(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  if (tag.empty() || tag == "?" || tag == "!") return std::nullopt;
  constexpr std::string_view kCoreSchema = "tag:yaml.org,2002:";
  if (tag.starts_with(kCoreSchema)) {
    const std::string_view name = std::string_view(tag).substr(kCoreSchema.size());
    for (std::string_view core : {"str", "int", "float", "bool", "null", "map", "seq"})
      if (name == core) return std::nullopt;
    return "!!" + excerpt(name);
  }
  return tag.starts_with('!') ? excerpt(tag) : "!<" + excerpt(tag) + ">";
}

std::string tag_problem(const std::string& tag) {
  return "tag " + tag + " is not one trainbench reads; remove it (YAML's standard !!str, !!int, !!float, "
         "!!bool and !!null may stay)";
}

// Stores `node` as the value of `spec`'s key; on an error returns what is wrong.
std::optional<std::string> assign_value(Config& config, const KeySpec& spec, const YAML::Node& node) {
  if (const std::optional<std::string> tag = unknown_tag(node)) return tag_problem(*tag);
  std::optional<std::string> error = assign(spec.field(config), node);
  if (error && spec.name == "lora.targets" && node.IsSequence())
    *error += "; write the names separated by commas, e.g. q,k,v,o";
  return error;
}

// The documents of a YAML text as the parser's events tell them: where each
// starts and whether it holds anything (an empty one after a trailing "---"
// loses nothing). yaml-cpp 0.7's LoadAll never ends on a ',' outside [ ] or
// { } (",q", "[a,b],"): it made empty documents until memory ran out (a
// config file "," was exit 3 "out of memory", or the OOM killer), so the
// documents are counted here, up to a bound. Throws YAML::Exception.
struct YamlDocument {
  YAML::Mark mark;
  bool has_content = false;
};

std::vector<YamlDocument> yaml_documents(const std::string& text) {
  struct Survey final : YAML::EventHandler {
    std::vector<YamlDocument> documents;
    void content() {
      if (!documents.empty()) documents.back().has_content = true;
    }
    void OnDocumentStart(const YAML::Mark& mark) override { documents.push_back({mark, false}); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override { content(); }
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { content(); }
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      content();
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
      content();
    }
    void OnMapEnd() override {}
  };
  constexpr int kMaxDocuments = 64;
  std::istringstream input(text);
  YAML::Parser parser(input);
  Survey survey;
  for (int handled = 0; parser.HandleNextDocument(survey);)
    if (++handled > kMaxDocuments)
      throw YAML::ParserException(survey.documents.empty() ? YAML::Mark::null_mark() : survey.documents.back().mark,
                                  "a ',' outside [ ] or { } (or more than 64 documents)");
  return survey.documents;
}

// A document after the first that holds anything (trainbench reads one), or
// nullptr.
const YamlDocument* extra_document(const std::vector<YamlDocument>& documents) {
  for (size_t i = 1; i < documents.size(); ++i)
    if (documents[i].has_content) return &documents[i];
  return nullptr;
}

// Where each value came from, for messages about it: "configs/x.yaml:7" or
// "--set model.d_model=66". Keys left at their default are absent.
struct ValueSource {
  std::string where;
  int override_order = -1;  // position among the --set arguments; -1 for the file
};
using Sources = std::map<std::string, ValueSource, std::less<>>;

std::string at(const std::string& origin, const YAML::Mark& mark, bool with_column = false) {
  if (mark.is_null()) return origin;
  // Appended piecewise: `":" + std::to_string(...)` trips GCC 12's false -Wrestrict at -O3.
  std::string where = origin;
  where += ':';
  where += std::to_string(mark.line + 1);
  if (with_column) {
    where += ':';
    where += std::to_string(mark.column + 1);
  }
  return where;
}

// yaml-cpp calls a tab-indented key an "illegal map value" or worse, which
// does not say that the tab (invisible in most editors) is the fault.
bool indented_with_a_tab(const std::string& text, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return false;
  size_t start = 0;
  for (int line = 0; line < mark.line; ++line) {
    start = text.find('\n', start);
    if (start == std::string::npos) return false;
    ++start;
  }
  const size_t indent_end = text.find_first_not_of(" \t", start);
  const size_t tab = text.find('\t', start);
  return tab != std::string::npos && (indent_end == std::string::npos || tab < indent_end);
}

// The path keys whose leading ~/ is the home folder (expand_home_paths).
constexpr std::array<std::string_view, 3> kHomeExpandedKeys = {"checkpoint.dir", "data.shards", "report.out"};

bool is_home_expanded_key(std::string_view key) {
  return std::find(kHomeExpandedKeys.begin(), kHomeExpandedKeys.end(), key) != kHomeExpandedKeys.end();
}

constexpr const char* kBareTildeProblem =
    "'~' alone is YAML's null (the default \"\"), not the home folder: write ~/ and a folder under it, the whole "
    "path, or \"\" for the default";

// Whether the null value at `mark` is spelled ~ (not `key:` with nothing,
// nor null): the plain scalar alone, up to a blank, a comment or the flow's
// next item. yaml-cpp counts UTF-8 bytes after the byte-order mark; a
// UTF-16 or UTF-32 text's are not its bytes, and go unchecked.
bool is_bare_tilde_at(const std::string& text, const YAML::Mark& mark) {
  const size_t bom = text.starts_with("\xef\xbb\xbf") ? 3 : 0;
  const size_t at = bom + static_cast<size_t>(mark.pos);
  if (mark.pos < 0 || at >= text.size() || text[at] != '~') return false;
  const size_t after = at + 1;
  return after == text.size() || std::string_view(" \t\r\n,}]#").find(text[after]) != std::string_view::npos;
}

void apply_yaml(Config& config, Sources& sources, const std::string& text,
                const std::string& origin) {
  // yaml-cpp reads on past a NUL byte and calls what follows a bad escape
  // ("unknown escape character: \x04"): a config is text, said as such.
  // UTF-16 and UTF-32 are NULs and all, and yaml-cpp reads them by their
  // byte-order mark.
  const bool wide = text.starts_with("\xff\xfe") || text.starts_with("\xfe\xff") ||
                    text.starts_with(std::string_view("\0\0\xfe\xff", 4));
  if (const size_t nul = wide ? std::string::npos : text.find('\0'); nul != std::string::npos) {
    const size_t line = static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul),
                                                        '\n')) + 1;
    const size_t line_start = text.rfind('\n', nul);
    const size_t column = nul - (line_start == std::string::npos ? 0 : line_start + 1) + 1;
    fail(origin + ":" + std::to_string(line) + ":" + std::to_string(column) +
         ": a NUL byte: a config is YAML text (a binary file, or UTF-16 without its byte-order mark?)");
  }
  // Without its trailing blank lines: yaml-cpp 0.7 reads a quoted scalar
  // left open before a final newline as running to the end of the file (no
  // error), and so swallowed every key after it (`out: "r.json` took the
  // train section into a file name, and the run used the defaults).
  const std::string trimmed = text.substr(0, text.find_last_not_of(" \t\r\n") + 1);
  // Classic Mac line endings: the file is one line to YAML ("unknown section
  // 'model:   n_layers'").
  if (trimmed.find('\r') != std::string::npos && trimmed.find('\n') == std::string::npos)
    fail(origin + ": its lines end in a lone carriage return (CR), which YAML does not read as a line end; "
                  "save it with LF or CRLF line endings");
  std::vector<YamlDocument> documents;
  YAML::Node root;
  try {
    documents = yaml_documents(trimmed);
    root = YAML::Load(trimmed);  // the first document
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp 0.7 says "bad file"
    fail(at(origin, e.mark, /*with_column=*/true) + ": YAML nested too deep: at most " +
         std::to_string(e.depth() - 1) + " levels of lists and maps are read");
  } catch (const YAML::Exception& e) {
    fail(at(origin, e.mark, /*with_column=*/true) + ": malformed YAML: " + e.msg +
         (indented_with_a_tab(text, e.mark) ? " (a tab in the indentation: YAML indents with spaces)"
                                            : ""));
  }
  // YAML::Load would read the first document and drop the rest unread; an
  // empty document after it (a trailing "---") loses nothing.
  if (const YamlDocument* extra = extra_document(documents))
    fail(at(origin, extra->mark) + ": config " + origin + " has " + std::to_string(documents.size()) +
         " YAML documents; trainbench reads one");
  if (root.IsNull()) return;  // an empty file: every default
  const std::vector<std::string_view> sections = section_names();
  const std::string sections_list = join(sections, ", ");
  if (!root.IsMap())
    fail(at(origin, root.Mark()) + ": the top level must be a map of sections (" + sections_list +
         "), not " + describe(root));
  if (const std::optional<std::string> tag = unknown_tag(root))
    fail(at(origin, root.Mark()) + ": the top level: " + tag_problem(*tag));

  std::set<std::string, std::less<>> seen;
  for (const auto& section : root) {
    const std::string name = section.first.Scalar();
    const std::string section_where = at(origin, section.first.Mark());
    // `~: 1` or `[a, b]: 1` was "unknown section ''".
    if (!section.first.IsScalar())
      fail(section_where + ": a section's name is " + describe(section.first) + "; sections are " + sections_list);
    // `model.n_layers: 3` at the top level: the --set spelling in a file.
    if (find_key(name) != nullptr)
      fail(section_where + ": unknown section '" + name + "': in a file, write " + std::string(section_of(name)) +
           ": and under it, indented, " + name.substr(name.find('.') + 1) + ":");
    if (std::find(sections.begin(), sections.end(), name) == sections.end())
      fail(section_where + ": unknown section '" + excerpt(name) + "'" + suggestion(name, sections) +
           "; sections are " + sections_list);
    // yaml-cpp keeps repeated map keys; the later one would silently win.
    if (!seen.insert(name).second) fail(section_where + ": duplicate section '" + excerpt(name) + "'");
    for (const YAML::Node& node : {section.first, section.second})
      if (const std::optional<std::string> tag = unknown_tag(node))
        fail(section_where + ": " + name + ": " + tag_problem(*tag));
    if (section.second.IsNull()) continue;  // `train:` with nothing under it
    if (!section.second.IsMap())
      fail(section_where + ": " + name + ": expected a map of keys, not " + describe(section.second));

    for (const auto& entry : section.second) {
      const std::string key = name + "." + entry.first.Scalar();
      const std::string where = at(origin, entry.first.Mark());
      if (!entry.first.IsScalar()) fail(where + ": " + name + ": a key's name is " + describe(entry.first));
      const KeySpec* spec = find_key(key);
      if (spec == nullptr)
        fail(where + ": unknown key '" + excerpt(key) + "'" + suggestion(key, key_names()));
      if (!seen.insert(key).second) fail(where + ": duplicate key '" + excerpt(key) + "'");
      if (const std::optional<std::string> tag = unknown_tag(entry.first))
        fail(where + ": " + key + ": " + tag_problem(*tag));
      // `dir: ~` is YAML's null, the default "": checkpoints went to a
      // temporary folder removed at exit, in silence, as from --set.
      if (is_home_expanded_key(key) && entry.second.IsNull() && !wide && is_bare_tilde_at(trimmed, entry.second.Mark()))
        fail(where + ": " + key + ": " + kBareTildeProblem);
      if (auto error = assign_value(config, *spec, entry.second)) fail(where + ": " + key + ": " + *error);
      sources[key] = {where};
    }
  }
}

// `--set checkpoint.dir=~/ck` is one word that no shell expands, and the
// run made a folder named "~" in the working folder. A refusal names where
// the value came from ("x.yaml:3: ", "--set ...: "), as validate()'s do.
void expand_home_paths(Config& config, const Sources& sources) {
  for (auto [key, path] : {std::pair<std::string_view, std::string*>{kHomeExpandedKeys[0], &config.checkpoint.dir},
                           {kHomeExpandedKeys[1], &config.data.shards},
                           {kHomeExpandedKeys[2], &config.report.out}}) {
    const std::string error = expand_home(path);
    if (error.empty()) continue;
    const auto source = sources.find(key);
    fail((source != sources.end() ? source->second.where + ": " : std::string()) + std::string(key) + ": " + error);
  }
}

void apply_override(Config& config, Sources& sources, const std::string& override_text,
                    int override_order) {
  const std::string where = "--set " + excerpt(override_text);
  const size_t equals = override_text.find('=');
  if (equals == std::string::npos)
    fail(where + ": expected section.key=value, e.g. model.n_layers=4");
  const std::string key = override_text.substr(0, equals);
  if (key.empty()) fail(where + ": expected section.key=value, the key is empty");
  const KeySpec* spec = find_key(key);
  if (spec == nullptr) fail(where + ": unknown key '" + excerpt(key) + "'" + suggestion(key, key_names()));
  // Parsed as YAML so that a value means the same on the command line as in a file.
  YAML::Node value;
  const std::string text = override_text.substr(equals + 1);
  // A free string's value that YAML reads as syntax: `data.shards=*.tar` was
  // "the referenced anchor is not defined", `{a,b}.tar` "a map is not a
  // string". Not a choice's, nor lora.targets' (names with commas), which
  // quotes would not make right.
  Config scratch;
  const bool string_key = std::holds_alternative<std::string*>(spec->field(scratch)) && spec->choices.empty() &&
                          spec->name != "lora.targets";
  const size_t first = text.find_first_not_of(" \t");
  const std::string quote_it =
      string_key && first != std::string::npos && std::string_view("*&{[|>%@`").find(text[first]) != std::string_view::npos
          ? " (a value starting with '" + std::string(1, text[first]) + "' is YAML syntax: quote it, e.g. --set '" +
                key + "=\"" + excerpt(text.substr(first)) + "\"')"
          : "";
  try {
    // Every document: YAML::Load took the first, so "3\n---\n9" set 3 in
    // silence (a config file of two is refused too). Only a value of several
    // lines can hold two, and one line's "," is lora.targets' nothing.
    if (text.find('\n') != std::string::npos) {
      const std::vector<YamlDocument> documents = yaml_documents(text);
      if (extra_document(documents) != nullptr)
        fail(where + ": " + key + ": the value holds " + std::to_string(documents.size()) +
             " YAML documents; a --set takes one");
    }
    // Without trailing blanks, as a file: yaml-cpp 0.7 read `"/tmp/ck` and
    // a newline as the path "/tmp/ck " where without the newline it is a
    // quote left open.
    value = YAML::Load(text.substr(0, text.find_last_not_of(" \t\r\n") + 1));
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp 0.7 says "bad file"
    fail(where + ": " + key + ": value nested too deep: at most " + std::to_string(e.depth() - 1) +
         " levels of lists and maps are read");
  } catch (const YAML::Exception& e) {
    fail(where + ": " + key + ": malformed value: " + e.msg + quote_it);
  }
  // YAML reads "," or " " as nothing, which a string key takes as "": a
  // data.shards of "$LIST," with an empty $LIST silently trained on
  // synthetic data (so did " ", and --out ' ' wrote the default file). Only
  // an empty value and YAML's own spellings of nothing mean it.
  const size_t shown = text.find_first_not_of(" \t");
  const std::string spelled = shown == std::string::npos ? "" : text.substr(shown, text.find_last_not_of(" \t") - shown + 1);
  // lora.targets is bare names and commas, which need no quotes: YAML reads
  // "," and ",q" as nothing, and validate() says which entry is empty.
  if (value.IsNull() && spec->name == "lora.targets" && spelled.find(',') != std::string::npos)
    value = YAML::Node(spelled);
  // A path key's "~" alone is YAML's null too: `--set checkpoint.dir=~`
  // turned checkpoints into a temporary folder removed at exit, in silence.
  if (spelled == "~" && is_home_expanded_key(spec->name)) fail(where + ": " + key + ": " + kBareTildeProblem);
  if (value.IsNull() && !text.empty() && spelled != "~" && spelled != "null" && spelled != "Null" && spelled != "NULL")
    fail(where + ": " + key + ": '" + excerpt(text) + "' reads as nothing in YAML; quote it ('\"" + excerpt(text) +
         "\"') if it is meant, or give a value");
  if (auto error = assign_value(config, *spec, value)) fail(where + ": " + key + ": " + *error + quote_it);
  sources[key] = {where, override_order};
}

// Throws "<where>: <key>: <problem>" about the first of `keys`. `where` is
// what the user should edit: the last --set among `keys`, else the file line
// of the first key that the file sets, else the origin.
class Checker {
 public:
  Checker(const Config& config, const Sources& sources) : config_(config), sources_(sources) {}

  void require(bool ok, std::initializer_list<std::string_view> keys,
               const std::string& problem) const {
    if (ok) return;
    const ValueSource* chosen = nullptr;
    for (std::string_view key : keys) {
      const auto found = sources_.find(key);
      if (found == sources_.end()) continue;
      const ValueSource& source = found->second;
      if (chosen == nullptr || source.override_order > chosen->override_order) chosen = &source;
    }
    const std::string& where = chosen != nullptr ? chosen->where : config_.origin;
    fail((where.empty() ? "" : where + ": ") + std::string(*keys.begin()) + ": " + problem);
  }

 private:
  const Config& config_;
  const Sources& sources_;
};

void check_bound(const Checker& checker, const KeySpec& spec, const FieldPtr& field) {
  double value = 0;
  if (const auto* v = std::get_if<int64_t*>(&field)) value = static_cast<double>(**v);
  else if (const auto* v = std::get_if<double*>(&field)) value = **v;
  else return;
  const std::string got = " (got " + format_value(field) + ")";
  // Written so that NaN (possible only from code, not from parsing) fails.
  switch (spec.bound) {
    case Bound::kAny: break;
    case Bound::kPositive:
      // A key whose smallest value is one a person would type says its range
      // below, not "> 0", which 0.5 is and is refused (comm.timeout_s from
      // 1). (An fp32 floor, 1e-30, is no such value: "> 0" says it.)
      if (!(spec.max > 0 && spec.min > kMinFp32Setting)) checker.require(value > 0, {spec.name}, "must be > 0" + got);
      break;
    case Bound::kNonNegative: checker.require(value >= 0, {spec.name}, "must be >= 0" + got); break;
    case Bound::kUnit:
      // (AdamW's betas, fp32 in both engines: 0.999999999 rounded to 1 there,
      // its bias correction 1 - beta^t to 0 and the loss to NaN, exit 4.)
      checker.require(value >= 0 && static_cast<float>(value) < 1.0f, {spec.name},
                      (value >= 0 && value < 1 ? "must be in [0, 1) as a 32-bit float, where it is 1 (the engines' "
                                                 "precision: 0.99999994 is the largest below 1)"
                                               : "must be in [0, 1)") +
                          got);
      break;
    case Bound::kPercent:
      checker.require(value > 0 && value < 100, {spec.name}, "must be a percentage in (0, 100)" + got);
      break;
  }
  if (spec.max > 0) {
    const bool whole = std::holds_alternative<int64_t*>(field);  // a double may be 0.5: "> 0", not "from 1"
    char min_text[32];
    std::snprintf(min_text, sizeof(min_text), "%g", spec.min);
    const std::string low = spec.min > 0 ? min_text : spec.bound != Bound::kPositive ? "0" : whole ? "1" : "";
    checker.require(value <= static_cast<double>(spec.max) && value >= spec.min, {spec.name},
                    (low.empty() ? "must be > 0 and at most " + std::to_string(spec.max)
                                 : "must be between " + low + " and " + std::to_string(spec.max)) + got);
  }
}

// "q, k,v" → {"q", "k", "v"}: commas separate, blanks around a name are
// dropped, and so is one comma after the last name (YAML's [q, k,] has two
// entries too). Any other empty entry is kept, for validate() to refuse:
// "q,,k" has lost a name. "" (or blanks) is no entry at all.
std::vector<std::string> split_targets(const std::string& list) {
  constexpr const char* kBlanks = " \t";
  std::vector<std::string> entries;
  if (list.find_first_not_of(kBlanks) == std::string::npos) return entries;
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    const std::string entry = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t first = entry.find_first_not_of(kBlanks);
    entries.push_back(first == std::string::npos ? ""
                                                 : entry.substr(first, entry.find_last_not_of(kBlanks) - first + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (entries.size() >= 2 && entries.back().empty() && !entries[entries.size() - 2].empty()) entries.pop_back();
  return entries;
}

// The projections `targets` names (split_targets' way, empty entries
// aside: an old manifest's "q,,k" builds the adapters of "q,k"), in layer
// order, each once: the adapters an engine builds, however the list is
// written. False when it names one LoRA cannot adapt.
bool lora_targets_in_layer_order(const std::string& targets, std::vector<ParamKind>* kinds) {
  const std::vector<std::string> names = split_targets(targets);
  kinds->clear();
  for (const std::string& name : names) {
    ParamKind kind;
    if (!name.empty() && !parse_lora_target(name, &kind)) return false;
  }
  for (ParamKind kind : kLoraTargetKinds)
    for (const std::string& name : names) {
      ParamKind named;
      if (parse_lora_target(name, &named) && named == kind) {
        kinds->push_back(kind);
        break;
      }
    }
  return true;
}

// Element counts that saturate at INT64_MAX instead of wrapping: the sizes of
// a model are checked with these before any code multiplies them unchecked
// (the parameter layout, the memory plan, the engines' buffers).
constexpr int64_t kSaturated = INT64_MAX;
int64_t mul(int64_t a, int64_t b) {
  int64_t product;
  return __builtin_mul_overflow(a, b, &product) ? kSaturated : product;
}
int64_t add(int64_t a, int64_t b) {
  int64_t sum;
  return __builtin_add_overflow(a, b, &sum) ? kSaturated : sum;
}
std::string count_text(int64_t count) {
  return count == kSaturated ? "more than 2^63" : std::to_string(count);
}

// Parameters, each weight matrix and the activations of one micro-batch must
// stay under limits no real model reaches (kMaxParameters,
// kMaxActivationElements), so that every later size computation in int64 —
// bytes, per-rank shards, the memory plan — is exact. Every size is positive
// here (check_bound ran first).
void check_model_sizes(const Checker& checker, const Config& config) {
  const ModelShape& m = config.model;
  const int64_t layers = std::max(m.n_layers, config.n_layers_full);
  const int64_t d = m.d_model, f = m.ffn_hidden, kv = m.kv_dim();
  const std::string limit = " exceeds the limit of " + std::to_string(kMaxParameters) + " (2^40)";
  const int64_t attention = mul(d, d);
  checker.require(attention <= kMaxParameters, {"model.d_model"},
                  "an attention projection of model.d_model x model.d_model has " + count_text(attention) +
                      " parameters, which" + limit);
  const int64_t embedding = mul(m.vocab, d);
  checker.require(embedding <= kMaxParameters, {"model.vocab", "model.d_model"},
                  "the embedding of model.vocab x model.d_model has " + count_text(embedding) +
                      " parameters, which" + limit);
  const int64_t mlp = mul(f, d);
  checker.require(mlp <= kMaxParameters, {"model.ffn_hidden", "model.d_model"},
                  "an MLP projection of model.ffn_hidden x model.d_model has " + count_text(mlp) +
                      " parameters, which" + limit);
  // As ParameterLayout lays them out: per layer two norms, wq, wk, wv, wo,
  // gate, up, down (and LoRA's adapters, rank x (in + out) per target).
  int64_t per_layer = add(add(mul(2, d), mul(2, attention)), add(mul(2, mul(kv, d)), mul(3, mlp)));
  if (config.train.mode == "lora")
    per_layer = add(per_layer, mul(kLoraTargetCount, mul(config.lora.rank, add(d, std::max(d, f)))));
  const int64_t parameters = add(add(mul(2, embedding), d), mul(layers, per_layer));
  // Named where the latest of the sizes came from: a --set model.d_model
  // was blamed on the preset's n_layers line.
  checker.require(parameters <= kMaxParameters,
                  {config.n_layers_full > m.n_layers ? "model.n_layers_full" : "model.n_layers", "model.d_model",
                   "model.ffn_hidden", "model.vocab", "model.n_kv_heads", "lora.rank"},
                  std::to_string(layers) + " layers of model.d_model " + std::to_string(d) + ", ffn_hidden " +
                      std::to_string(f) + " and vocab " + std::to_string(m.vocab) + " make " +
                      count_text(parameters) + " parameters, which" + limit);

  // Activations as the engines size them (kernels/cpu activation_sizes,
  // kernels/cuda carve_engine_views), rounded up: n = micro_batch x seq_len
  // tokens through every width, the attention probabilities
  // micro_batch x n_heads x seq_len^2 per layer, and the CPU engine's
  // seq_len^2 scratch per thread.
  const int64_t n = mul(config.train.micro_batch, m.seq_len);
  // A step's tokens: printed, counted and multiplied by the world size in int64.
  const int64_t step_tokens = mul(n, config.train.grad_accum);
  checker.require(step_tokens <= kMaxStepTokens, {"train.grad_accum", "train.micro_batch", "model.seq_len"},
                  "train.micro_batch " + std::to_string(config.train.micro_batch) + " x train.grad_accum " +
                      std::to_string(config.train.grad_accum) + " x model.seq_len " + std::to_string(m.seq_len) +
                      " is " + count_text(step_tokens) + " tokens a step on each rank, more than the limit of " +
                      std::to_string(kMaxStepTokens) + " (2^40)");
  const int64_t widths = add(add(mul(6, d), mul(4, m.q_dim())), add(mul(4, kv), add(mul(6, f), 8)));
  const int64_t probs = mul(mul(config.train.micro_batch, m.n_heads), mul(m.seq_len, m.seq_len));
  int64_t layer_acts = add(mul(n, widths), mul(2, probs));
  if (config.train.mode == "lora") layer_acts = add(layer_acts, mul(n, mul(config.lora.rank, kLoraTargetCount + 1)));
  const int64_t final_acts = add(mul(n, add(m.vocab, 64)), mul(n, add(mul(2, d), 8)));
  const int64_t scratch = mul(mul(m.seq_len, m.seq_len), kMaxThreads);
  const int64_t activations = add(add(mul(layers, layer_acts), final_acts), scratch);
  checker.require(activations <= kMaxActivationElements, {"model.seq_len", "train.micro_batch"},
                  std::to_string(m.seq_len) + " tokens x train.micro_batch " +
                      std::to_string(config.train.micro_batch) + " need " + count_text(activations) +
                      " activation elements over " + std::to_string(layers) +
                      " layers (the attention probabilities micro_batch x n_heads x seq_len^2 alone " +
                      count_text(probs) + " per layer), more than the limit of " +
                      std::to_string(kMaxActivationElements) + " (2^56)");
  // Both engines take a micro-batch's rows as 32-bit counts: OpenBLAS's cblas
  // sizes are int (past it the GEMM was refused and the step went on with
  // its outputs unwritten), a CUDA launch covers 2^31 - 1 blocks.
  checker.require(n <= INT32_MAX, {"train.micro_batch", "model.seq_len"},
                  "train.micro_batch " + std::to_string(config.train.micro_batch) + " x model.seq_len " +
                      std::to_string(m.seq_len) + " is " + count_text(n) +
                      " tokens a micro-batch, more than the engines' 2147483647 rows");
}

// Every key against its bounds and choices (the key table).
void check_keys(const Checker& checker, const Config& config) {
  for (const KeySpec& spec : key_table()) {
    const FieldPtr field = field_of(config, spec);
    check_bound(checker, spec, field);
    if (!spec.choices.empty()) {
      const std::string& value = *std::get<std::string*>(field);
      // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive)
      // of "'" + excerpt(value) once this function is inlined.
      std::string refusal = "'";
      refusal += excerpt(value);
      refusal += "' is not one of ";
      refusal += join(spec.choices, ", ");
      checker.require(std::find(spec.choices.begin(), spec.choices.end(), value) != spec.choices.end(),
                      {spec.name}, refusal);
    }
  }
}

// The model's shape, each size positive by now (the key table), so the divisions are safe.
void check_model_shape(const Checker& checker, const ModelShape& m) {
  checker.require(m.vocab <= INT32_MAX, {"model.vocab"},
                  std::to_string(m.vocab) + " exceeds 2147483647 (token ids are int32)");
  // One token leaves nothing to predict: the loss was exactly 0 at every
  // step and every check passed.
  checker.require(m.vocab >= 2, {"model.vocab"}, "1 token leaves nothing to predict (the loss is 0 at every step); "
                                                 "at least 2");
  checker.require(m.d_model % m.n_heads == 0, {"model.n_heads", "model.d_model"},
                  std::to_string(m.n_heads) + " does not divide model.d_model (" +
                      std::to_string(m.d_model) + ")");
  checker.require(m.n_heads % m.n_kv_heads == 0, {"model.n_kv_heads", "model.n_heads"},
                  std::to_string(m.n_kv_heads) + " does not divide model.n_heads (" +
                      std::to_string(m.n_heads) + ")");
  checker.require(m.head_dim() % 2 == 0, {"model.d_model", "model.n_heads"},
                  "head dimension d_model / n_heads = " + std::to_string(m.head_dim()) +
                      " is odd; RoPE rotates pairs of dimensions");
}

// The steps, and the engine's precision and attention against train.device.
void check_train(const Checker& checker, const TrainSection& t) {
  checker.require(t.warmup_steps < t.steps, {"train.warmup_steps", "train.steps"},
                  std::to_string(t.warmup_steps) + " must be < train.steps (" +
                      std::to_string(t.steps) + ") so that some steps are measured: lower train.warmup_steps "
                                                "or raise train.steps");
  // (NaN and negatives are refused by the keys' own bounds.)
  const auto require_fp32 = [&checker](double value, const char* key, const char* zero) {
    const bool fits = value == 0 || (value >= kMinFp32Setting && value <= std::numeric_limits<float>::max());
    char problem[160];
    std::snprintf(problem, sizeof(problem), "must be %s%g to %g: the engines hold it in fp32 (got %g)", zero,
                  kMinFp32Setting, static_cast<double>(std::numeric_limits<float>::max()), value);
    checker.require(fits, {key}, problem);
  };
  require_fp32(t.lr, "train.lr", "");
  require_fp32(t.weight_decay, "train.weight_decay", "0 or ");
  require_fp32(t.grad_clip, "train.grad_clip", "0 (no clipping) or ");
  checker.require(!(t.precision == "bf16" && t.device == "cpu"), {"train.precision", "train.device"},
                  "bf16 needs train.device cuda or auto; the CPU backend computes in fp32");
  // The cuda engine trains bf16 (fp32 master weights and accumulation) and
  // has no fp32 path: a run asking for one would be a bf16 run recorded as fp32.
  checker.require(!(t.precision == "fp32" && t.device == "cuda"), {"train.precision", "train.device"},
                  "fp32 is the cpu engine's precision; the cuda engine trains bf16 with fp32 master weights "
                  "(use train.precision bf16 or auto)");
  checker.require(!(t.attention == "cudnn" && t.device == "cpu"), {"train.attention", "train.device"},
                  "cudnn is the cuda engine's fused attention, but train.device is cpu (the cpu engine runs attention as GEMMs)");
}

void check_comm(const Checker& checker, const Config& config) {
  const TrainSection& t = config.train;
  checker.require(config.comm.zero <= 1, {"comm.zero"},
                  std::to_string(config.comm.zero) + " is not 0 or 1 (ZeRO stage 1 shards the optimizer state)");
  // Engine and backend that cannot go together (train.device auto: the CLI
  // checks the device it resolves to).
  checker.require(!(config.comm.backend == "nccl" && t.device == "cpu"), {"comm.backend", "train.device"},
                  "nccl reduces device buffers and needs the cuda engine, but train.device is cpu "
                  "(use comm.backend auto, local or mpi)");

  // A gradient bucket of at least 1 KiB (smaller is all latency: 4-byte
  // buckets made a 164,160-bucket step) and at most 1 TiB (a larger one is
  // one bucket anyway; 1e20 MiB overflowed the byte count into 4-byte buckets).
  checker.require(config.comm.bucket_mb >= 1.0 / 1024 && config.comm.bucket_mb <= 1 << 20, {"comm.bucket_mb"},
                  "must be between 0.0009765625 (1 KiB) and 1048576 (1 TiB; a bucket larger than the gradients "
                  "is one bucket) (got " + format_double(config.comm.bucket_mb) + ")");
}

void check_lora(const Checker& checker, const Config& config) {
  const ModelShape& m = config.model;
  const TrainSection& t = config.train;
  // The adapters' targets are checked whatever the mode: a typo in a config
  // that trains full today is one in the LoRA run it is kept for.
  // "q,,k" and "q k" trained q and k, and printed as written.
  const std::string& targets = config.lora.targets;
  const std::vector<std::string> entries = split_targets(targets);
  std::vector<std::string> lora_targets;
  std::string bad_target;
  if (!entries.empty() && std::all_of(entries.begin(), entries.end(), [](const std::string& e) { return e.empty(); }))
    bad_target = "'" + excerpt(targets) + "' names no projection, only empty entries (list any of q, k, v, o, "
                 "gate, up, down, separated by commas)";
  for (size_t i = 0; i < entries.size() && bad_target.empty(); ++i) {
    const std::string& name = entries[i];
    ParamKind kind;
    if (name.empty())
      bad_target = "entry " + std::to_string(i + 1) + " of '" + excerpt(targets) +
                   "' is empty (names are separated by single commas)";
    else if (!parse_lora_target(name, &kind))
      bad_target = "'" + excerpt(name) + "' is not one of q, k, v, o, gate, up, down" +
                   (name.find_first_of(" \t") != std::string::npos ? " (names are separated by commas)" : "");
    else if (std::find(lora_targets.begin(), lora_targets.end(), name) != lora_targets.end())
      bad_target = "'" + name + "' is listed twice";
    lora_targets.push_back(name);
  }
  checker.require(bad_target.empty(), {"lora.targets"}, bad_target);
  if (t.mode == "lora") {
    checker.require(!bad_target.empty() || !lora_targets.empty(), {"lora.targets"},
                    "names no projection (any of q, k, v, o, gate, up, down)");
    checker.require(config.lora.rank <= m.d_model, {"lora.rank", "model.d_model"},
                    std::to_string(config.lora.rank) + " exceeds model.d_model (" + std::to_string(m.d_model) +
                        "): an adapter of full rank is full fine-tuning, use train.mode full");
    checker.require(config.comm.zero == 0, {"comm.zero", "train.mode"},
                    "ZeRO-1 shards every parameter's optimizer state, and train.mode lora freezes the base; "
                    "the adapters' state is small: use comm.zero 0");
  }
}

void check_data(const Checker& checker, const Config& config) {
  const ModelShape& m = config.model;
  const DataSection& d = config.data;
  checker.require(d.eos_token == -1 || (d.eos_token >= 0 && d.eos_token < m.vocab),
                  {"data.eos_token", "model.vocab"},
                  std::to_string(d.eos_token) + " is not -1 (= model.vocab - 1) or a token id below model.vocab (" +
                      std::to_string(m.vocab) + ")");
  // One range in one message (a separate key maximum said "between 1 and
  // 268435456" of a value this refuses below 1 MiB).
  checker.require(d.block_bytes >= (1 << 20) && d.block_bytes <= (int64_t{256} << 20), {"data.block_bytes"},
                  "must be between 1048576 (1 MiB: small reads waste parallel filesystems) and 268435456 "
                  "(256 MiB) (got " + std::to_string(d.block_bytes) + ")");
  bool field_known = true;
  try {
    const TokenFormat format = token_format_of_field(d.field);
    checker.require(!(format == TokenFormat::kU16 && m.vocab > 65536), {"data.field", "model.vocab"},
                    excerpt(d.field) + " holds token ids below 65536 but model.vocab is " +
                        std::to_string(m.vocab) + ": use u32 or npy");
    checker.require(!(format == TokenFormat::kTxt && m.vocab < 256), {"data.field", "model.vocab"},
                    "txt gives byte-level token ids up to 255 but model.vocab is " +
                        std::to_string(m.vocab));
  } catch (const DataError&) {
    field_known = false;
  }
  checker.require(field_known, {"data.field"},
                  "'" + excerpt(d.field) + "': the last extension must be a token format: u16, u32, npy or txt");
  // A member's extension is what follows its key's dot: ".u16" matched no
  // member, found only at the first sample.
  checker.require(!field_known || field_is_an_extension(d.field), {"data.field"},
                  "'" + excerpt(d.field) + "': " + kFieldExtensionRule);
  // Tokens made in memory read no storage: shards named beside them would be
  // silently ignored, and the run's storage figures taken for theirs.
  checker.require(d.source != "synthetic" || d.shards.empty(), {"data.source", "data.shards"},
                  "synthetic makes its batches in memory and reads no shards, but data.shards is '" + excerpt(d.shards) +
                      "': set data.source shards to read them, or leave data.shards empty");
  checker.require(d.source != "shards" || !d.shards.empty() || d.field.find('.') == std::string::npos,
                  {"data.field", "data.shards"},
                  "'" + excerpt(d.field) + "': the shards made when data.shards is empty have a plain "
                  "u16, u32, npy or txt member; name one of those or set data.shards");
  // The run's own shards must pass its own reader: a member over
  // data.max_sample_bytes was refused as corrupt data, in a temporary folder
  // the user never named, after every shard had been written.
  if (d.source == "shards" && d.shards.empty()) {
    const int64_t largest = synth_largest_member_bytes(run_shard_samples(config));
    checker.require(largest <= d.max_sample_bytes,
                    {"data.max_sample_bytes", "data.synth_payload_bytes", "data.synth_tokens_per_sample"},
                    std::to_string(d.max_sample_bytes) + " is below the largest member of the shards made for the "
                    "run (data.shards empty): " + std::to_string(largest) + " bytes, from data.synth_payload_bytes " +
                    std::to_string(d.synth_payload_bytes) + " and data.synth_tokens_per_sample " +
                    std::to_string(d.synth_tokens_per_sample) + " (each up to half again their mean): raise "
                    "data.max_sample_bytes to " + std::to_string(largest) + " or lower those");
  }
}

void validate(const Config& config, const Sources& sources) {
  const Checker checker(config, sources);
  check_keys(checker, config);
  check_model_shape(checker, config.model);
  check_train(checker, config.train);
  check_comm(checker, config);
  check_lora(checker, config);
  check_model_sizes(checker, config);
  const CheckpointSection& ck = config.checkpoint;
  checker.require(ck.block_bytes % 4096 == 0 && ck.block_bytes >= (1 << 20), {"checkpoint.block_bytes"},
                  "must be a multiple of 4096 and at least 1048576 (O_DIRECT alignment, large writes) (got " +
                      std::to_string(ck.block_bytes) + ")");
  check_data(checker, config);
  // The ops are timed inside each timed step: with no step timed, op_times
  // gave no breakdown and said nothing of it.
  checker.require(!config.report.op_times || config.report.instrument, {"report.op_times", "report.instrument"},
                  "true needs report.instrument: true (the ops are timed inside each timed step, and "
                  "report.instrument: false times none)");
}

// A config states at most a few hundred keys; a larger file is not one.
constexpr uintmax_t kMaxConfigBytes = uintmax_t{16} << 20;

const EmbeddedPreset* preset_named(std::string_view name) {
  for (const EmbeddedPreset& preset : embedded_presets())
    if (preset.name == name) return &preset;
  return nullptr;
}

// An embedded preset named by CONFIG: "tiny", "tiny.yaml" or "configs/tiny.yaml".
const EmbeddedPreset* find_preset(const std::string& path_or_preset) {
  const std::filesystem::path path = std::filesystem::path(path_or_preset).lexically_normal();
  if (!path.parent_path().empty() && path.parent_path() != "configs") return nullptr;
  std::string name = path.filename().string();
  if (name.ends_with(".yaml")) name.resize(name.size() - 5);
  return preset_named(name);
}

// "cpu-small, gpt2-124m, ...": for the messages that name a preset wrongly.
std::string preset_list() {
  std::vector<std::string_view> names;
  for (const EmbeddedPreset& preset : embedded_presets()) names.push_back(preset.name);
  return join(names, ", ");
}

}  // namespace

std::string excerpt(std::string_view text) {
  if (text.size() <= kExcerptBytes) return std::string(text);
  size_t cut = kExcerptBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return std::string(text.substr(0, cut)) + "… (" + std::to_string(text.size()) + " bytes)";
}


SynthOptions run_shard_samples(const Config& config) {
  const DataSection& d = config.data;
  SynthOptions synth;
  synth.vocab = config.model.vocab;
  synth.field = d.field;
  synth.tokens_mean = d.synth_tokens_per_sample;
  synth.tokens_spread = d.synth_tokens_per_sample / 2;
  synth.payload_bytes = d.synth_payload_bytes;
  synth.payload_spread = d.synth_payload_bytes / 2;
  synth.seed = static_cast<uint64_t>(d.seed);
  return synth;
}

LoraSpec lora_spec(const Config& config) {
  LoraSpec spec;
  if (config.train.mode != "lora") return spec;
  spec.rank = config.lora.rank;
  spec.alpha = config.lora.alpha;
  // In layer order whatever the order written; validate() has checked the names.
  lora_targets_in_layer_order(config.lora.targets, &spec.targets);
  return spec;
}

Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  Config config;
  config.origin = origin;
  Sources sources;
  apply_yaml(config, sources, yaml_text, origin);
  for (size_t i = 0; i < overrides.size(); ++i)
    apply_override(config, sources, overrides[i], static_cast<int>(i));
  expand_home_paths(config, sources);
  validate(config, sources);
  for (const auto& [key, source] : sources) config.keys_given.insert(key);
  // Printed and recorded as it trains: "q , k," is q,k (in the order written).
  const std::vector<std::string> targets = split_targets(config.lora.targets);
  config.lora.targets = join(std::vector<std::string_view>(targets.begin(), targets.end()), ",");
  return config;
}

std::string last_override_scalar(const std::vector<std::string>& overrides, const std::string& key,
                                 const std::string& otherwise) {
  std::string value = otherwise;
  for (const std::string& text : overrides) {
    const size_t equals = text.find('=');
    if (equals == std::string::npos || text.compare(0, equals, key) != 0 || equals != key.size()) continue;
    try {
      const std::string given = text.substr(equals + 1);
      const YAML::Node node = YAML::Load(given.substr(0, given.find_last_not_of(" \t\r\n") + 1));  // as apply_override
      value = node.IsScalar() ? node.as<std::string>() : otherwise;
    } catch (const YAML::Exception&) {
      value = otherwise;  // load_config names the malformed value
    }
  }
  return value;
}

Config load_config(const std::string& path_or_preset, const std::vector<std::string>& overrides) {
  // "preset:NAME" is the embedded preset whatever files are about: the
  // commands' default (a file named "tiny" in the working directory used to
  // take its place without a word), and what the result's origin says.
  constexpr std::string_view kPresetPrefix = "preset:";
  if (path_or_preset.starts_with(kPresetPrefix)) {
    const std::string name = path_or_preset.substr(kPresetPrefix.size());
    if (const EmbeddedPreset* preset = preset_named(name))
      return parse_config(std::string(preset->yaml), path_or_preset, overrides);
    fail("no embedded preset " + name + " (" + preset_list() + ")");
  }
  std::error_code error;
  if (std::filesystem::exists(path_or_preset, error)) {
    if (std::filesystem::is_directory(path_or_preset, error))
      fail("config file " + path_or_preset + " is a directory");
    // Stat before open: a FIFO would block the open, a device (/dev/zero,
    // /dev/urandom) would be read without end.
    if (!std::filesystem::is_regular_file(path_or_preset, error))
      fail("config file " + path_or_preset + " is not a regular file");
    const uintmax_t size = std::filesystem::file_size(path_or_preset, error);
    if (!error && size > kMaxConfigBytes)
      fail("config file " + path_or_preset + " is " + std::to_string(size) + " bytes; a config is at most " +
           std::to_string(kMaxConfigBytes) + " (16 MiB)");
    std::ifstream file(path_or_preset, std::ios::binary);
    std::string text;
    try {
      text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {  // libstdc++'s filebuf throws on a read error (/proc/self/mem: EIO)
      fail("cannot read config file " + path_or_preset + ": " + std::strerror(errno));
    }
    if (!file && !file.eof())
      fail("cannot read config file " + path_or_preset + ": " + std::strerror(errno));
    return parse_config(text, path_or_preset, overrides);
  }
  // A file that is there but cannot be reached (a folder without search
  // permission) or a link to nothing was "not found", and configs/tiny.yaml
  // of that kind ran the embedded preset tiny in its place.
  if (error) fail("cannot reach config file " + path_or_preset + ": " + error.message());
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path_or_preset, error)))
    fail("config file " + path_or_preset + " is a link to " +
         std::filesystem::read_symlink(path_or_preset, error).string() + ", which does not exist");
  if (const EmbeddedPreset* preset = find_preset(path_or_preset))
    return parse_config(std::string(preset->yaml), "preset:" + std::string(preset->name), overrides);
  // `--set a=1 b=2`: the second pair was taken for CONFIG.
  const size_t equals = path_or_preset.find('=');
  const bool looks_like_a_setting = equals != std::string::npos && path_or_preset.find('/') > equals &&
                                    path_or_preset.find('.') < equals;
  fail("config file not found: " + path_or_preset + " (embedded presets: " + preset_list() + ")" +
       (looks_like_a_setting ? "; each KEY=VALUE needs a --set of its own: --set " + path_or_preset : ""));
}

void validate_config(const Config& config) { validate(config, Sources{}); }

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const EmbeddedPreset& preset : embedded_presets()) names.emplace_back(preset.name);
  return names;
}

bool is_preset(const std::string& name) {
  for (const EmbeddedPreset& preset : embedded_presets())
    if (preset.name == name) return true;
  return false;
}

std::string integer_in_range(const std::string& text, int64_t low, int64_t high) {
  bool out_of_range = false;
  const std::optional<int64_t> value = parse_number<int64_t>(text, &out_of_range);
  const std::string range = "between " + std::to_string(low) + " and " + std::to_string(high);
  if (value && *value >= low && *value <= high) return "";
  return "must be an integer " + range + " (got '" + excerpt(text) + "')";
}

std::string decimal_integer_text(const std::string& text) {
  bool out_of_range = false;
  const std::optional<int64_t> value = parse_number<int64_t>(text, &out_of_range);
  return value ? std::to_string(*value) : text;
}

std::optional<double> decimal_number(std::string_view text, bool* out_of_range) {
  return parse_number<double>(text, out_of_range);  // no nan, no inf
}

std::string number_in_range(const std::string& text, double low, double high) {
  bool out_of_range = false;
  const std::optional<double> value = decimal_number(text, &out_of_range);
  if (value && *value >= low && *value <= high) return "";
  return "must be a number between " + format_double(low) + " and " + format_double(high) + " (got '" +
         excerpt(text) + "')";
}

std::string expand_home(std::string* path) {
  if (!path->starts_with("~/")) return "";
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0')
    return excerpt(*path) + " starts in the home folder, but $HOME is not set: write the whole path";
  *path = std::string(home) + path->substr(1);
  return "";
}

std::string byte_size_in_range(const std::string& text, int64_t low, int64_t high, int64_t* bytes) {
  const std::string expected = "expected bytes as an integer with an optional suffix K, M, G, T (powers of 1024) or "
                               "KB, MB, GB, TB (powers of 1000) (got '" + excerpt(text) + "')";
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return expected;
  std::string suffix = text.substr(digits);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned __int128 multiplier = 1;
  if (!suffix.empty() && suffix != "B") {
    const size_t power = std::string("KMGT").find(suffix[0]);
    const std::string rest = suffix.substr(1);
    const bool binary = rest.empty() || rest == "IB";
    if (power == std::string::npos || (!binary && rest != "B")) return expected;
    for (size_t p = 0; p <= power; ++p) multiplier *= binary ? 1024 : 1000;
  }
  // Exact, in 128 bits: a value past any int64 is out of range (said as
  // such: it is an integer), not "expected an integer", and a large one is
  // not rounded through a double.
  unsigned __int128 value = 0;
  bool huge = false;
  for (size_t i = 0; i < digits && !huge; ++i) {
    value = value * 10 + static_cast<unsigned>(text[i] - '0');
    huge = value > static_cast<unsigned __int128>(INT64_MAX);
  }
  if (!huge) value *= multiplier;
  if (huge || value < static_cast<unsigned __int128>(std::max<int64_t>(low, 0)) ||
      value > static_cast<unsigned __int128>(std::max<int64_t>(high, 0)))
    return "must be between " + std::to_string(low) + " and " + std::to_string(high) + " bytes (got '" +
           excerpt(text) + "')";
  *bytes = static_cast<int64_t>(value);
  return "";
}

std::string precision_of_auto_on(const std::string& engine) {
  return engine == "cuda" ? "bf16" : engine == "cpu" ? "fp32" : "";
}

nlohmann::json config_to_json(const Config& config) {
  nlohmann::json json = nlohmann::json::object();
  for (const KeySpec& spec : key_table()) {
    const std::string section(section_of(spec.name));
    const std::string key(spec.name.substr(section.size() + 1));
    std::visit(
        [&](const auto* value) {
          if constexpr (std::is_same_v<std::decay_t<decltype(*value)>, std::string>)
            json[section][key] = utf8_escaped(*value);  // a path is bytes; JSON text is UTF-8
          else
            json[section][key] = *value;
        },
        field_of(config, spec));
  }
  return json;
}

namespace {

// A config as two runs' state compares it: the same adapters however the
// targets are written ("q, k,v" and "v,q,k" build the adapters of "q,k,v":
// the engine takes them in layer order), and without model.n_layers_full,
// the depth `project` projects to, which builds nothing; data.eos_token
// resolved.
nlohmann::json as_state_sees_it(const nlohmann::json& config) {
  if (!config.is_object()) return config;
  nlohmann::json seen = config;
  if (seen.contains("model") && seen["model"].is_object()) seen["model"].erase("n_layers_full");
  // data.eos_token -1 is model.vocab - 1: the same separator either way.
  const nlohmann::json vocab = json_entry(seen, "model", "vocab");
  if (json_entry(seen, "data", "eos_token") == -1 && vocab.is_number_integer())
    seen["data"]["eos_token"] = vocab.get<int64_t>() - 1;
  if (const nlohmann::json targets = json_entry(seen, "lora", "targets"); targets.is_string()) {
    // A name no engine knows stays as written: an old or foreign manifest differs, named.
    std::vector<ParamKind> kinds;
    if (lora_targets_in_layer_order(targets.get<std::string>(), &kinds)) {
      std::vector<std::string_view> names;
      for (const ParamKind kind : kinds) names.push_back(lora_target_name(kind));
      seen["lora"]["targets"] = join(names, ",");
    }
  }
  return seen;
}

}  // namespace

nlohmann::json json_entry(const nlohmann::json& object, const char* section, const char* key) {
  if (!object.is_object() || !object.contains(section)) return nullptr;
  const nlohmann::json& part = object.at(section);
  if (*key == '\0') return part;
  return part.is_object() ? part.value(key, nlohmann::json()) : nlohmann::json();
}

ConfigDifference first_config_difference(const nlohmann::json& first_as_written,
                                         const nlohmann::json& second_as_written,
                                         const std::vector<std::array<const char*, 2>>& keys) {
  const nlohmann::json first = as_state_sees_it(first_as_written);
  const nlohmann::json second = as_state_sees_it(second_as_written);
  for (const auto& [section, name] : keys) {
    const nlohmann::json a = json_entry(first, section, name), b = json_entry(second, section, name);
    if (a == b) continue;
    ConfigDifference difference{std::string(section) + (*name == '\0' ? "" : std::string(".") + name), a, b};
    if (*name == '\0' && a.is_object() && b.is_object())
      for (const auto& [key, value] : b.items())
        if (a.value(key, nlohmann::json()) != value) {
          difference = {difference.key + "." + key, a.value(key, nlohmann::json()), value};
          break;
        }
    return difference;
  }
  return {};
}

std::vector<std::string> config_to_lines(const Config& config) {
  std::vector<std::string> lines;
  for (const KeySpec& spec : key_table())
    lines.push_back(std::string(spec.name) + ": " + format_value(field_of(config, spec)));
  return lines;
}

std::vector<std::string> injected_faults(const Config& config) {
  std::vector<std::string> set;
  for (const auto& [section, key] : kInjectedFaultKeys) {
    const std::string name = std::string(section) + "." + key;
    const std::string value = format_value(field_of(config, *find_key(name)));
    if (value != "0") set.push_back(name + "=" + value);
  }
  return set;
}

}  // namespace trainbench
