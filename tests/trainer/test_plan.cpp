// `trainbench plan`: the per-GPU memory of full (DDP, ZeRO-1) and LoRA
// training against hand counts for the tiny preset, which of them fits, and
// the CLI's table, JSON and argument errors.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "kernels/device_info.h"  // cudnn_attention_build_info
#include "kernels/engine.h"       // built_backends
#include "tests/support/run_command.h"
#include "trainer/config.h"
#include "trainer/plan_command.h"

namespace trainbench {
namespace {

using testing::CommandResult;
using testing::run_command;

bool cuda_built() { return built_backends().find("cuda") != std::string::npos; }

// tiny: vocab 512, d_model 64, 2 layers, 4 heads (2 kv: kv_dim 32), ffn 192,
// seq 64, micro-batch 8 (n = 512 tokens).
constexpr int64_t kBase = 2 * 512 * 64                                          // embedding, LM head
                          + 2 * (2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 64 * 192)  // layers
                          + 64;                                                 // final norm
// LoRA rank 16 on q, k, v, o (the defaults): A 16·64 each, B 16·(64+32+32+64), per layer.
constexpr int64_t kAdapters = 2 * (4 * 16 * 64 + 16 * (64 + 32 + 32 + 64));
// bf16 activations per layer: residual_in, attn_norm_out, residual_mid,
// mlp_norm_out (4·n·d), q and attn_out (2·n·q_dim), k and v (2·n·kv_dim), the
// B·H·T² probabilities, gate, up, swiglu_out (3·n·ffn); then the final
// residual and norm (2·n·d) and the logits, rows padded to 512; fp32 norm
// statistics (2·n per layer, 3·n at the end).
constexpr int64_t kN = 8 * 64;
constexpr int64_t kActivationsPerLayer =
    4 * kN * 64 + 2 * kN * 64 + 2 * kN * 32 + 8 * 4 * 64 * 64 + 3 * kN * 192;
constexpr int64_t kActivationBytes =
    (2 * kActivationsPerLayer + 2 * kN * 64 + kN * 512) * 2 + (2 * 2 * kN + 3 * kN) * 4;

TEST(Plan, TinyMatchesAHandCount) {
  ASSERT_EQ(kBase, 164160);
  const Config config = load_config("tiny", {"train.attention=gemm"});
  const std::vector<FinetunePlanRow> rows = plan_finetune(config, 8, 2, int64_t{80} << 30);
  ASSERT_EQ(rows.size(), 3u);
  const FinetunePlanRow &ddp = rows[0], &zero = rows[1], &lora = rows[2];

  EXPECT_EQ(ddp.mode, "full (DDP)");
  EXPECT_EQ(ddp.gpus, 16);
  EXPECT_EQ(ddp.trainable_params, kBase);
  EXPECT_EQ(ddp.memory.parameter_bytes, kBase * (2 + 4));  // bf16 copy + fp32 master
  EXPECT_EQ(ddp.memory.gradient_bytes, kBase * 4);
  EXPECT_EQ(ddp.memory.optimizer_bytes, kBase * 8);        // AdamW m and v
  EXPECT_EQ(ddp.memory.activation_bytes, kActivationBytes);
  // The job's checkpoint holds master, bf16 copy, m and v once: each of the
  // 16 ranks writes a slice of what they hold alike (every rank wrote all of
  // it, 16 copies).
  EXPECT_EQ(ddp.checkpoint_bytes, kBase * (4 + 2 + 8));

  // 16 ranks: blocks of ceil(164160 / 16) = 10260 elements rounded up to 64
  // (every shard on 256 bytes), 10304; the fp32 master and the gradients
  // padded to 16 of them.
  constexpr int64_t kBlock = 10304, kPadding = 16 * kBlock - kBase;
  EXPECT_EQ(zero.mode, "full (ZeRO-1)");
  EXPECT_EQ(zero.memory.optimizer_bytes, kBlock * 8);
  EXPECT_EQ(zero.memory.parameter_bytes, ddp.memory.parameter_bytes + kPadding * 4);
  EXPECT_EQ(zero.memory.gradient_bytes, ddp.memory.gradient_bytes + kPadding * 4);
  EXPECT_EQ(zero.memory.total_bytes(),
            ddp.memory.total_bytes() - kBase * 8 + kBlock * 8 + 2 * kPadding * 4);
  // The master and bf16 copy once, the m and v shards adding up to one.
  EXPECT_EQ(zero.checkpoint_bytes, kBase * (4 + 2) + kBase * 8);
  // Rank 0 stages its slice of each image of what the ranks hold alike, and
  // under ZeRO-1 its own shard of m and v whole, as the Checkpointer lays
  // them out: whole 4096-byte pages per tensor, over checkpoint.writers 2
  // files (largest first onto the lighter: master and v | m and the bf16
  // copy), rank 0 taking ceil(pages / ranks) of each.
  const auto pages = [](int64_t bytes) { return (bytes + 4095) / 4096; };
  const auto share = [](int64_t file_pages, int64_t ranks) { return (file_pages + ranks - 1) / ranks * 4096; };
  EXPECT_EQ(ddp.staging_bytes, share(2 * pages(kBase * 4), 16) + share(pages(kBase * 4) + pages(kBase * 2), 16));
  EXPECT_EQ(ddp.staging_bytes, 151552) << "37 pages";
  EXPECT_EQ(zero.staging_bytes,
            share(pages(kBase * 4), 16) + share(pages(kBase * 2), 16) + 2 * pages(kBlock * 4) * 4096);

  EXPECT_EQ(lora.mode, "lora");
  EXPECT_EQ(lora.gpus, 8);  // one node
  EXPECT_EQ(lora.trainable_params, kAdapters);
  // The frozen base in bf16 only; the adapters with an fp32 master.
  EXPECT_EQ(lora.memory.parameter_bytes, (kBase + kAdapters) * 2 + kAdapters * 4);
  EXPECT_EQ(lora.memory.gradient_bytes, kAdapters * 4);
  EXPECT_EQ(lora.memory.optimizer_bytes, kAdapters * 8);
  // h = x·Aᵀ [n, 16] saved per adapter: 4 per layer.
  EXPECT_EQ(lora.memory.activation_bytes, kActivationBytes + 2 * 4 * kN * 16 * 2);
  EXPECT_EQ(lora.checkpoint_bytes, kAdapters * (4 + 2 + 8));
  EXPECT_EQ(lora.staging_bytes,  // over the node's 8 ranks; fp32 adapters and v | m and the bf16 adapters
            share(2 * pages(kAdapters * 4), 8) + share(pages(kAdapters * 4) + pages(kAdapters * 2), 8));
  for (const FinetunePlanRow& r : rows) EXPECT_TRUE(r.fits) << r.mode;
  // checkpoint.include_base: the frozen base goes in too, in bf16 (it was
  // left out: 70B's plan understated its LoRA checkpoint by 131 GiB).
  const std::vector<FinetunePlanRow> with_base =
      plan_finetune(load_config("tiny", {"train.attention=gemm", "checkpoint.include_base=true"}), 8, 2,
                    int64_t{80} << 30);
  EXPECT_EQ(with_base[2].checkpoint_bytes, kAdapters * (4 + 2 + 8) + kBase * 2);
  EXPECT_GT(with_base[2].staging_bytes, lora.staging_bytes + kBase * 2 / 8) << "a slice of the base too";
  EXPECT_EQ(with_base[0].checkpoint_bytes, ddp.checkpoint_bytes) << "full fine-tuning holds the base anyway";
}

// An odd vocabulary (500, padded to 512 for the LM head's GEMMs): the CUDA
// engine adds a zero-padded bf16 copy of the head (512 × 64) and, when the
// head is trained, room for the padded rows' weight gradient (12 × 64 fp32).
TEST(Plan, AnOddVocabularyAddsThePaddedLmHead) {
  const Config config = load_config("tiny", {"model.vocab=500", "train.attention=gemm"});
  const std::vector<FinetunePlanRow> rows = plan_finetune(config, 8, 2, int64_t{80} << 30);
  ASSERT_EQ(rows.size(), 3u);
  const FinetunePlanRow &ddp = rows[0], &lora = rows[2];
  constexpr int64_t kBase500 = kBase - 2 * 12 * 64;  // 12 fewer rows of embedding and head
  constexpr int64_t kPaddedHead = 512 * 64;
  EXPECT_EQ(ddp.trainable_params, kBase500);
  EXPECT_EQ(ddp.memory.parameter_bytes, kBase500 * (2 + 4) + kPaddedHead * 2);
  EXPECT_EQ(ddp.memory.gradient_bytes, (kBase500 + 12 * 64) * 4);
  EXPECT_EQ(ddp.memory.optimizer_bytes, kBase500 * 8);
  EXPECT_EQ(ddp.memory.activation_bytes, kActivationBytes);  // the logits' rows were padded to 512 already
  EXPECT_EQ(ddp.checkpoint_bytes, kBase500 * (4 + 2 + 8));  // once for the 16 ranks; the padding is not state
  // LoRA: the frozen head gets the padded copy, no gradient room.
  EXPECT_EQ(lora.memory.parameter_bytes, (kBase500 + kAdapters) * 2 + kAdapters * 4 + kPaddedHead * 2);
  EXPECT_EQ(lora.memory.gradient_bytes, kAdapters * 4);
}

// cuDNN's fused attention (train.attention auto or cudnn, where this build has
// it) keeps a [B, H, T] fp32 logsumexp per layer instead of the B·H·T² bf16
// probabilities, drops their gradient from the scratch, and adds cuDNN's
// workspace, estimated before a GPU is asked: two fp32 values per head and
// row, and an fp32 dQ accumulator (n·q_dim) for the fastest backward or, for
// the deterministic one (train.deterministic, the default), Hopper's bf16 dP
// with the queries padded to 64 and the keys to 128 instead.
TEST(Plan, CudnnAttentionKeepsNoProbabilities) {
  // A build without the CUDA engine plans cuDNN attention as assumed.
  if (cuda_built() && cudnn_attention_build_info().empty())
    GTEST_SKIP() << "this build has no cuDNN attention (cuDNN or the frontend headers were not found)";
  const FinetunePlanRow gemm = plan_finetune(load_config("tiny", {"train.attention=gemm"}), 8, 2, int64_t{80} << 30)[0];
  for (const char* setting : {"train.attention=auto", "train.attention=cudnn"}) {
    for (const bool deterministic : {true, false}) {
      SCOPED_TRACE(std::string(setting) + (deterministic ? ", deterministic" : ", fastest backward"));
      const FinetunePlanRow fused =
          plan_finetune(load_config("tiny", {setting, deterministic ? "train.deterministic=true"
                                                                    : "train.deterministic=false"}),
                        8, 2, int64_t{80} << 30)[0];
      constexpr int64_t kProbs = 8 * 4 * 64 * 64;  // per layer
      constexpr int64_t kStats = kN * 4;           // per layer: n rows × 4 heads
      constexpr int64_t kDp = 8 * 4 * 64 * 128 * 2;  // T 64 as queries; keys padded to 128
      EXPECT_EQ(fused.memory.activation_bytes, kActivationBytes - 2 * kProbs * 2 + 2 * kStats * 4);
      EXPECT_EQ(fused.memory.workspace_bytes,
                gemm.memory.workspace_bytes - kProbs * 2 + 8 * kN * 4 + (deterministic ? kDp : 4 * kN * 64));
      EXPECT_EQ(fused.memory.parameter_bytes, gemm.memory.parameter_bytes);
    }
  }
}

// A head dimension cuDNN's fused attention refuses (10: not a multiple of
// 8) runs the GEMM attention, probabilities and all: the plan counts them, in
// every build. It counted cuDNN's for every shape, and a head dimension of 10
// at Llama-8B's other sizes "fitted" an H200 in 46 GiB.
TEST(Plan, AShapeCudnnRefusesIsPlannedWithTheGemmAttention) {
  const std::vector<std::string> head_dim_10 = {"model.d_model=80", "model.n_heads=8", "model.n_kv_heads=4"};
  std::vector<std::string> gemm_settings = head_dim_10;
  gemm_settings.push_back("train.attention=gemm");
  const Config config = load_config("tiny", head_dim_10);
  const FinetunePlanRow planned = plan_finetune(config, 8, 2, int64_t{80} << 30)[0];
  const FinetunePlanRow gemm = plan_finetune(load_config("tiny", gemm_settings), 8, 2, int64_t{80} << 30)[0];
  EXPECT_EQ(planned.memory.activation_bytes, gemm.memory.activation_bytes);
  EXPECT_EQ(planned.memory.workspace_bytes, gemm.memory.workspace_bytes);
  const PlannedAttention attention = planned_attention(config);
  EXPECT_EQ(attention.kernel, "gemm");
  EXPECT_FALSE(attention.assumed);
  // Asked for by name, the shape is refused (exit 2), as `run` refuses it
  // before anything is allocated, rather than planned with the other attention.
  if (!cuda_built() || !cudnn_attention_build_info().empty()) {
    const CommandResult asked = run_command(std::string(TRAINBENCH_BINARY) +
                                            " plan tiny --set model.d_model=80 --set model.n_heads=8 "
                                            "--set model.n_kv_heads=4 --set train.attention=cudnn");
    EXPECT_EQ(asked.exit_code, 2) << asked.out << asked.err;
    EXPECT_NE(asked.err.find("train.attention=cudnn: cuDNN's fused attention"), std::string::npos) << asked.err;
  }
  // Where cuDNN attention is built or assumed, the refusal is the reason;
  // the tiny preset's shape (head dimension 16) keeps cuDNN's.
  if (!cuda_built() || !cudnn_attention_build_info().empty()) {
    EXPECT_NE(attention.basis.find("cuDNN's fused attention"), std::string::npos) << attention.basis;
    EXPECT_EQ(planned_attention(load_config("tiny")).kernel, "cudnn-sdpa");
  }
}

// A head dimension past the CUDA engine's RoPE (512) has no plan: exit 2
// before anything, where the engine refused it at its first forward, after
// allocating everything.
TEST(Plan, AHeadDimensionTheCudaEngineCannotRunIsRefused) {
  const CommandResult r =
      run_command(std::string(TRAINBENCH_BINARY) + " plan tiny --set model.d_model=2048 --set model.n_heads=2"
                                                   " --set model.n_kv_heads=2");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("model: head dimension d_model / n_heads = 1024: the cuda engine runs at most 512"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(cuda_engine_shape_problem(load_config("tiny", {"model.d_model=1024", "model.n_heads=2",
                                                            "model.n_kv_heads=2"}).model),
            "");
}

// The largest depth a config may give (65536 layers) is planned at once:
// the LoRA row's views were counted by a loop whose bound rebuilt the list
// of adapters each time, quadratic in the layers (over 120 s at 65536,
// more than 10 minutes by extrapolation; ~1 s now).
TEST(Plan, TheDeepestModelAConfigMayGiveIsPlannedWithoutAWait) {
  const CommandResult r =
      run_command("timeout 120 " + std::string(TRAINBENCH_BINARY) + " plan tiny --set model.n_layers=65536");
  EXPECT_EQ(r.exit_code, 0) << "124: still planning after 120 s\n" << r.out << r.err;
  EXPECT_NE(r.out.find("\nlora "), std::string::npos) << r.out;
}

TEST(Plan, SaysWhichFits) {
  const Config config = load_config("tiny");
  const std::vector<FinetunePlanRow> all = plan_finetune(config, 8, 1, int64_t{80} << 30);
  // Room for LoRA and ZeRO-1 but not for DDP's full optimizer state.
  const int64_t usable = all[1].memory.total_bytes();
  const std::vector<FinetunePlanRow> rows = plan_finetune(config, 8, 1, usable);
  EXPECT_FALSE(rows[0].fits);
  EXPECT_TRUE(rows[1].fits);
  EXPECT_TRUE(rows[2].fits);
  EXPECT_EQ(usable_gpu_bytes(int64_t{80} << 30), (int64_t{80} << 30) - (int64_t{80} << 30) / 20);
  EXPECT_EQ(usable_gpu_bytes(int64_t{16} << 30), int64_t{14} << 30);  // the 2 GiB floor
}

TEST(Plan, CliPrintsTheTableAndJsonAndRefusesBadArguments) {
  const std::string binary = TRAINBENCH_BINARY;
  const CommandResult table = run_command(binary + " plan tiny --gpu-memory 80");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  for (const char* word : {"full (DDP)", "full (ZeRO-1)", "lora", "fits", "80.00 GiB", "staging",
                           "(8 GPUs a node: 8 times that)"})
    EXPECT_NE(table.out.find(word), std::string::npos) << word << "\n" << table.out;
  EXPECT_EQ(table.out.find("n_layers_full"), std::string::npos) << table.out;
  // A preset cut from a deeper model says which depth it planned.
  const CommandResult cut = run_command(binary + " plan tiny --set model.n_layers_full=8");
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  EXPECT_NE(cut.out.find("planned at the config's 2 layers, not model.n_layers_full 8: for the full model's "
                         "memory, add --set model.n_layers=8"),
            std::string::npos)
      << cut.out;

  const CommandResult json = run_command(binary + " plan tiny --json --gpus-per-node 4 --nodes 3 --gpu-memory 0.001");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json plan = nlohmann::json::parse(json.out);
  ASSERT_EQ(plan.at("rows").size(), 3u);
  EXPECT_EQ(plan["rows"][0]["gpus"], 12);
  EXPECT_EQ(plan["rows"][2]["gpus"], 4);
  EXPECT_EQ(plan["rows"][0]["trainable_params"], kBase);
  EXPECT_LT(plan["rows"][0]["staging_bytes"].get<int64_t>(), kBase * (4 + 2 + 8) / 12 + 2 * 4096)
      << "rank 0's of 12: its slices, about a 12th";
  EXPECT_GE(plan["rows"][0]["staging_bytes"].get<int64_t>(), kBase * (4 + 2 + 8) / 12);
  for (const nlohmann::json& row : plan["rows"]) EXPECT_FALSE(row["fits"].get<bool>()) << row.dump();
  // Which build planned it and how, as every other output says.
  EXPECT_FALSE(plan.at("version").get<std::string>().empty());
  EXPECT_EQ(plan.at("command"), binary + " plan tiny --json --gpus-per-node 4 --nodes 3 --gpu-memory 0.001");
  // Counts are decimal as typed: CLI11's own conversion read 010 as 8 (and refused 08).
  const CommandResult zeros = run_command(binary + " plan tiny --json --gpus-per-node 08 --nodes 010");
  ASSERT_EQ(zeros.exit_code, 0) << zeros.err;
  EXPECT_EQ(nlohmann::json::parse(zeros.out).at("rows").at(0).at("gpus"), 80) << zeros.out;
  // Whether the config checkpoints: scale.sh --slurm asks it of a YAML file.
  EXPECT_GT(plan.at("checkpoint").at("every_steps").get<int64_t>(), 0);
  const CommandResult off = run_command(binary + " plan tiny --json --set checkpoint.every_steps=0");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out).at("checkpoint").at("every_steps"), 0) << off.out;

  // lora.rank above d_model: run refuses it, so the plan prints no row for it.
  for (const char* bad : {"--nodes 0", "--gpus-per-node -1", "--gpu-memory 0", "--set lora.rank=0",
                          "--set lora.rank=100000"}) {
    const CommandResult r = run_command(binary + " plan tiny " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

// The plan is the CUDA engine's memory model, which is host arithmetic
// (kernels/cuda/engine_sizes.h): a build without that engine plans as well
// (on a login node without the CUDA toolkit), and says which attention it
// counted and on what basis; the config's own errors still come first, exit 2.
TEST(Plan, SaysWhichAttentionItCountedAndWhyInEveryBuild) {
  const std::string binary = TRAINBENCH_BINARY;
  const CommandResult table = run_command(binary + " plan tiny");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const CommandResult json = run_command(binary + " plan tiny --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json attention = nlohmann::json::parse(json.out).at("attention");
  if (!cuda_built()) {
    EXPECT_EQ(attention["kernel"], "cudnn-sdpa");
    EXPECT_TRUE(attention["assumed"].get<bool>());
    EXPECT_NE(table.out.find("attention cudnn-sdpa (assumed: this build has no CUDA engine"), std::string::npos)
        << table.out;
  } else {
    EXPECT_EQ(attention["kernel"], cudnn_attention_build_info().empty() ? "gemm" : "cudnn-sdpa");
    EXPECT_FALSE(attention["assumed"].get<bool>());
  }
  const CommandResult gemm = run_command(binary + " plan tiny --json --set train.attention=gemm");
  ASSERT_EQ(gemm.exit_code, 0) << gemm.err;
  const nlohmann::json gemm_plan = nlohmann::json::parse(gemm.out);
  EXPECT_EQ(gemm_plan["attention"]["kernel"], "gemm");
  EXPECT_FALSE(gemm_plan["attention"]["assumed"].get<bool>());
  EXPECT_EQ(gemm_plan["rows"][0]["activation_bytes"], kActivationBytes);

  const CommandResult bad = run_command(binary + " plan tiny --set lora.rank=100000");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("lora.rank"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace trainbench
