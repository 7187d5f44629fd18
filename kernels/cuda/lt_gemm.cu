#include "kernels/cuda/lt_gemm.h"

#include <cuda_bf16.h>  // __nv_bfloat16 for the calibration buffers

#include <algorithm>  // std::max
#include <cstdint>    // uintptr_t
#include <chrono>     // the calibration's time budget
#include <string>
#include <utility>  // std::pair

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"  // fill_uniform_bf16 for the calibration operands

namespace trainbench::cuda {

LtGemm::LtGemm(size_t workspace_bytes, bool time_candidates)
    : workspace_(workspace_bytes), time_candidates_(time_candidates) {
  TRAINBENCH_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtGemm::~LtGemm() {
  // Destroy failures cannot be reported from a destructor; they only occur
  // when the context is already broken.
  for (auto& [key, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.matmul);
  }
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, and a row-major
// [r, c] matrix with leading dimension L is the column-major [c, r] matrix with
// the same L. So cuBLASLt's first operand is our B and its second our A, each
// with its own transpose flag, and its output is [n, m] column-major.
LtGemm::Plan& LtGemm::plan_for(const Key& key) {
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;

  const auto [transpose_a, transpose_b, m, n, k, lda, ldb, ldc, output, alignment, batch,
              stride_a, stride_b, stride_c] = key;
  Plan plan;
  // Until the plan is cached, a failure releases what was created so far.
  auto release = [&plan] {
    if (plan.a != nullptr) cublasLtMatrixLayoutDestroy(plan.a);
    if (plan.b != nullptr) cublasLtMatrixLayoutDestroy(plan.b);
    if (plan.c != nullptr) cublasLtMatrixLayoutDestroy(plan.c);
    if (plan.matmul != nullptr) cublasLtMatmulDescDestroy(plan.matmul);
  };
  cublasLtMatmulPreference_t preference = nullptr;
  try {
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.matmul, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.matmul, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan.matmul, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    // Stored (column-major) shapes: our B is [n, k] when not transposed, [k, n]
    // when transposed; our A is [k, m], or [m, k] when transposed.
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &plan.b, CUDA_R_16BF, transpose_b ? k : n, transpose_b ? n : k, ldb));
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
        &plan.a, CUDA_R_16BF, transpose_a ? m : k, transpose_a ? k : m, lda));
    const cudaDataType_t c_type =
        static_cast<GemmOutput>(output) == GemmOutput::kFp32 ? CUDA_R_32F : CUDA_R_16BF;
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, c_type, n, m, ldc));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> strided[] = {
          {plan.a, stride_a}, {plan.b, stride_b}, {plan.c, stride_c}};
      for (const auto& [layout, stride] : strided) {
        TRAINBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        TRAINBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      }
    }

    TRAINBENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const size_t workspace_bytes = workspace_.bytes();
    TRAINBENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
        sizeof(workspace_bytes)));
    for (const cublasLtMatmulPreferenceAttributes_t attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      TRAINBENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          preference, attribute, &alignment, sizeof(alignment)));
    }
    cublasLtMatmulHeuristicResult_t heuristics[kMaxCandidates]{};
    const int requested = time_candidates_ ? kMaxCandidates : 1;
    int returned = 0;
    // NOT_SUPPORTED is the heuristic's "nothing for this configuration"
    // (cublasLt.h), the same answer as no result.
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_, plan.matmul, plan.b, plan.a, plan.c, plan.c, preference, requested, heuristics,
        &returned);
    if (status != CUBLAS_STATUS_NOT_SUPPORTED)
      check_cublas(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    const cublasStatus_t destroyed = cublasLtMatmulPreferenceDestroy(preference);
    preference = nullptr;  // gone either way: the error path below must not destroy it again
    check_cublas(destroyed, "cublasLtMatmulPreferenceDestroy", __FILE__, __LINE__);
    // A result's algorithm is valid only where its state is SUCCESS (cublasLt.h).
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < returned; ++i)
      if (heuristics[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(heuristics[i].algo);
    if (plan.candidates.empty()) {
      throw CudaError("cuBLASLt has no algorithm for a bf16 GEMM m=" + std::to_string(m) +
                      " n=" + std::to_string(n) + " k=" + std::to_string(k) + " (" +
                      (c_type == CUDA_R_32F ? "fp32" : "bf16") + " output, operands aligned to " +
                      std::to_string(alignment) + " bytes)",
                      /*device_fault=*/false);
    }
  } catch (...) {
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    release();
    throw;
  }
  plan.algo = plan.candidates.front();
  // One candidate leaves nothing to time; when not timing, only one is asked for.
  plan.single_candidate = time_candidates_ && plan.candidates.size() == 1;
  plan.timed = plan.candidates.size() < 2;
  if (plan.timed) plan.candidates.clear();
  return plans_.emplace(key, plan).first->second;
}

namespace {
// The largest power of two up to 256 that divides every operand's address
// (and, in a strided batch, every later call's: the strides in bytes too).
uint32_t common_alignment(const void* a, const void* b, const void* c,
                          uintptr_t stride_bytes = 0) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                         reinterpret_cast<uintptr_t>(c) | stride_bytes | 256u;
  return static_cast<uint32_t>(bits & (~bits + 1));  // lowest set bit
}
}  // namespace

void LtGemm::gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                  float alpha, const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                  void* c, int64_t ldc, GemmOutput output, cudaStream_t stream) {
  gemm_strided_batched(transpose_a, transpose_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c,
                       ldc, 0, 1, output, stream);
}

void LtGemm::gemm_strided_batched(bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                                  int64_t k, float alpha, const void* a, int64_t lda,
                                  int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b,
                                  float beta, void* c, int64_t ldc, int64_t stride_c,
                                  int64_t batch, GemmOutput output, cudaStream_t stream) {
  if (batch < 1) return;
  const uintptr_t c_element = output == GemmOutput::kFp32 ? sizeof(float) : 2;
  const uintptr_t stride_bytes =
      batch > 1 ? static_cast<uintptr_t>(stride_a * 2) | static_cast<uintptr_t>(stride_b * 2) |
                      static_cast<uintptr_t>(stride_c) * c_element
                : 0;
  // A batch of one is the plain GEMM: one cache entry whatever the strides.
  if (batch == 1) stride_a = stride_b = stride_c = 0;
  Plan& plan = plan_for(Key{transpose_a, transpose_b, m, n, k, lda, ldb, ldc,
                            static_cast<int>(output), common_alignment(a, b, c, stride_bytes),
                            batch, stride_a, stride_b, stride_c});
  if (!plan.timed) {
    time_candidates(plan,
                    Call{a, b, c, alpha, beta, output_span_bytes(m, n, ldc, batch, stride_c, c_element)},
                    stream);
  }
  if (counting_calls_) ++plan.calls;
  TRAINBENCH_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.matmul, &alpha, b, plan.b, a, plan.a, &beta,
                                         c, plan.c, c, plan.c, &plan.algo, workspace_.get(),
                                         workspace_.bytes(), stream));
}

namespace {
// A device allocation that may fail without throwing: timing borrows an
// output as large as one GEMM's, which a nearly full GPU may not have.
// Stream-ordered (cudaMallocAsync / cudaFreeAsync on the GEMM's stream): a
// plain cudaFree would synchronise the whole device, including a comm stream
// whose all-reduce waits for another rank.
class BorrowedDeviceBytes {
 public:
  BorrowedDeviceBytes(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    status_ = cudaMallocAsync(&data_, bytes, stream);
    if (status_ != cudaSuccess) {
      // Out of memory (or no stream-ordered allocator on this device) is an
      // answer here, not an error to keep: the failed call is the runtime's
      // last error, which is cleared so the next check is not blamed for it.
      (void)cudaGetLastError();
      data_ = nullptr;
    }
  }
  ~BorrowedDeviceBytes() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);  // after the runs that use it
  }
  BorrowedDeviceBytes(const BorrowedDeviceBytes&) = delete;
  BorrowedDeviceBytes& operator=(const BorrowedDeviceBytes&) = delete;
  void* get() const { return data_; }
  cudaError_t status() const { return status_; }

 private:
  void* data_ = nullptr;
  cudaError_t status_ = cudaSuccess;
  cudaStream_t stream_;
};

// CUDA events with timing, destroyed however the measurement ends.
template <int N>
class TimingEvents {
 public:
  TimingEvents() {
    for (cudaEvent_t& event : events_) {
      if (const cudaError_t status = cudaEventCreate(&event); status != cudaSuccess) {
        release();
        TRAINBENCH_CUDA_CHECK(status);
      }
    }
  }
  ~TimingEvents() { release(); }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
  cudaEvent_t operator[](int i) const { return events_[i]; }
  float elapsed_ms(int from, int to) const {
    float ms = 0;
    TRAINBENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[from], events_[to]));
    return ms;
  }

 private:
  void release() {
    for (cudaEvent_t& event : events_) {
      if (event != nullptr) cudaEventDestroy(event);
      event = nullptr;
    }
  }
  cudaEvent_t events_[N] = {};
};

// Spins one thread for about `ns` nanoseconds of the GPU's global timer
// (PTX %globaltimer), keeping the stream busy while the host queues what
// follows it. At most kMaxSleeps naps of ~1 µs whatever the timer says: the
// hold only helps the timing, and must never hang a run. A nap may end
// anywhere from at once to twice what is asked, so the cap is ten times the
// naps a 500 µs hold needs, not twice: at most ~40 ms.
__global__ void hold_stream_kernel(unsigned long long ns) {
  constexpr int kMaxSleeps = 20000;
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  int sleeps = 0;
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns && ++sleeps < kMaxSleeps);
}

// The median time of single runs, each between two events on the stream:
// a median, not a mean, so that one run slowed by other work on the GPU does
// not decide. The runs are queued behind a short hold of the stream, so they
// run back to back: otherwise a run shorter than the host's launch call
// (a few microseconds; attention's per-head GEMMs, LoRA) would be timed
// with the GPU waiting for the host inside it, and a candidate timed after
// the previous one drained the stream would pay that where the first choice,
// timed behind the step's queued work, did not.
class RunTimer {
 public:
  static constexpr int kRuns = 5;
  // Far longer than queuing kRuns launches and their events takes the host.
  static constexpr unsigned long long kHoldNs = 500'000;

  template <typename Launch>
  float median_ms(const Launch& launch, cudaStream_t stream) {
    hold_stream_kernel<<<1, 1, 0, stream>>>(kHoldNs);
    TRAINBENCH_CUDA_CHECK(cudaGetLastError());
    TRAINBENCH_CUDA_CHECK(cudaEventRecord(events_[0], stream));
    for (int r = 1; r <= kRuns; ++r) {
      TRAINBENCH_CUBLAS_CHECK(launch());
      TRAINBENCH_CUDA_CHECK(cudaEventRecord(events_[r], stream));
    }
    TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(events_[kRuns]));
    float ms[kRuns];
    for (int r = 0; r < kRuns; ++r) ms[r] = events_.elapsed_ms(r, r + 1);
    std::nth_element(ms, ms + kRuns / 2, ms + kRuns);
    return ms[kRuns / 2];
  }

 private:
  TimingEvents<kRuns + 1> events_;
};
}  // namespace

// Each candidate runs once untimed (its module loads, the clocks settle),
// then RunTimer::kRuns times. With beta = 0 the call's own output takes the
// candidates' results (the chosen one overwrites them next); with beta ≠ 0
// the output is also an input (a gradient being accumulated), so the
// candidates write into a borrowed buffer of the same extent instead. When
// that cannot be allocated the shape keeps the heuristic's first choice.
// The fastest later candidate replaces the first choice only if it is
// kSwitchMargin faster in that round and again when the two are timed
// alternately (three rounds each, medians), which also gives the times the
// summary reports.
void LtGemm::time_candidates(Plan& plan, const Call& call, cudaStream_t stream) {
  plan.timed = true;
  BorrowedDeviceBytes borrowed(call.beta != 0.0f ? call.c_span_bytes : 0, stream);
  void* out = call.c;
  if (call.beta != 0.0f) {
    if (borrowed.get() == nullptr) {
      untimed_ = "a shape kept the heuristic's first algorithm untimed: no " +
                 std::to_string(call.c_span_bytes >> 20) + " MiB scratch output to time its candidates on (" +
                 cudaGetErrorString(borrowed.status()) + ")";
      plan.candidates.clear();
      return;
    }
    out = borrowed.get();
    TRAINBENCH_CUDA_CHECK(cudaMemsetAsync(out, 0, call.c_span_bytes, stream));
  }
  auto launcher = [&](const cublasLtMatmulAlgo_t& algo) {
    return [&, algo] {
      return cublasLtMatmul(handle_, plan.matmul, &call.alpha, call.b, plan.b, call.a, plan.a,
                            &call.beta, out, plan.c, out, plan.c, &algo, workspace_.get(),
                            workspace_.bytes(), stream);
    };
  };
  RunTimer timer;
  size_t best = 0;
  float first_ms = 0, best_ms = 0;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const auto launch = launcher(plan.candidates[i]);
    if (const cublasStatus_t status = launch(); status != CUBLAS_STATUS_SUCCESS) {
      // The first choice is what every untimed run uses: it must run. A later
      // candidate the library declines at launch is skipped, and any launch
      // error it left is cleared so the next kernel's check is not blamed.
      if (i == 0) check_cublas(status, "cublasLtMatmul with the heuristic's first algorithm", __FILE__, __LINE__);
      (void)cudaGetLastError();
      continue;
    }
    const float ms = timer.median_ms(launch, stream);
    if (i == 0) first_ms = best_ms = ms;
    if (ms < best_ms) {
      best = i;
      best_ms = ms;
    }
  }
  plan.first_choice_ms = plan.chosen_ms = first_ms;
  if (best != 0 && best_ms < first_ms * (1.0f - kSwitchMargin)) {
    const auto first_launch = launcher(plan.candidates[0]), best_launch = launcher(plan.candidates[best]);
    float first_rounds[3], best_rounds[3];
    for (int round = 0; round < 3; ++round) {
      first_rounds[round] = timer.median_ms(first_launch, stream);
      best_rounds[round] = timer.median_ms(best_launch, stream);
    }
    std::nth_element(first_rounds, first_rounds + 1, first_rounds + 3);
    std::nth_element(best_rounds, best_rounds + 1, best_rounds + 3);
    plan.first_choice_ms = plan.chosen_ms = first_rounds[1];
    if (best_rounds[1] < first_rounds[1] * (1.0f - kSwitchMargin)) {
      plan.algo = plan.candidates[best];
      plan.chosen_ms = best_rounds[1];
    }
  }
  plan.candidates.clear();
}

GemmTuning LtGemm::tuning() const {
  GemmTuning t;
  t.untimed = untimed_;
  for (const auto& [key, plan] : plans_) {
    // A shape met only uncounted (the ceiling's calibration) is not the run's.
    if (plan.calls == 0) continue;
    if (plan.single_candidate) ++t.single_candidate;
    if (!plan.timed || plan.chosen_ms <= 0) continue;
    ++t.shapes;
    if (plan.chosen_ms < plan.first_choice_ms) ++t.changed;
    t.first_choice_seconds += 1e-3 * plan.first_choice_ms * static_cast<double>(plan.calls);
    t.chosen_seconds += 1e-3 * plan.chosen_ms * static_cast<double>(plan.calls);
  }
  return t;
}

double measure_lt_gemm_flops(LtGemm& gemm, int64_t m, int64_t n, int64_t k, double seconds,
                             cudaStream_t stream) {
  const int64_t ldc = padded_leading_dimension(n);
  // The operands are not in the engine's memory plan (5.4 GB at Llama 3's LM
  // head): a GPU the run has nearly filled gets no ceiling, not an exit.
  size_t free_bytes = 0, total_bytes = 0;
  TRAINBENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (sizeof(__nv_bfloat16) * static_cast<size_t>(m * k + n * k + m * ldc) > free_bytes) return 0.0;
  DeviceBuffer<__nv_bfloat16> input(static_cast<size_t>(m * k));
  DeviceBuffer<__nv_bfloat16> weight(static_cast<size_t>(n * k));
  DeviceBuffer<__nv_bfloat16> out(static_cast<size_t>(m * ldc));
  // Random operands: on zeros an H200 ran the same product about 13% faster
  // than on real data, which would inflate the ceiling MFU is reported against.
  fill_uniform_bf16(input.get(), m * k, 1.0f, 0x5eed1u, stream);
  fill_uniform_bf16(weight.get(), n * k, 1.0f, 0x5eed2u, stream);
  auto one_gemm = [&] {
    gemm.gemm(false, true, m, n, k, 1.0f, input.get(), k, weight.get(), k, 0.0f, out.get(), ldc,
              GemmOutput::kBf16, stream);
  };
  // Its repeats are not the run's calls (LtGemm::tuning weighs shapes by those).
  struct CallsUncounted {
    LtGemm& gemm;
    const bool was_counting;
    explicit CallsUncounted(LtGemm& g) : gemm(g), was_counting(g.counting_calls()) { gemm.count_calls(false); }
    ~CallsUncounted() { gemm.count_calls(was_counting); }
  } uncounted{gemm};
  TimingEvents<2> events;  // start, stop
  double best = 0.0;
  one_gemm();  // warm-up: algorithm selection, clocks
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int repeats = 0;
  do {
    // Ten GEMMs per timing so launch gaps do not count against the GPU.
    constexpr int kBatch = 10;
    TRAINBENCH_CUDA_CHECK(cudaEventRecord(events[0], stream));
    for (int i = 0; i < kBatch; ++i) one_gemm();
    TRAINBENCH_CUDA_CHECK(cudaEventRecord(events[1], stream));
    TRAINBENCH_CUDA_CHECK(cudaEventSynchronize(events[1]));
    best = std::max(best, kBatch * 2.0 * static_cast<double>(m) * n * k / (1e-3 * events.elapsed_ms(0, 1)));
    ++repeats;
  } while (std::chrono::steady_clock::now() < deadline || repeats < 3);
  return best;
}

}  // namespace trainbench::cuda
