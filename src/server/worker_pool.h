// A fixed set of threads running jobs from a bounded queue: the HTTP server's event loop hands
// them the work that can take a while (JSON parsing, tokenization, the chat template, /metrics,
// which waits for the engine's step), so the loop itself never blocks. When the queue is full,
// TryPost() says so at once and the caller answers 503 instead of queueing without bound.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/error.h"

namespace latent::server {

class WorkerPool {
 public:
  // Throws latent::Error when the system refuses a thread, once those already started have
  // stopped (an exception leaving joinable threads behind would end the process).
  WorkerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
    try {
      for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
    } catch (const std::system_error& e) {
      const size_t started = threads_.size();
      Stop();
      Fail("cannot start ", threads, " HTTP worker threads (--http-threads): the system refused "
           "thread ", started + 1, ": ", e.what());
    }
  }
  ~WorkerPool() { Stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `job` unless max_queued jobs already wait for a thread.
  bool TryPost(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (jobs_.size() >= max_queued_) return false;
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
    return true;
  }

 private:
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  void Run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // Stopping, and nothing left.
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();  // Jobs catch their own exceptions.
    }
  }

  const size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace latent::server
