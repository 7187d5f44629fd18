// GradientSync on a device-buffer communicator (NCCL), without a GPU: a fake
// communicator logs what the sync asks of it. Backward's readiness callback
// on a device means "the producing work is enqueued", so every all-reduce
// must be preceded by a comm-stream wait for a compute event recorded when its
// bucket became ready (or later), never earlier; host communicators get no
// events at all.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tests/support/one_rank_communicator.h"
#include "trainer/gradient_sync.h"

namespace trainbench {
namespace {

// One rank; every call is logged as a line, e.g. "start 900+100", "wait_event E1".
class LoggingCommunicator final : public testing::OneRankCommunicator {
 public:
  explicit LoggingCommunicator(bool device) : device_(device) {}
  std::vector<std::string> log;

  const char* backend_name() const override { return device_ ? "fake-device" : "fake-host"; }
  bool device_buffers() const override { return device_; }
  void all_reduce_sum(float*, int64_t) override { log.push_back("all_reduce_sum"); }
  Ticket start_all_reduce_sum(float* data, int64_t count) override {
    log.push_back("start " + std::to_string(data - base) + "+" + std::to_string(count));
    return next_ticket_++;
  }
  double wait(Ticket ticket) override {
    log.push_back("wait " + std::to_string(ticket));
    return 0.0;
  }
  void wait_for_device_event(void* event) override {
    log.push_back("wait_event E" + std::to_string(reinterpret_cast<intptr_t>(event)));
  }
  [[noreturn]] void abort(int, const std::string& message) override { throw std::runtime_error(message); }

  const float* base = nullptr;  // the gradient buffer: offsets in the log

 private:
  bool device_;
  Ticket next_ticket_ = 0;
};

constexpr int64_t kElements = 1000;
constexpr int64_t kBucketBytes = 100 * sizeof(float);  // 10 buckets of 100

struct Fixture {
  std::vector<float> gradients = std::vector<float>(kElements);
  LoggingCommunicator comm;
  intptr_t events_recorded = 0;
  explicit Fixture(bool device) : comm(device) { comm.base = gradients.data(); }
  // The engine's record_compute_event: event N is logged as "record EN".
  RecordComputeEventFn recorder() {
    return [this] {
      ++events_recorded;
      comm.log.push_back("record E" + std::to_string(events_recorded));
      return reinterpret_cast<void*>(events_recorded);
    };
  }
};

std::vector<std::string> starts(int64_t from_bucket, int64_t to_bucket) {
  std::vector<std::string> lines;
  for (int64_t b = from_bucket; b < to_bucket; ++b)
    lines.push_back("start " + std::to_string(kElements - 100 * (b + 1)) + "+100");
  return lines;
}

void append(std::vector<std::string>& to, const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

TEST(GradientSyncDevice, EachBatchOfReadyBucketsWaitsForAnEventRecordedThen) {
  Fixture f(/*device=*/true);
  GradientSync sync(f.comm, f.gradients.data(), kElements, kBucketBytes, /*overlap=*/true, f.recorder());
  ASSERT_EQ(sync.buckets().size(), 10u);
  for (int step = 0; step < 2; ++step) {  // the second step reuses the plan
    f.comm.log.clear();
    f.events_recorded = 0;
    sync.on_gradients_ready(950);  // bucket 0 is [900, 1000): not complete yet
    EXPECT_TRUE(f.comm.log.empty());
    sync.on_gradients_ready(850);  // bucket 0
    sync.on_gradients_ready(500);  // buckets 1..4
    sync.on_gradients_ready(0);    // buckets 5..9 (the end of backward)
    sync.finish();                 // nothing left to start: waits only
    std::vector<std::string> expected = {"record E1", "wait_event E1"};
    append(expected, starts(0, 1));
    append(expected, {"record E2", "wait_event E2"});
    append(expected, starts(1, 5));
    append(expected, {"record E3", "wait_event E3"});
    append(expected, starts(5, 10));
    for (int ticket = 0; ticket < 10; ++ticket) expected.push_back("wait " + std::to_string(10 * step + ticket));
    EXPECT_EQ(f.comm.log, expected) << "step " << step;
  }
}

TEST(GradientSyncDevice, OverlapOffRecordsOneEventAfterBackward) {
  Fixture f(/*device=*/true);
  GradientSync sync(f.comm, f.gradients.data(), kElements, kBucketBytes, /*overlap=*/false, f.recorder());
  sync.on_gradients_ready(500);
  sync.on_gradients_ready(0);
  EXPECT_TRUE(f.comm.log.empty());
  sync.finish();
  EXPECT_EQ(f.comm.log, (std::vector<std::string>{"record E1", "wait_event E1", "start 0+1000", "wait 0"}));
}

TEST(GradientSyncDevice, BucketsBackwardDidNotReportStartAtFinishAfterAFreshEvent) {
  Fixture f(/*device=*/true);
  GradientSync sync(f.comm, f.gradients.data(), kElements, kBucketBytes, /*overlap=*/true, f.recorder());
  sync.on_gradients_ready(850);  // bucket 0 only; backward reports nothing more
  sync.finish();
  std::vector<std::string> expected = {"record E1", "wait_event E1"};
  append(expected, starts(0, 1));
  append(expected, {"record E2", "wait_event E2"});
  append(expected, starts(1, 10));
  for (int ticket = 0; ticket < 10; ++ticket) expected.push_back("wait " + std::to_string(ticket));
  EXPECT_EQ(f.comm.log, expected);
}

TEST(GradientSyncDevice, ADeviceCommunicatorWithoutTheEventHookIsRefused) {
  Fixture f(/*device=*/true);
  EXPECT_THROW(GradientSync(f.comm, f.gradients.data(), kElements, kBucketBytes, true), std::invalid_argument);
}

TEST(GradientSyncHost, AHostCommunicatorRecordsNoEvents) {
  Fixture f(/*device=*/false);
  GradientSync sync(f.comm, f.gradients.data(), kElements, kBucketBytes, /*overlap=*/true, f.recorder());
  sync.on_gradients_ready(850);
  sync.on_gradients_ready(0);
  sync.finish();
  std::vector<std::string> expected = starts(0, 10);
  for (int ticket = 0; ticket < 10; ++ticket) expected.push_back("wait " + std::to_string(ticket));
  EXPECT_EQ(f.comm.log, expected);
  EXPECT_EQ(f.events_recorded, 0);
}

}  // namespace
}  // namespace trainbench
