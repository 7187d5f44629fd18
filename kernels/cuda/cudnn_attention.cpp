// cuDNN fused SDPA through the frontend's graph API (cudnn_attention.h).
// Compiled only with TRAINBENCH_HAVE_CUDNN_ATTENTION (see kernels/cuda/CMakeLists.txt).
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>  // std::max
#include <string>
#include <unordered_map>

#include "kernels/cuda/cuda_check.h"  // CudaError
#include "kernels/device_info.h"      // cudnn_attention_build_info

namespace trainbench::cuda {

namespace {

namespace fe = cudnn_frontend;

// Variant-pack ids of the graphs' tensors.
enum TensorUid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

std::string version_text(int64_t version) {
  // cuDNN 9 encodes major·10000 + minor·100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::string frontend_version() {
  return std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) +
         "." + std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

// The engine's row layouts seen as cuDNN's [batch, heads, T, head_dim] views:
// token rows of heads·head_dim elements, each head a head_dim slice of its row.
// Inputs and outputs alike.
fe::graph::Tensor_attributes& rows_of_heads(fe::graph::Tensor_attributes& t, const AttentionShape& s,
                                            int64_t heads, int64_t uid) {
  const int64_t row = heads * s.head_dim;
  return t.set_uid(uid)
      .set_dim({s.batch, heads, s.seq_len, s.head_dim})
      .set_stride({s.seq_len * row, s.head_dim, row, 1});
}

std::shared_ptr<fe::graph::Tensor_attributes> input_rows_of_heads(fe::graph::Graph& graph, const AttentionShape& s,
                                                                  int64_t heads, const char* name, int64_t uid) {
  fe::graph::Tensor_attributes t;
  return graph.tensor(rows_of_heads(t.set_name(name), s, heads, uid));
}

void output_rows_of_heads(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const AttentionShape& s,
                          int64_t heads, int64_t uid) {
  rows_of_heads(t->set_output(true), s, heads, uid);
}

// One fp32 logsumexp per (sequence, head, query row): forward's output,
// backward's input.
fe::graph::Tensor_attributes& stats_layout(fe::graph::Tensor_attributes& t, const AttentionShape& s) {
  return t.set_uid(kStats)
      .set_dim({s.batch, s.heads, s.seq_len, 1})
      .set_stride({s.heads * s.seq_len, s.seq_len, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

// sm_version 0: the current device's (the frontend asks the GPU); else the
// compute capability to check the graph for, without a GPU (sm 90 = Hopper).
std::shared_ptr<fe::graph::Graph> new_bf16_graph(int sm_version) {
  auto graph = std::make_shared<fe::graph::Graph>();
  if (sm_version > 0) graph->set_sm_version(sm_version);
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// q, k and v: the inputs both graphs start from.
struct QkvTensors {
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
};
QkvTensors add_qkv(fe::graph::Graph& graph, const AttentionShape& s) {
  return QkvTensors{input_rows_of_heads(graph, s, s.heads, "q", kQ),
                    input_rows_of_heads(graph, s, s.kv_heads, "k", kK),
                    input_rows_of_heads(graph, s, s.kv_heads, "v", kV)};
}

std::shared_ptr<fe::graph::Graph> forward_graph(const AttentionShape& s, float scale, int sm_version = 0) {
  auto graph = new_bf16_graph(sm_version);
  const auto [q, k, v] = add_qkv(*graph, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(true)
                     .set_attn_scale(scale)
                     // Causal: query i sees keys 0..i (top-left aligned, no keys right of the diagonal).
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0);
  auto [o, stats] = graph->sdpa(q, k, v, options);
  output_rows_of_heads(o, s, s.heads, kO);
  stats_layout(stats->set_output(true), s);
  return graph;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const AttentionShape& s, float scale, bool deterministic,
                                                 int sm_version = 0) {
  auto graph = new_bf16_graph(sm_version);
  const auto [q, k, v] = add_qkv(*graph, s);
  auto o = input_rows_of_heads(*graph, s, s.heads, "o", kO);
  auto d_o = input_rows_of_heads(*graph, s, s.heads, "d_o", kDO);
  fe::graph::Tensor_attributes stats_input;
  auto stats = graph->tensor(stats_layout(stats_input.set_name("stats"), s));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("causal_attention_backward")
                     .set_attn_scale(scale)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     // Without it dQ is summed with atomics in varying order: runs
                     // stop repeating bit for bit (cudnn_attention.h says what it costs).
                     .set_deterministic_algorithm(deterministic);
  auto [d_q, d_k, d_v] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
  output_rows_of_heads(d_q, s, s.heads, kDQ);
  output_rows_of_heads(d_k, s, s.kv_heads, kDK);
  output_rows_of_heads(d_v, s, s.kv_heads, kDV);
  return graph;
}

void* mutable_pointer(const void* p) { return const_cast<void*>(p); }

class CudnnSdpa final : public CudnnAttention {
 public:
  CudnnSdpa(cudnnHandle_t handle, std::shared_ptr<fe::graph::Graph> forward,
            std::shared_ptr<fe::graph::Graph> backward, int64_t workspace)
      : handle_(handle), forward_(std::move(forward)), backward_(std::move(backward)), workspace_(workspace) {}
  // The graphs' execution plans were built with the handle: they go first.
  ~CudnnSdpa() override {
    forward_.reset();
    backward_.reset();
    cudnnDestroy(handle_);
  }

  int64_t workspace_bytes() const override { return workspace_; }

  void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* stats, void* workspace) override {
    std::unordered_map<int64_t, void*> pack{{kQ, mutable_pointer(q)}, {kK, mutable_pointer(k)},
                                            {kV, mutable_pointer(v)}, {kO, out},
                                            {kStats, stats}};
    run(*forward_, pack, workspace, "forward");
  }

  void backward(const bf16* q, const bf16* k, const bf16* v, const bf16* out, const bf16* d_out,
                const float* stats, bf16* d_q, bf16* d_k, bf16* d_v, void* workspace) override {
    std::unordered_map<int64_t, void*> pack{
        {kQ, mutable_pointer(q)},     {kK, mutable_pointer(k)},         {kV, mutable_pointer(v)},
        {kO, mutable_pointer(out)},   {kDO, mutable_pointer(d_out)},    {kStats, mutable_pointer(stats)},
        {kDQ, d_q},                   {kDK, d_k},                       {kDV, d_v}};
    run(*backward_, pack, workspace, "backward");
  }

  std::string library_version() const override {
    return "cuDNN " + version_text(static_cast<int64_t>(cudnnGetVersion())) + " (frontend " +
           frontend_version() + ")";
  }

 private:
  void run(fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& pack, void* workspace,
           const char* which) {
    fe::error_t status = graph.execute(handle_, pack, workspace);
    if (status.is_bad())
      throw CudaError(std::string("cuDNN SDPA ") + which + " failed: " + status.get_message());
  }

  cudnnHandle_t handle_;
  std::shared_ptr<fe::graph::Graph> forward_, backward_;
  int64_t workspace_;
};

// Builds `graph` for the handle's device: validation, cuDNN's heuristics,
// support check and plan. The frontend's message when it cannot. Mode A's
// engines come first and the first that builds is the plan; FALLBACK's
// follow, so a graph mode A offers nothing for (the deterministic backward
// on some cuDNN versions) still runs fused instead of `auto` dropping to
// GEMM attention and its B·H·T² probabilities (8.6 GB a layer at
// h200-llama8b-4l).
bool build(fe::graph::Graph& graph, cudnnHandle_t handle, const char* which, std::string* why_not) {
  fe::error_t status = graph.build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (status.is_good()) return true;
  *why_not = std::string("cuDNN cannot run the ") + which + " graph: " + status.get_message();
  return false;
}

}  // namespace

std::unique_ptr<CudnnAttention> make_cudnn_attention(const AttentionShape& shape, float scale,
                                                     bool deterministic_backward, cudaStream_t stream,
                                                     std::string* why_not) {
  cudnnHandle_t handle = nullptr;
  if (const cudnnStatus_t status = cudnnCreate(&handle); status != CUDNN_STATUS_SUCCESS) {
    *why_not = std::string("cudnnCreate failed: ") + cudnnGetErrorString(status);
    return nullptr;
  }
  if (const cudnnStatus_t status = cudnnSetStream(handle, stream); status != CUDNN_STATUS_SUCCESS) {
    *why_not = std::string("cudnnSetStream failed: ") + cudnnGetErrorString(status);
    cudnnDestroy(handle);
    return nullptr;
  }
  std::shared_ptr<fe::graph::Graph> forward, backward;
  int64_t forward_workspace = 0, backward_workspace = 0;
  // Plans built with the handle go before it.
  auto give_up = [&] {
    forward.reset();
    backward.reset();
    cudnnDestroy(handle);
    return nullptr;
  };
  try {
    forward = forward_graph(shape, scale);
    backward = backward_graph(shape, scale, deterministic_backward);
    if (!build(*forward, handle, "forward", why_not) || !build(*backward, handle, "backward", why_not))
      return give_up();
    if (forward->get_workspace_size(forward_workspace).is_bad() ||
        backward->get_workspace_size(backward_workspace).is_bad()) {
      *why_not = "cuDNN did not report the SDPA workspace size";
      return give_up();
    }
  } catch (const std::exception& e) {  // the frontend throws on some misuse instead of returning
    *why_not = std::string("cuDNN frontend: ") + e.what();
    return give_up();
  }
  return std::make_unique<CudnnSdpa>(handle, std::move(forward), std::move(backward),
                                     std::max(forward_workspace, backward_workspace));
}

std::string validate_cudnn_attention(const AttentionShape& shape, float scale, bool deterministic_backward,
                                     int sm_version) {
  try {
    for (const auto& [which, graph] :
         {std::pair{"forward", forward_graph(shape, scale, sm_version)},
          std::pair{"backward", backward_graph(shape, scale, deterministic_backward, sm_version)}}) {
      fe::error_t status = graph->validate();
      if (status.is_bad()) return std::string(which) + " graph: " + status.get_message();
    }
  } catch (const std::exception& e) {
    return std::string("cuDNN frontend: ") + e.what();
  }
  return "";
}

}  // namespace trainbench::cuda

namespace trainbench {

std::string cudnn_attention_build_info() {
  return "cuDNN " + cuda::version_text(CUDNN_VERSION) + " headers, frontend " + cuda::frontend_version();
}

}  // namespace trainbench
