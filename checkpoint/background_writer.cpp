#include "checkpoint/background_writer.h"

#include <algorithm>  // std::min
#include <chrono>     // wait_idle_for's limit

namespace trainbench {

BackgroundWriter::BackgroundWriter() : thread_([this] { run(); }) {}

BackgroundWriter::~BackgroundWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundWriter::submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  changed_.notify_all();
}

bool BackgroundWriter::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.empty() && !running_job_;
}

bool BackgroundWriter::wait_idle_for(double seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto idle = [this] { return queue_.empty() && !running_job_; };
  if (!(seconds > 0)) return idle();
  // Bounded before the conversion: a huge limit must not overflow the clock.
  const double bounded = std::min(seconds, 365.0 * 24 * 3600);
  return changed_.wait_for(lock, std::chrono::duration<double>(bounded), idle);
}

void BackgroundWriter::abandon() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.detach();
}

std::exception_ptr BackgroundWriter::take_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::exception_ptr error = error_;
  error_ = nullptr;
  return error;
}

void BackgroundWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    // Stopping still drains the queue: a submitted checkpoint is persisted.
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    running_job_ = true;
    lock.unlock();
    std::exception_ptr failure;
    try {
      job();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure && !error_) error_ = failure;
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace trainbench
