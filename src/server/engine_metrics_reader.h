// Reads the engine's metrics for /metrics on a thread of its own.
//
// Engine::Metrics() never waits for a step: it copies, under a small lock, the counters and the
// gauges the engine last published (at step boundaries and before a request's end is reported, so
// a client that got its last token and reads /metrics sees its request gone). Here one thread
// makes that call for every /metrics request waiting at the time, so however many arrive at once,
// they share one read.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/engine.h"

namespace latent::server {

class EngineMetricsReader {
 public:
  EngineMetricsReader() : thread_([this] { Run(); }) {}
  ~EngineMetricsReader() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  EngineMetricsReader(const EngineMetricsReader&) = delete;
  EngineMetricsReader& operator=(const EngineMetricsReader&) = delete;

  // The engine's figures, read after this call began.
  engine::EngineMetrics Read(const engine::Engine& engine) {
    std::unique_lock<std::mutex> lock(mutex_);
    engine_ = &engine;
    const uint64_t ticket = ++requested_;
    wake_.notify_all();
    done_wake_.wait(lock, [&] { return read_ >= ticket; });
    return *latest_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || requested_ > read_; });
      if (stop_) return;
      const uint64_t ticket = requested_;
      const engine::Engine* engine = engine_;
      lock.unlock();
      const engine::EngineMetrics m = engine->Metrics();
      lock.lock();
      latest_ = m;
      read_ = ticket;
      done_wake_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_wake_;
  const engine::Engine* engine_ = nullptr;
  uint64_t requested_ = 0, read_ = 0;
  std::optional<engine::EngineMetrics> latest_;
  bool stop_ = false;
  std::thread thread_;  // Last: starts once the rest is initialized.
};

}  // namespace latent::server
