// A bench buffer that hands every call to a separate host buffer (the stand-in
// for a GPU's, comm/bench_buffer.h): the base of the tests' buffers that change
// what one call does (a fault after a read back, a slow copy) and keep the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/bench_buffer.h"

namespace trainbench::testing {

class ForwardingBenchBuffer : public BenchBuffer {
 public:
  explicit ForwardingBenchBuffer(int64_t count) : inner_(make_separate_host_bench_buffer(count)) {}
  float* data() override { return inner_->data(); }
  std::vector<float>& host() override { return inner_->host(); }
  void to_collective() override { inner_->to_collective(); }
  void to_host() override { inner_->to_host(); }
  void zero() override { inner_->zero(); }

 private:
  std::unique_ptr<BenchBuffer> inner_;
};

}  // namespace trainbench::testing
