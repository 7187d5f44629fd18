#include "checkpoint/background_writer.h"

#include <chrono>  // wait_idle's blocked time

namespace trainbench {

BackgroundWriter::BackgroundWriter() : thread_([this] { run(); }) {}

BackgroundWriter::~BackgroundWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
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

double BackgroundWriter::wait_idle() {
  const auto begin = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !running_job_; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
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
