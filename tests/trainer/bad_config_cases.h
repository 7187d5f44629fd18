// Bad configurations, shared by test_config (through load_config) and
// test_cli_errors (through the trainbench binary): each must be refused with
// one line that contains every string in `expected`.
#pragma once

#include <string>
#include <utility>  // std::pair
#include <vector>

namespace trainbench::config_cases {

struct BadConfigCase {
  std::string name;                    // GoogleTest parameter name
  std::string yaml;                    // the config file's text
  std::vector<std::string> overrides;  // --set arguments, applied after the file
  std::vector<std::string> expected;   // substrings of the error message
  // When not empty: the message names "FILE:N" where N is the first line of
  // `yaml` containing this text.
  std::string at_line_with = {};
};

// A valid config (the tiny shape) with `changes` ("section.key", raw YAML
// value) replacing keys in place or appended to their section.
inline std::string valid_yaml_with(const std::vector<std::pair<std::string, std::string>>& changes) {
  std::vector<std::pair<std::string, std::string>> keys = {
      {"model.vocab", "512"},     {"model.d_model", "64"},    {"model.n_layers", "2"},
      {"model.n_heads", "4"},     {"model.n_kv_heads", "2"},  {"model.ffn_hidden", "192"},
      {"model.seq_len", "64"},    {"train.micro_batch", "8"}, {"train.steps", "40"},
      {"train.warmup_steps", "5"}, {"train.lr", "1e-3"},
  };
  for (const auto& [key, value] : changes) {
    bool replaced = false;
    for (auto& entry : keys) {
      if (entry.first == key) {
        entry.second = value;
        replaced = true;
      }
    }
    if (!replaced) keys.emplace_back(key, value);
  }
  // Group by section, sections in order of first appearance.
  std::vector<std::string> sections;
  for (const auto& entry : keys) {
    const std::string section = entry.first.substr(0, entry.first.find('.'));
    bool known = false;
    for (const auto& s : sections) known = known || s == section;
    if (!known) sections.push_back(section);
  }
  std::string yaml;
  for (const auto& section : sections) {
    yaml += section + ":\n";
    for (const auto& [key, value] : keys)
      if (key.substr(0, key.find('.')) == section)
        yaml += "  " + key.substr(key.find('.') + 1) + ": " + value + "\n";
  }
  return yaml;
}

inline std::vector<BadConfigCase> bad_config_cases() {
  const std::string valid = valid_yaml_with({});
  auto with = [](const std::string& key, const std::string& value) {
    return valid_yaml_with({{key, value}});
  };
  return {
      // Structure.
      {"UnknownSection", with("modle.vocab", "512"), {}, {"unknown section 'modle'"}, "modle:"},
      {"UnknownKey", with("model.d_modle", "64"), {},
       {"unknown key 'model.d_modle'", "did you mean 'model.d_model'"}, "d_modle:"},
      {"KeyInWrongSection", with("train.seq_len", "64"), {},
       {"unknown key 'train.seq_len'", "model.seq_len"}},
      {"DuplicateSection", valid + "model:\n  vocab: 100\n", {}, {"duplicate section 'model'"}},
      {"DuplicateKey", "model:\n  vocab: 512\n  vocab: 100\n", {}, {"duplicate key 'model.vocab'"},
       "vocab: 100"},
      {"SectionNotAMap", "model: 64\n", {}, {"model", "a map"}},
      {"TopLevelList", "- model\n- train\n", {}, {"top level must be a map"}},
      {"MalformedYaml", "model:\n  vocab: 512\n  d_model: 64: 3\n  n_layers: 2\n", {},
       {"malformed YAML", ":3:"}},
      {"TabIndentation", "model:\n  vocab: 512\n\td_model: 64\n", {},
       {"malformed YAML", ":3:", "a tab in the indentation"}},
      // Types.
      {"IntNotANumber", with("model.d_model", "abc"), {}, {"model.d_model", "'abc' is not an integer"},
       "d_model:"},
      {"IntWithFraction", with("model.d_model", "12.5"), {}, {"model.d_model", "'12.5' is not an integer"}},
      {"IntWithSuffix", with("train.steps", "1k"), {}, {"train.steps", "'1k' is not an integer"}},
      {"IntHex", with("train.steps", "0x10"), {}, {"train.steps", "'0x10' is not an integer"}},
      {"IntDoubleSign", with("train.steps", "+-5"), {}, {"train.steps", "'+-5' is not an integer"}},
      {"IntAsList", with("model.n_layers", "[2, 4]"), {}, {"model.n_layers", "a list is not an integer"}},
      {"IntAsMap", with("model.n_layers", "{a: 1}"), {}, {"model.n_layers", "a map is not an integer"}},
      {"IntEmpty", with("model.n_layers", ""), {}, {"model.n_layers", "not an integer"}},
      {"IntOverflow", with("model.vocab", "99999999999999999999"), {}, {"model.vocab", "out of range"}},
      {"DoubleNotANumber", with("train.lr", "fast"), {}, {"train.lr", "'fast' is not a number"}},
      {"DoubleInfinite", with("train.lr", ".inf"), {}, {"train.lr", "not a number"}},
      {"StringAsList", with("train.device", "[cpu]"), {}, {"train.device", "a list is not a string"}},
      // Sizes.
      {"ZeroLayers", with("model.n_layers", "0"), {}, {"model.n_layers: must be > 0 (got 0)"}, "n_layers:"},
      {"NegativeMicroBatch", with("train.micro_batch", "-1"), {}, {"train.micro_batch: must be > 0 (got -1)"}},
      {"ZeroSeqLen", with("model.seq_len", "0"), {}, {"model.seq_len: must be > 0"}},
      {"ZeroGradAccum", with("train.grad_accum", "0"), {}, {"train.grad_accum: must be > 0"}},
      {"ZeroSyntheticBatches", with("data.synthetic_batches", "0"), {}, {"data.synthetic_batches: must be > 0"}},
      {"VocabBeyondInt32", with("model.vocab", "2147483648"), {}, {"model.vocab", "int32"}},
      // Shapes.
      {"HeadsDoNotDivideDModel", with("model.n_heads", "6"), {},
       {"model.n_heads: 6 does not divide model.d_model (64)"}, "n_heads:"},
      {"KvHeadsDoNotDivideHeads", with("model.n_kv_heads", "3"), {},
       {"model.n_kv_heads: 3 does not divide model.n_heads (4)"}},
      {"MoreKvHeadsThanHeads", with("model.n_kv_heads", "8"), {}, {"model.n_kv_heads"}},
      {"OddHeadDim", valid_yaml_with({{"model.d_model", "60"}}), {}, {"model.d_model", "odd"}},
      // Training.
      {"WarmupEqualsSteps", with("train.warmup_steps", "40"), {}, {"train.warmup_steps", "train.steps (40)"}},
      {"NegativeWarmup", with("train.warmup_steps", "-1"), {}, {"train.warmup_steps: must be >= 0"}},
      {"NegativeFullDepth", with("model.n_layers_full", "-8"), {}, {"model.n_layers_full: must be >= 0", "got -8"}},
      {"FullDepthNotAnInteger", valid, {"model.n_layers_full=eighty"}, {"model.n_layers_full", "'eighty' is not an integer"}},
      {"MalformedSetValue", valid, {"model.n_layers=[1"}, {"--set model.n_layers=[1", "malformed value"}},
      {"ZeroLr", with("train.lr", "0"), {}, {"train.lr: must be > 0 (got 0)"}},
      {"Beta1One", with("train.beta1", "1"), {}, {"train.beta1: must be in [0, 1)"}},
      {"NegativeBeta2", with("train.beta2", "-0.1"), {}, {"train.beta2: must be in [0, 1) (got -0.1)"}},
      {"ZeroEps", with("train.eps", "0"), {}, {"train.eps"}},
      {"NegativeWeightDecay", with("train.weight_decay", "-0.1"), {}, {"train.weight_decay"}},
      {"NegativeGradClip", with("train.grad_clip", "-1"), {}, {"train.grad_clip"}},
      {"ZeroRopeTheta", with("model.rope_theta", "0"), {}, {"model.rope_theta"}},
      {"ZeroNormEps", with("model.norm_eps", "0"), {}, {"model.norm_eps"}},
      // fp32 epsilons: inf flattened the loss of a run that exited 0, 0 divided 0 by 0.
      {"NormEpsPastFp32", valid, {"model.norm_eps=1e308"}, {"model.norm_eps: must be between 1e-30 and 1 (got 1e+308)"}},
      {"EpsBelowFp32", valid, {"train.eps=5e-324"}, {"train.eps: must be between 1e-30 and 1"}},
      // alpha / rank is fp32: 1e300 made the first loss NaN, a failed check (exit 4) for a config error.
      {"LoraAlphaPastFp32", valid, {"lora.alpha=1e300"}, {"lora.alpha: must be between 1e-30 and 1000000 (got 1e+300)"}},
      // fp32 in the engines too. 1e39 (inf there) made the loss NaN at step 2,
      // exit 4; 1e-46 and 1e-45 became 0, and runs that trained nothing (or
      // clipped every gradient to 0, or scaled the adapters by 0) exited 0.
      {"LoraAlphaBelowFp32", valid, {"lora.alpha=1e-45"}, {"lora.alpha: must be between 1e-30 and 1000000 (got 1e-45)"}},
      {"LrPastFp32", valid, {"train.lr=1e39"},
       {"train.lr: must be 1e-30 to 3.40282e+38: the engines hold it in fp32 (got 1e+39)"}},
      {"LrBelowFp32", valid, {"train.lr=1e-46"}, {"train.lr: must be 1e-30 to 3.40282e+38", "(got 1e-46)"}},
      {"WeightDecayPastFp32", valid, {"train.weight_decay=1e39"}, {"train.weight_decay: must be 0 or 1e-30 to 3.40282e+38"}},
      {"GradClipBelowFp32", valid, {"train.grad_clip=1e-46"},
       {"train.grad_clip: must be 0 (no clipping) or 1e-30 to 3.40282e+38", "(got 1e-46)"}},
      // A beta that rounds to 1 in fp32: AdamW's bias correction 1 - beta^t
      // was 0 and the loss NaN at step 2 (exit 4).
      {"Beta1RoundsToOneInFp32", valid, {"train.beta1=0.999999999"},
       {"train.beta1: must be in [0, 1) as a 32-bit float, where it is 1 (the engines' precision: 0.99999994 is the "
        "largest below 1) (got 0.999999999)"}},
      {"Beta2RoundsToOneInFp32", valid, {"train.beta2=0.99999998"}, {"train.beta2: must be in [0, 1) as a 32-bit float"}},
      {"NegativeThreads", with("train.threads", "-2"), {}, {"train.threads"}},
      {"NegativeTrainSeed", with("train.seed", "-1"), {}, {"train.seed"}},
      {"NegativeDataSeed", with("data.seed", "-1"), {}, {"data.seed"}},
      {"NegativeProgressEvery", with("report.progress_every", "-1"), {}, {"report.progress_every"}},
      {"OpTimesOfUntimedSteps", with("report.op_times", "true"), {"report.instrument=false"},
       {"report.op_times: true needs report.instrument: true"}},
      {"NegativeGemmCeilingSeconds", valid, {"report.gemm_ceiling_s=-0.5"},
       {"report.gemm_ceiling_s: must be >= 0 (got -0.5)"}},
      // Choices.
      {"BadPrecision", with("train.precision", "fp16"), {}, {"train.precision", "'fp16' is not one of"}},
      {"LoraUnknownTarget", with("train.mode", "lora"), {"lora.targets=q,x"}, {"lora.targets", "'x' is not one of"}},
      {"LoraTargetTwice", with("train.mode", "lora"), {"lora.targets=q,v,q"}, {"lora.targets", "'q' is listed twice"}},
      {"LoraNoTargets", with("train.mode", "lora"), {"lora.targets=\",\""}, {"lora.targets", "names no projection"}},
      {"LoraUnknownTargetInFullMode", with("lora.targets", "q,zz"), {}, {"lora.targets", "'zz' is not one of"}},
      {"LoraRankZero", with("train.mode", "lora"), {"lora.rank=0"}, {"lora.rank", "must be > 0"}},
      {"LoraRankAboveWidth", with("train.mode", "lora"), {"lora.rank=65"}, {"lora.rank", "exceeds model.d_model"}},
      {"LoraAlphaNegative", with("train.mode", "lora"), {"lora.alpha=-1"}, {"lora.alpha", "must be > 0"}},
      {"LoraWithZero", with("train.mode", "lora"), {"comm.zero=1"}, {"comm.zero", "ZeRO-1 shards every"}},
      {"BadMode", with("train.mode", "partial"), {}, {"train.mode", "'partial'"}},
      {"BadDevice", with("train.device", "tpu"), {}, {"train.device", "'tpu'"}},
      {"BadAttention", with("train.attention", "flash"), {}, {"train.attention", "'flash' is not one of"}},
      {"BadDataSource", with("data.source", "tape"), {}, {"data.source", "'tape'"}},
      // The shards would be ignored, and the storage figures taken for theirs.
      {"SyntheticBesideShards", with("data.source", "synthetic"), {"data.shards=/data/train-{0..9}.tar"},
       {"data.source", "data.shards", "reads no shards", "'/data/train-{0..9}.tar'"}},
      {"BadOnCorrupt", with("data.on_corrupt", "ignore"), {}, {"data.on_corrupt", "'ignore'"}},
      {"UnknownTokenField", with("data.field", "tokens.u24"), {}, {"data.field", "u16, u32, npy or txt"}},
      // ".u16" matched no member: found only at the first sample.
      {"TokenFieldWithALeadingDot", with("data.field", ".u16"), {}, {"data.field", "'.u16'", "leading"}},
      {"U16FieldForLargeVocab", valid_yaml_with({{"model.vocab", "128256"}, {"data.field", "u16"}}), {},
       {"data.field", "65536", "128256"}},
      {"EosTokenOutsideVocab", with("data.eos_token", "512"), {}, {"data.eos_token", "model.vocab"}},
      {"SmallReadBlock", with("data.block_bytes", "65536"), {}, {"data.block_bytes", "1 MiB"}},
      {"ZeroReaders", with("data.readers", "0"), {}, {"data.readers: must be > 0"}},
      {"ZeroLoaderTimeout", with("data.timeout_s", "0"), {}, {"data.timeout_s: must be between 1 and 31536000 (got 0)"}},
      {"BadCommBackend", with("comm.backend", "gloo"), {}, {"comm.backend", "'gloo'"}},
      {"ZeroBucket", with("comm.bucket_mb", "0"), {}, {"comm.bucket_mb: must be > 0"}},
      // YAML reads "," as nothing: an empty list variable trained on synthetic data.
      {"ShardsOnlySeparators", valid, {"data.shards=,"}, {"data.shards", "',' reads as nothing in YAML"}},
      {"ShardsOnlyBlanks", valid, {"data.shards= "}, {"data.shards", "' ' reads as nothing in YAML"}},
      {"OutOnlyBlanks", valid, {"report.out=\t"}, {"report.out", "reads as nothing in YAML"}},
      // 1e20 MiB overflowed the byte count into 4-byte buckets, silently.
      {"HugeBucket", with("comm.bucket_mb", "1e20"), {}, {"comm.bucket_mb", "between", "(got 1e+20)"}},
      {"TinyBucket", with("comm.bucket_mb", "1e-300"), {}, {"comm.bucket_mb", "1 KiB"}},
      {"OverlapNotABool", with("comm.overlap", "sometimes"), {}, {"comm.overlap", "not true or false"}},
      {"ZeroCommTimeout", with("comm.timeout_s", "0"), {}, {"comm.timeout_s: must be between 1 and 31536000 (got 0)"}},
      {"ZeroGoldenEvery", with("burnin.golden_every", "0"), {}, {"burnin.golden_every: must be > 0"}},
      {"DegradeNotAPercentage", with("burnin.degrade_pct", "150"), {},
       {"burnin.degrade_pct", "percentage in (0, 100)", "150"}},
      {"NegativeStragglerPct", with("burnin.straggler_pct", "-5"), {}, {"burnin.straggler_pct: must be > 0"}},
      {"NegativeSlowRank", with("burnin.inject_slow_rank", "-1"), {}, {"burnin.inject_slow_rank: must be >= 0"}},
      {"Bf16OnCpu", valid_yaml_with({{"train.precision", "bf16"}, {"train.device", "cpu"}}), {},
       {"train.precision", "bf16"}},
      // The cuda engine has no fp32 path: it would train bf16 and record fp32.
      {"Fp32OnCuda", valid_yaml_with({{"train.precision", "fp32"}, {"train.device", "cuda"}}), {},
       {"train.precision", "fp32", "cuda engine trains bf16"}},
      {"CudnnAttentionOnCpu", valid_yaml_with({{"train.attention", "cudnn"}, {"train.device", "cpu"}}), {},
       {"train.attention", "cpu"}},
      {"NcclOnCpu", valid_yaml_with({{"comm.backend", "nccl"}, {"train.device", "cpu"}}), {},
       {"comm.backend", "nccl", "needs the cuda engine"}},
      // Limits: counts that would crash, hang or exhaust memory or disk.
      {"GemmCeilingSecondsAboveLimit", valid, {"report.gemm_ceiling_s=600"},
       {"report.gemm_ceiling_s: must be between 0 and 60 (got 600)"}},
      {"ThreadsAboveLimit", with("train.threads", "100000"), {}, {"train.threads: must be between 0 and 1024 (got 100000)"}},
      {"ReadersAboveLimit", with("data.readers", "100000"), {}, {"data.readers: must be between 1 and 256"}},
      {"PrefetchAboveLimit", with("data.prefetch", "1000000"), {}, {"data.prefetch: must be between 1 and 1024"}},
      {"ShuffleBufferAboveLimit", with("data.shuffle_buffer", "1000000000000"), {},
       {"data.shuffle_buffer: must be between 0 and 1048576"}},
      {"SynthShardsAboveLimit", with("data.synth_shards", "100000000"), {}, {"data.synth_shards: must be between 1 and"}},
      {"SynthSamplesAboveLimit", with("data.synth_samples_per_shard", "100000000000"), {},
       {"data.synth_samples_per_shard: must be between 0 and 16777216"}},
      {"SynthTokensAboveLimit", with("data.synth_tokens_per_sample", "10000000000"), {},
       {"data.synth_tokens_per_sample: must be between 1 and 11184811"}},
      // Within shards synth's 2^24 as a mean, but its samples spread to 1.5x it.
      {"SynthTokensMeanWhoseSpreadPassesTheLimit", with("data.synth_tokens_per_sample", "16777216"), {},
       {"data.synth_tokens_per_sample: must be between 1 and 11184811 (got 16777216)"}},
      {"SynthPayloadAboveLimit", with("data.synth_payload_bytes", "1099511627776"), {},
       {"data.synth_payload_bytes: must be between 0 and 715827883"}},
      {"SynthPayloadMeanWhoseSpreadPassesTheLimit", with("data.synth_payload_bytes", "1073741824"), {},
       {"data.synth_payload_bytes: must be between 0 and 715827883 (got 1073741824)"}},
      {"ReadBlockAboveLimit", with("data.block_bytes", "100000000000"), {},
       {"data.block_bytes: must be between 1048576 (1 MiB", "and 268435456 (256 MiB) (got 100000000000)"}},
      // Just above the limit: the message's range is the one checked (it said 1 .. 268435456).
      {"ReadBlockJustAboveLimit", with("data.block_bytes", "268435457"), {},
       {"data.block_bytes: must be between 1048576 (1 MiB"}},
      {"LayersAboveLimit", with("model.n_layers", "2000000000"), {}, {"model.n_layers: must be between 1 and 65536"}},
      // 2^31 wrapped to a negative int ("internal error"); 2^31-1 grew memory without end.
      {"WritersAboveLimit", with("checkpoint.writers", "2147483648"), {}, {"checkpoint.writers: must be between 1 and 1024"}},
      {"ResumeReadUnknown", with("checkpoint.resume_read", "mine"), {},
       {"checkpoint.resume_read: 'mine' is not one of own, all"}},
      {"SyntheticBatchesAboveLimit", with("data.synthetic_batches", "100000000"), {},
       {"data.synthetic_batches: must be between 1 and 4096"}},
      // Seconds past what steady-clock nanoseconds hold timed out at once; under
      // a second is no collective timeout a real step meets (a typo).
      {"CommTimeoutAboveLimit", with("comm.timeout_s", "1e10"), {},
       {"comm.timeout_s: must be between 1 and 31536000 (got 10000000000)"}},
      {"DataTimeoutAboveLimit", with("data.timeout_s", "31536001"), {}, {"data.timeout_s: must be between 1 and 31536000"}},
      // A typo (0.3 for 300): runs on healthy storage ended, readers called stuck.
      {"DataTimeoutBelowASecond", with("data.timeout_s", "0.3"), {},
       {"data.timeout_s: must be between 1 and 31536000 (got 0.3)"}},
      // 1e-300 overflowed the rotation frequencies: a NaN loss, exit 4.
      {"RopeThetaBelowOne", with("model.rope_theta", "1e-300"), {},
       {"model.rope_theta: must be between 1 and 1000000000000 (got 1e-300)"}},
      // The run's own shards refused as corrupt by its own reader, after they were written.
      {"SynthPayloadPastTheSampleLimit", with("data.synth_payload_bytes", "500000000"), {},
       {"data.max_sample_bytes: 268435456 is below the largest member of the shards made for the run",
        "750000000 bytes", "data.synth_payload_bytes 500000000"}},
      {"SampleLimitBelowTheRunsTokens", with("data.max_sample_bytes", "1"), {},
       {"data.max_sample_bytes: 1 is below", "3072 bytes", "raise data.max_sample_bytes to 3072"}},
      {"StepTokensOverflow", with("train.grad_accum", "9223372036854775807"), {},
       {"train.grad_accum", "more than 2^63 tokens a step on each rank", "(2^40)"}},
      {"StepTokensAboveLimit", with("train.grad_accum", "1099511627776"), {},
       {"train.grad_accum", "562949953421312 tokens a step on each rank", "(2^40)"}},
      {"FullDepthAboveLimit", with("model.n_layers_full", "2000000000"), {}, {"model.n_layers_full", "65536"}},
      // Model sizes whose int64 arithmetic would overflow or that no machine holds.
      {"DModelOverflowsInt64",
       valid_yaml_with({{"model.d_model", "4611686018427387904"}, {"model.n_heads", "2"}, {"model.n_kv_heads", "2"}}),
       {}, {"model.d_model", "more than 2^63", "2^40"}},
      {"DModelTwoBillion", valid_yaml_with({{"model.d_model", "2000000000"}, {"model.n_heads", "1"}, {"model.n_kv_heads", "1"}}),
       {}, {"model.d_model", "4000000000000000000 parameters", "2^40"}},
      {"FfnHiddenTooWide", with("model.ffn_hidden", "100000000000"), {}, {"model.ffn_hidden", "2^40"}},
      {"EmbeddingTooLarge", valid_yaml_with({{"model.vocab", "2147483647"}, {"model.d_model", "4096"},
                                             {"model.n_heads", "32"}, {"model.n_kv_heads", "8"}, {"data.field", "u32"}}),
       {}, {"model.vocab", "embedding", "2^40"}},
      {"TooManyParameters", valid_yaml_with({{"model.d_model", "4096"}, {"model.n_heads", "32"}, {"model.n_kv_heads", "8"},
                                             {"model.ffn_hidden", "14336"}, {"model.n_layers", "65536"}}),
       {}, {"model.n_layers", "65536 layers of model.d_model 4096, ffn_hidden 14336 and vocab", "2^40"}},
      // The size that made it too large came from --set, not from the file's n_layers line.
      {"TooManyParametersFromASet", valid, {"model.n_heads=1", "model.n_kv_heads=1", "model.d_model=1048576"},
       {"--set model.d_model=1048576", "layers of model.d_model 1048576", "2^40"}},
      {"SeqLenTwoBillion", with("model.seq_len", "2000000000"), {}, {"model.seq_len", "more than 2^63", "2^56"}},
      // 2^31 tokens a micro-batch, within the activation limit at this width:
      // OpenBLAS took the sizes as int and refused the GEMMs.
      {"MicroBatchRowsPastInt32",
       valid_yaml_with({{"model.seq_len", "2"}, {"train.micro_batch", "1073741824"}, {"model.d_model", "4"},
                        {"model.n_heads", "1"}, {"model.n_kv_heads", "1"}, {"model.ffn_hidden", "4"},
                        {"model.vocab", "2"}, {"model.n_layers", "1"}}),
       {}, {"train.micro_batch", "2147483648 tokens a micro-batch", "2147483647 rows"}},
      {"SeqLenAttentionTooLarge", with("model.seq_len", "100000000"), {}, {"model.seq_len", "activation elements", "2^56"}},
      // The file itself.
      {"SecondYamlDocument", valid + "---\nmodel:\n  n_layers: 3\n", {}, {"has 2 YAML documents; trainbench reads one"}},
      {"NulInString", with("checkpoint.dir", "\"/x/ck\\0-y\""), {}, {"checkpoint.dir", "NUL"}, "dir:"},
      {"NulInOverride", valid, {"data.shards=\"/tmp/x\\0y\""}, {"--set data.shards=", "data.shards", "NUL"}},
      // Overrides: the file is valid, the override is not.
      {"OverrideWithoutEquals", valid, {"model.n_layers"}, {"--set model.n_layers", "section.key=value"}},
      {"OverrideEmptyKey", valid, {"=4"}, {"--set =4", "key is empty"}},
      {"OverrideUnknownKey", valid, {"model.layers=4"}, {"unknown key 'model.layers'", "model.n_layers"}},
      {"OverrideWrongType", valid, {"model.n_layers=two"}, {"--set model.n_layers=two", "not an integer"}},
      {"OverrideBreaksShape", valid, {"model.d_model=66"},
       {"--set model.d_model=66: model.n_heads: 4 does not divide model.d_model (66)"}},
      {"LaterOverrideWins", valid, {"model.n_layers=4", "model.n_layers=0"},
       {"--set model.n_layers=0: model.n_layers: must be > 0 (got 0)"}},
  };
}

}  // namespace trainbench::config_cases
