#include "trainer/gradient_sync.h"

#include <algorithm>  // std::max, std::min
#include <stdexcept>  // std::invalid_argument
#include <string>
#include <utility>    // std::move

namespace trainbench {

std::vector<GradientBucket> plan_gradient_buckets(int64_t elements, int64_t bucket_bytes,
                                                  int64_t first_bucket_bytes) {
  // The first is never larger than the others (a bucket_mb under 1 MiB).
  const int64_t first = std::max<int64_t>(
      1, std::min(first_bucket_bytes, bucket_bytes) / static_cast<int64_t>(sizeof(float)));
  const int64_t rest = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  std::vector<GradientBucket> buckets;
  for (int64_t end = elements; end > 0;) {
    const int64_t size = buckets.empty() ? first : rest;
    const int64_t begin = std::max<int64_t>(0, end - size);
    buckets.push_back({begin, end});
    end = begin;
  }
  return buckets;
}

std::vector<int64_t> gradient_bucket_bytes(int64_t elements, double bucket_mb, bool overlap) {
  const std::vector<GradientBucket> buckets =
      overlap ? plan_gradient_buckets(elements, static_cast<int64_t>(bucket_mb * (1 << 20)))
              : std::vector<GradientBucket>{{0, elements}};
  std::vector<int64_t> bytes;
  for (const GradientBucket& b : buckets) bytes.push_back((b.end - b.begin) * static_cast<int64_t>(sizeof(float)));
  return bytes;
}

GradientSync::GradientSync(Communicator& comm, float* gradients, int64_t elements,
                           int64_t bucket_bytes, bool overlap, RecordComputeEventFn record_compute_event)
    : comm_(comm),
      gradients_(gradients),
      overlap_(overlap),
      record_compute_event_(std::move(record_compute_event)),
      buckets_(overlap ? plan_gradient_buckets(elements, bucket_bytes)
                       : std::vector<GradientBucket>{{0, elements}}) {
  if (comm_.device_buffers() && !record_compute_event_)
    throw std::invalid_argument(std::string("GradientSync: the ") + comm_.backend_name() +
                                " backend reduces device buffers and needs the compute stream's events");
}

void GradientSync::on_gradients_ready(int64_t ready_from) {
  if (overlap_) start_buckets_ready_from(ready_from);
}

void GradientSync::start_buckets_ready_from(int64_t ready_from) {
  if (started_ == buckets_.size() || buckets_[started_].begin < ready_from) return;  // none ready
  if (comm_.device_buffers()) {
    // The gradients are enqueued, maybe not yet written: one event for the
    // buckets that became ready together, recorded now on the compute stream,
    // and the comm stream waits for it on the device (the host goes on).
    void* gradients_written = record_compute_event_();
    if (gradients_written != nullptr) comm_.wait_for_device_event(gradients_written);
  }
  while (started_ < buckets_.size() && buckets_[started_].begin >= ready_from) {
    const GradientBucket& b = buckets_[started_++];
    tickets_.push_back(comm_.start_all_reduce_sum(gradients_ + b.begin, b.end - b.begin));
  }
}

double GradientSync::finish() {
  // Whatever backward did not report, and everything when overlap is off.
  start_buckets_ready_from(0);
  double waited = 0;
  for (Communicator::Ticket ticket : tickets_) waited += comm_.wait(ticket);
  tickets_.clear();
  started_ = 0;
  return waited;
}

}  // namespace trainbench
