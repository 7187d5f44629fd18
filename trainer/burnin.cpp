#include "trainer/burnin.h"

#include <algorithm>  // std::count, std::adjacent_find
#include <array>      // the config keys a baseline shares with the job
#include <charconv>   // std::from_chars: strict number parsing
#include <cmath>      // std::isfinite
#include <cctype>     // std::isalpha, std::tolower: --duration's units
#include <cstddef>    // std::ptrdiff_t
#include <cstdio>     // std::snprintf: the golden values in hex
#include <cstring>    // std::memcpy of float bits
#include <functional> // std::not_equal_to: ranks that compute alike
#include <stdexcept>
#include <string_view>
#include <utility>  // std::pair: the units

#include "trainer/config.h"      // excerpt: values in messages
#include "trainer/json_text.h"   // json_text: values in messages
#include "trainer/report.h"      // human_count
#include "trainer/results.h"     // read_json_input, not_a_training_result: the baseline
#include "trainer/statistics.h"  // median
#include "trainer/train_loop.h"  // checksum_bytes

namespace trainbench {

double parse_duration(const std::string& text) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("--duration " + excerpt(text) + ": " + why);
  };
  const std::string expected =
      "expected a time > 0: seconds, or numbers each with a unit d, h, m, s or ms (e.g. 90s, 30m, 2h, 1h30m)";
  // Units as fio and GNU timeout write them, in either case; a bare
  // number is seconds when it stands alone ("1h30" is refused, not read
  // as 1h30s).
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"ms", 1e-3}, {"s", 1}, {"sec", 1}, {"m", 60}, {"min", 60}, {"h", 3600}, {"hr", 3600}, {"d", 86400}};
  std::string_view rest(text);
  if (!rest.empty() && rest.front() == '+') rest.remove_prefix(1);  // as the config's numbers take it
  if (rest.empty()) refuse(expected);
  double seconds = 0;
  for (bool first = true; !rest.empty(); first = false) {
    double value = 0;
    const auto [after, error] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    if (error == std::errc::result_out_of_range) refuse("at most 8760h (a year)");
    if (error != std::errc() || after == rest.data() || !std::isfinite(value) || value < 0) refuse(expected);
    size_t end = static_cast<size_t>(after - rest.data());
    std::string unit;
    for (; end < rest.size() && std::isalpha(static_cast<unsigned char>(rest[end])); ++end)
      unit += static_cast<char>(std::tolower(static_cast<unsigned char>(rest[end])));
    double scale = 0;
    if (unit.empty() && first && end == rest.size()) scale = 1;
    for (const auto& [name, factor] : kUnits)
      if (unit == name) scale = factor;
    if (scale == 0) refuse(expected);
    seconds += value * scale;
    rest.remove_prefix(end);
  }
  if (!(seconds > 0)) refuse(expected);
  // 1e308h is finite until it is multiplied into seconds; a year bounds it.
  constexpr double kLongest = 365.0 * 24 * 3600;
  if (!(seconds <= kLongest)) refuse("at most 8760h (a year)");
  // 1e-9s ended before its first check and failed the node (exit 4): a
  // verdict needs at least a second of training.
  if (seconds < 1) refuse("at least 1s (a burn-in that ends before its first step has nothing to judge)");
  return seconds;
}

GoldenValue compute_golden_step(TrainingEngine& engine, uint64_t seed, bool flip_bit, const float* golden_weights) {
  const ParameterLayout& layout = engine.layout();
  std::vector<float> saved(static_cast<size_t>(layout.total_params()));
  engine.get_parameters(saved.data());
  if (golden_weights != nullptr) engine.set_parameters(golden_weights);
  else engine.init_parameters(seed);
  // A fixed batch: the same tokens on every rank and at every check.
  const int64_t tokens = engine.micro_batch() * engine.shape().seq_len;
  std::vector<int32_t> ids(static_cast<size_t>(tokens + 1));
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (int32_t& id : ids) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    id = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(engine.shape().vocab));
  }
  const TokenBatch batch{ids.data(), ids.data() + 1, engine.micro_batch(), engine.shape().seq_len};
  engine.zero_gradients();
  engine.forward(batch);
  const float loss = engine.last_loss();
  engine.backward(batch, 1.0f, nullptr);
  engine.synchronize();
  // The lowest mantissa bit of the first gradient: the smallest error there
  // is, which only a bit-for-bit comparison sees. In the engine's own buffer
  // where it is host memory, else in the copy read back.
  if (flip_bit && engine.host_gradient_buffer() != nullptr) {
    uint32_t bits = 0;
    std::memcpy(&bits, engine.host_gradient_buffer(), sizeof(bits));
    bits ^= 1u;
    std::memcpy(engine.host_gradient_buffer(), &bits, sizeof(bits));
  }
  std::vector<float> gradients(static_cast<size_t>(layout.trainable_params()));
  engine.get_gradients(gradients.data());
  if (flip_bit && engine.host_gradient_buffer() == nullptr && !gradients.empty()) {
    uint32_t bits = 0;
    std::memcpy(&bits, gradients.data(), sizeof(bits));
    bits ^= 1u;
    std::memcpy(gradients.data(), &bits, sizeof(bits));
  }
  GoldenValue value;
  std::memcpy(&value.loss_bits, &loss, sizeof(value.loss_bits));
  value.gradient_checksum = checksum_bytes(gradients.data(), gradients.size() * sizeof(float));
  // Training resumes exactly where it was: the next step zeroes the
  // gradients first anyway, and the optimizer state was never touched.
  engine.zero_gradients();
  engine.set_parameters(saved.data());
  // Its compute is not a training step's: taken off the engine's clocks
  // (it runs between steps, after the last one took its own), so that the
  // next step shows it in other_s, as a check between steps, and not in
  // compute_s, where it exceeded that step's step_s on 2 ranks and failed
  // step_time_accounted.
  (void)engine.take_compute_seconds();
  (void)engine.take_op_times();
  return value;
}

std::optional<GoldenValue> majority_value(const std::vector<GoldenValue>& values) {
  for (const GoldenValue& candidate : values)
    if (2 * static_cast<size_t>(std::count(values.begin(), values.end(), candidate)) > values.size()) return candidate;
  return std::nullopt;
}

std::string describe_golden_difference(const GoldenValue& found, const GoldenValue& expected) {
  char text[160];
  std::snprintf(text, sizeof(text), "loss bits %08x vs %08x, gradient checksum %016llx vs %016llx", found.loss_bits,
                expected.loss_bits, static_cast<unsigned long long>(found.gradient_checksum),
                static_cast<unsigned long long>(expected.gradient_checksum));
  return text;
}

GoldenStart judge_golden_start(const std::vector<GoldenValue>& values, const std::vector<std::string>& numerics) {
  const size_t world = values.size();
  const bool mixed = std::adjacent_find(numerics.begin(), numerics.end(), std::not_equal_to<>()) != numerics.end();
  GoldenStart start;
  start.failures.assign(world, {});
  for (size_t r = 0; r < world; ++r) {
    std::vector<size_t> alike;
    std::vector<GoldenValue> alike_values;
    for (size_t q = 0; q < world; ++q)
      if (numerics[q] == numerics[r]) {
        alike.push_back(q);
        alike_values.push_back(values[q]);
      }
    start.compared.push_back(alike.size() > 1);
    const std::string others = mixed ? "the other ranks' on " + numerics[r] : "the other ranks'";
    const std::optional<GoldenValue> majority = majority_value(alike_values);
    start.reference.push_back(majority ? *majority : values[r]);
    if (majority && !(values[r] == *majority))
      start.failures[r].push_back("golden step at the start differs from " + others + " (" +
                                  describe_golden_difference(values[r], *majority) + "): silent data corruption");
    if (!majority) {
      // Named against a rank whose value is another (rank 0 against itself read "X vs X").
      size_t other = r;
      for (const size_t q : alike)
        if (!(values[q] == values[r])) {
          other = q;
          break;
        }
      const std::string ranks = mixed ? "the ranks on " + numerics[r] : std::string("the ranks");
      start.failures[r].push_back("golden step at the start: " + ranks + " disagree and no value has a majority (" +
                                  describe_golden_difference(values[r], values[other]) + " against rank " +
                                  std::to_string(other) + ")");
    }
  }
  return start;
}

bool Verdict::passed() const {
  if (!job.passed) return false;
  for (const VerdictRow& row : gpus)
    if (!row.passed) return false;
  for (const VerdictRow& row : nodes)
    if (!row.passed) return false;
  return true;
}

namespace {
std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%+.0f%%", 100.0 * fraction);
  return text;
}
std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f ms", 1e3 * seconds);
  return text;
}
std::string figure(double value, const std::string& unit) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text + (unit.empty() ? "" : " " + unit);
}

// Whether a change of `fraction` (0.1 is 10 %) is beyond `pct` percent, as
// the thresholds are documented ("more than", "beyond"). A change of exactly
// pct is not: 0.18 / 0.2 - 1 is -0.10000000000000009 in binary, and a drop
// from 0.2 to 0.18 GB/s failed "(-10%, burnin.degrade_pct 10)" where one
// from 5 to 4.5 passed. The slack is far below any figure's own precision.
bool beyond_pct(double fraction, double pct) { return 100.0 * fraction > pct * (1.0 + 1e-9); }
}  // namespace

std::string straggler_finding(const std::vector<double>& own_step_s, size_t rank, double straggler_pct) {
  if (own_step_s.size() < 2 || rank >= own_step_s.size()) return "";
  std::vector<double> others;
  for (size_t r = 0; r < own_step_s.size(); ++r)
    if (r != rank) others.push_back(own_step_s[r]);
  const double typical = median(others);
  if (typical <= 0) return "";
  const double excess = own_step_s[rank] / typical - 1.0;
  if (!beyond_pct(excess, straggler_pct)) return "";
  return "straggler: own step time " + milliseconds(own_step_s[rank]) + " is " + percent(excess) +
         " against the other ranks' median " + milliseconds(typical) + " (burnin.straggler_pct " +
         figure(straggler_pct, "") + ")";
}

Drift measure_drift(const std::vector<double>& step_s, double tokens_per_step) {
  Drift drift;
  if (step_s.size() < kDriftMinSteps) return drift;
  const size_t tenth = step_s.size() / 10;
  std::vector<double> first_tenth, last_tenth;
  for (size_t i = 0; i < tenth; ++i) {
    first_tenth.push_back(step_s[i]);
    last_tenth.push_back(step_s[step_s.size() - tenth + i]);
  }
  const double first = median(std::move(first_tenth));
  const double last = median(std::move(last_tenth));
  if (first <= 0 || last <= 0) return drift;
  drift.judged = true;
  drift.first_tokens_per_s = tokens_per_step / first;
  drift.last_tokens_per_s = tokens_per_step / last;
  drift.change = drift.last_tokens_per_s / drift.first_tokens_per_s - 1.0;
  return drift;
}

JudgedEnds judged_ends(const std::vector<double>& measured) {
  JudgedEnds ends;
  ends.count = measured.size();
  if (measured.empty()) return ends;
  if (measured.size() < 2 * kEndsOfMedians) {
    ends.start = measured.front();
    ends.end = measured.back();
    return ends;
  }
  const auto k = static_cast<std::ptrdiff_t>(kEndsOfMedians);
  ends.start = median(std::vector<double>(measured.begin(), measured.begin() + k));
  ends.end = median(std::vector<double>(measured.end() - k, measured.end()));
  ends.medians = true;
  return ends;
}

std::string JudgedEnds::start_words() const {
  return medians ? "over the first " + std::to_string(kEndsOfMedians) + " measurements (median)" : "at the start";
}

std::string JudgedEnds::end_words() const {
  return medians ? "over the last " + std::to_string(kEndsOfMedians) + " (median)" : "at the last measurement";
}

std::string JudgedEnds::finding_words() const {
  return medians ? ", medians of the first and the last " + std::to_string(kEndsOfMedians) + " measurements" : "";
}

std::string degradation_finding(const std::string& what, double start, double now, double degrade_pct,
                                const std::string& unit) {
  if (start <= 0 || now <= 0) return "";
  const double change = now / start - 1.0;
  if (!beyond_pct(-change, degrade_pct)) return "";
  return what + " fell from " + figure(start, unit) + " to " + figure(now, unit) + " (" + percent(change) +
         ", burnin.degrade_pct " + figure(degrade_pct, "") + ")";
}

namespace {
// A figure of the baseline at JSON pointer `at`: 0 where absent. A figure
// that is there must be one: a negative, null or text value was taken as
// "not measured" and the verdict said the job met the baseline. Null is
// "not measured" where the burn-in writes it so (a one-rank job has no
// fabric, a job without checkpoints no storage figure): not compared.
double baseline_figure(const nlohmann::json& j, const std::string& path, const char* at,
                       bool null_is_unmeasured = false) {
  const nlohmann::json::json_pointer pointer(at);
  if (!j.contains(pointer)) return 0.0;
  const nlohmann::json& value = j.at(pointer);
  if (value.is_null() && null_is_unmeasured) return 0.0;
  if (value.is_number() && value.get<double>() > 0 && std::isfinite(value.get<double>())) return value.get<double>();
  std::string field = at + 1;  // the pointer as a dotted field name
  std::replace(field.begin(), field.end(), '/', '.');
  throw std::invalid_argument("--baseline " + path + ": " + field + " is " + json_text(value) +
                              (value.is_null() ? " (not measured in that run)" : "") +
                              ", expected a positive number");
}

// The baseline's section `key` of `parent`, an object where there is one
// (empty where absent): value() on a number threw, and an edited
// "environment": 5 ended the burn-in as an internal error (exit 1); a
// "train": 5 was read as train.micro_batch = 5.
nlohmann::json baseline_section(const nlohmann::json& parent, const char* key, const std::string& named,
                                const std::string& path) {
  if (!parent.contains(key) || parent[key].is_null()) return nlohmann::json::object();
  if (!parent[key].is_object())
    throw std::invalid_argument("--baseline " + path + ": " + named + " is " + excerpt(json_text(parent[key])) +
                                ", expected an object (a trainbench run or burnin result is expected)");
  return parent[key];
}

// Only a known-good training job's figures are a yardstick.
void check_baseline_is_known_good(const nlohmann::json& j, const std::string& path) {
  // Another schema's, or `bench compute`'s and `bench instrument`'s, from a
  // job of two steps on resident data without checkpoints, whose tokens/s no
  // run reaches (a healthy burn-in failed against one, a slow one could pass).
  if (const std::string other = not_a_training_result(j); !other.empty())
    throw std::invalid_argument("--baseline " + path + ": " + other + ": its tokens/s is not a training job's");
  // The figures of a job that failed a check, or a burn-in that failed, are
  // no yardstick (a straggler's burn-in as the baseline passed the next slow
  // cluster). Not step_time_accounted: a fault of trainbench's own
  // accounting, the job's tokens/s as good.
  if (j.contains("checks") && j["checks"].is_array())
    for (const nlohmann::json& check : j["checks"])
      if (check.is_object() && check.value("passed", nlohmann::json()) == false &&
          check.value("name", nlohmann::json()) != "step_time_accounted")
        throw std::invalid_argument(
            "--baseline " + path + ": its check " +
            excerpt(check.value("name", nlohmann::json()).is_string() ? check["name"].get<std::string>() : "?") +
            " failed: a baseline must be a known-good result");
  if (j.contains("burnin") && j["burnin"].is_object() && j["burnin"].contains("verdict") &&
      j["burnin"]["verdict"] != "PASS")
    throw std::invalid_argument("--baseline " + path + ": its burn-in verdict is " +
                                excerpt(json_text(j["burnin"]["verdict"])) + ": a baseline must be a known-good result");
}

// The baseline's config, its sections checked to be objects. A job slowed on
// purpose is no yardstick: with a fault injected, a cluster as slow passed.
void check_baseline_config(const nlohmann::json& config, const std::string& path) {
  if (!config.is_object()) return;
  for (const char* key : {"model", "train", "lora"})
    (void)baseline_section(config, key, std::string("config.") + key, path);
  for (const auto& [name, key] : kInjectedFaultKeys) {
    const nlohmann::json part = baseline_section(config, name, std::string("config.") + name, path);
    const nlohmann::json value = part.value(key, nlohmann::json());
    if (value.is_number() && value.get<double>() != 0)
      throw std::invalid_argument("--baseline " + path + ": it ran with the fault injection " + name + "." + key +
                                  " = " + json_text(value) + ": a baseline must be a known-good result");
  }
}

// What the baseline ran on, from its environment: the comparisons' caveats.
void read_baseline_environment(const nlohmann::json& environment, BaselineFigures& known) {
  const nlohmann::json ranks = environment.value("ranks", nlohmann::json());
  known.ranks = ranks.is_number_integer() ? ranks.get<int64_t>() : 0;
  const nlohmann::json backend = environment.value("compute_backend", nlohmann::json());
  known.compute_backend = backend.is_string() ? backend.get<std::string>() : "";
  const nlohmann::json attention = environment.value("attention", nlohmann::json());
  if (attention.is_object() && attention.value("kernel", nlohmann::json()).is_string())
    known.attention_kernel = attention["kernel"].get<std::string>();
  // environment.hosts lists every host only in results that have host_gpus
  // too (before, rank 0's alone: an older multi-node baseline read as 1 host).
  const nlohmann::json hosts = environment.value("hosts", nlohmann::json());
  const nlohmann::json host_gpus = environment.value("host_gpus", nlohmann::json());
  known.hosts = hosts.is_array() && host_gpus.is_array() ? static_cast<int64_t>(hosts.size()) : 0;
  if (host_gpus.is_array() && !host_gpus.empty() && host_gpus[0].is_object() &&
      host_gpus[0].value("gpu_name", nlohmann::json()).is_string())
    known.gpu_name = host_gpus[0]["gpu_name"].get<std::string>();
  const nlohmann::json cpu = environment.value("cpu", nlohmann::json());
  if (cpu.is_object() && cpu.value("model", nlohmann::json()).is_string()) known.cpu_model = cpu["model"].get<std::string>();
}
}  // namespace

BaselineFigures read_baseline(const std::string& path) {
  const nlohmann::json j = read_json_input("--baseline", path, "a trainbench run or burnin result JSON");
  if (!j.is_object()) throw std::invalid_argument("--baseline " + path + ": not a JSON result file");
  check_baseline_is_known_good(j, path);
  BaselineFigures known;
  // The tokens/s a baseline is for must be there.
  known.tokens_per_s = baseline_figure(j, path, "/summary/tokens_per_s");
  known.busbw_gbs = baseline_figure(j, path, "/burnin/fabric/busbw_gbs", true);
  known.write_gbs = baseline_figure(j, path, "/burnin/storage/write_gbs", true);
  const nlohmann::json environment = baseline_section(j, "environment", "environment", path);
  // Absent (a file that does not say) is not compared; another type is an
  // edited file: "config": 5 passed any job's burn-in.
  if (j.contains("config") && !j["config"].is_null()) known.config = baseline_section(j, "config", "config", path);
  check_baseline_config(known.config, path);
  read_baseline_environment(environment, known);
  known.path = path;
  if (known.tokens_per_s <= 0 && known.busbw_gbs <= 0 && known.write_gbs <= 0)
    throw std::invalid_argument("--baseline " + path +
                                ": holds none of summary.tokens_per_s, burnin.fabric.busbw_gbs, "
                                "burnin.storage.write_gbs (a trainbench run or burnin result is expected)");
  return known;
}

std::string baseline_ranks_difference(const BaselineFigures& known, int64_t ranks) {
  if (known.ranks <= 0 || known.ranks == ranks) return "";
  return "measured on " + std::to_string(known.ranks) + " rank(s) and this job has " + std::to_string(ranks) +
         ": its tokens/s and busbw are not this job's";
}

std::string baseline_job_difference(const BaselineFigures& known, const Config& config, int ranks,
                                    const std::string& engine) {
  if (std::string other = baseline_ranks_difference(known, ranks); !other.empty()) return other;
  // A GPU's tokens/s is hundreds of times a CPU's: a baseline from the other
  // engine made every GPU "pass" (or every CPU job fail) whatever it did.
  if (!known.compute_backend.empty() && !engine.empty() && known.compute_backend != engine)
    return "measured on the " + known.compute_backend + " engine and this job runs on the " + engine +
           " engine (train.device " + config.train.device + "): its tokens/s is not this job's";
  if (!known.config.is_object()) return "";
  // The burn-in trains deterministically whatever the config says; on the
  // cuda engine a run with train.deterministic false (the H200 presets) is
  // faster (cuDNN's fastest attention backward, GEMM algorithms timed per
  // shape), and a healthy cluster fell short of it. No effect on the cpu engine.
  // A section that is not an object (an edited file's "train": null) is
  // named below by first_config_difference, exit 2, not an internal error.
  const nlohmann::json known_train = known.config.contains("train") && known.config["train"].is_object()
                                         ? known.config["train"]
                                         : nlohmann::json::object();
  const nlohmann::json deterministic = known_train.value("deterministic", nlohmann::json());
  if (engine == "cuda" && deterministic.is_boolean() && !deterministic.get<bool>())
    return "it trained with train.deterministic = false (cuDNN's fastest attention backward) and the burn-in "
           "trains deterministically: its tokens/s is not this job's (give a run with --set "
           "train.deterministic=true, or a burn-in result)";
  // The job's shape, and what sets how fast the same shape runs: the
  // gradient sync (ZeRO-1, overlap, buckets: the fabric check all-reduces
  // one bucket), the data's source, the checkpoint cadence, the host threads
  // on the cpu engine, and how checkpoints are written where this job takes
  // them (the step's stall, write GB/s). A baseline without checkpoints, or
  // with ZeRO-1, passed a slower job. ZeRO-1's step (two ranks on) is not
  // overlapped whatever comm.overlap says: a baseline differing there alone
  // was refused.
  std::vector<std::array<const char*, 2>> keys = {
      {"model", ""},    {"train", "micro_batch"}, {"train", "grad_accum"}, {"train", "mode"},
      {"comm", "zero"}, {"comm", "bucket_mb"},    {"data", "source"},      {"checkpoint", "every_steps"}};
  if (config.comm.zero != 1 || ranks < 2) keys.push_back({"comm", "overlap"});
  if (engine == "cpu") keys.push_back({"train", "threads"});
  if (config.checkpoint.every_steps > 0)
    for (const char* key : {"async", "when_busy", "direct_io", "writers", "block_bytes"})
      keys.push_back({"checkpoint", key});
  if (config.train.mode == "lora") keys.push_back({"lora", ""});
  const ConfigDifference differs = first_config_difference(known.config, config_to_json(config), keys);
  if (differs.key.empty()) {
    // Precision: what each engine trains in, auto resolved where it can be.
    const nlohmann::json& train = known_train;
    std::string then = train.value("precision", nlohmann::json()).is_string() ? train["precision"].get<std::string>() : "";
    if (then == "auto") then = precision_of_auto_on(known.compute_backend);
    const std::string now =
        config.train.precision == "auto" ? precision_of_auto_on(engine) : config.train.precision;
    if (then.empty() || now.empty() || then == now) return "";
    return "it trained in " + then + " and this job trains in " + now + " (train.precision " +
           config.train.precision + ", train.device " + config.train.device + ")" +
           ": its tokens/s is not this job's (give a baseline of the same precision)";
  }
  return "it has " + differs.key + " = " + json_text(differs.first) +
         " and this job has " + json_text(differs.second) +
         ": its tokens/s is not this job's (give a baseline of the same model, batch, threads, comm and "
         "checkpoint settings)";
}

std::string baseline_attention_difference(const BaselineFigures& known, const std::string& kernel,
                                          const std::string& detail) {
  if (known.attention_kernel.empty() || kernel.empty() || known.attention_kernel == kernel) return "";
  return "it ran the " + known.attention_kernel + " attention and this job runs the " + kernel + " attention (" +
         detail + "): its tokens/s is not this job's (give a baseline that ran the same attention: the same "
                  "train.attention, built with cuDNN or without it as this job is)";
}

std::string baseline_hardware_difference(const BaselineFigures& known, int64_t hosts, const std::string& gpu_name,
                                         const std::string& cpu_model, const std::string& engine) {
  const std::string not_this = ": its figures are not this hardware's (give a baseline measured on nodes like these)";
  if (known.hosts > 0 && hosts > 0 && known.hosts != hosts)
    return "measured on " + std::to_string(known.hosts) + " host(s) and this job runs on " + std::to_string(hosts) +
           not_this;
  if (engine == "cuda" && !known.gpu_name.empty() && !gpu_name.empty() && known.gpu_name != gpu_name)
    return "measured on " + known.gpu_name + " and this job runs on " + gpu_name + not_this;
  if (engine == "cpu" && !known.cpu_model.empty() && !cpu_model.empty() && known.cpu_model != cpu_model)
    return "measured on the CPU " + known.cpu_model + " and this job runs on " + cpu_model + not_this;
  return "";
}

std::vector<std::string> compare_with_baseline(const BaselineFigures& now, const BaselineFigures& known,
                                               double tolerance_pct) {
  std::vector<std::string> below;
  const auto compare = [&](const char* what, double measured, double baseline, const char* unit) {
    if (measured <= 0 || baseline <= 0) return;
    const double change = measured / baseline - 1.0;
    if (!beyond_pct(-change, tolerance_pct)) return;
    below.push_back(std::string(what) + " " + figure(measured, unit) + " is below the baseline's " +
                    figure(baseline, unit) + " (" + percent(change) + ", burnin.baseline_tolerance_pct " +
                    figure(tolerance_pct, "") + ")");
  };
  compare("tokens/s", now.tokens_per_s, known.tokens_per_s, "");
  compare("busbw", now.busbw_gbs, known.busbw_gbs, "GB/s");
  compare("checkpoint write", now.write_gbs, known.write_gbs, "GB/s");
  return below;
}

nlohmann::json verdict_to_json(const Verdict& verdict) {
  const auto row_json = [](const VerdictRow& row) {
    nlohmann::json j = {{"name", row.name},         {"verdict", row.passed ? "PASS" : "FAIL"},
                        {"failures", row.failures}, {"notes", row.notes},
                        {"figures", row.figures}};
    if (!row.host.empty()) j["host"] = row.host;
    return j;
  };
  nlohmann::json gpus = nlohmann::json::array(), nodes = nlohmann::json::array();
  for (const VerdictRow& row : verdict.gpus) gpus.push_back(row_json(row));
  for (const VerdictRow& row : verdict.nodes) nodes.push_back(row_json(row));
  return {{"verdict", verdict.passed() ? "PASS" : "FAIL"}, {"gpus", gpus}, {"nodes", nodes}, {"job", row_json(verdict.job)}};
}

std::string verdict_table(const Verdict& verdict) {
  size_t name_width = 4, host_width = 4;
  const auto widen = [&](const VerdictRow& row) {
    name_width = std::max(name_width, row.name.size());
    host_width = std::max(host_width, row.host.size());
  };
  for (const VerdictRow& row : verdict.gpus) widen(row);
  for (const VerdictRow& row : verdict.nodes) widen(row);
  widen(verdict.job);
  std::string table;
  const auto line = [&](const std::string& name, const std::string& host, const std::string& result,
                        const std::string& why) {
    // Padded by hand: a fixed buffer cut a long host name (a cluster's FQDN)
    // and the PASS/FAIL after it.
    const auto padded = [](const std::string& text, size_t width) {
      return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
    };
    table += "  " + padded(name, name_width) + "  " + padded(host, host_width) + "  " + padded(result, 4) + "  " +
             why + "\n";
  };
  int failed_gpus = 0, failed_nodes = 0;
  for (const VerdictRow& row : verdict.gpus) failed_gpus += row.passed ? 0 : 1;
  for (const VerdictRow& row : verdict.nodes) failed_nodes += row.passed ? 0 : 1;
  table += std::string("burn-in verdict: ") + (verdict.passed() ? "PASS" : "FAIL") + " (" +
           std::to_string(verdict.gpus.size() - failed_gpus) + "/" + std::to_string(verdict.gpus.size()) +
           " GPUs, " + std::to_string(verdict.nodes.size() - failed_nodes) + "/" +
           std::to_string(verdict.nodes.size()) + " nodes, job " + (verdict.job.passed ? "PASS" : "FAIL") + ")\n";
  line("what", "host", "", "why (failures first, then what was measured)");
  const auto rows = [&](const VerdictRow& row) {
    std::vector<std::string> lines = row.failures;
    lines.insert(lines.end(), row.notes.begin(), row.notes.end());
    if (lines.empty()) lines.push_back("");
    line(row.name, row.host, row.passed ? "PASS" : "FAIL", lines.front());
    for (size_t i = 1; i < lines.size(); ++i) line("", "", "", lines[i]);
  };
  for (const VerdictRow& row : verdict.gpus) rows(row);
  for (const VerdictRow& row : verdict.nodes) rows(row);
  rows(verdict.job);
  return table;
}

}  // namespace trainbench
