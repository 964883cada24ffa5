// Reads the engine's metrics for /metrics without making the HTTP side wait for a step.
//
// Engine::Metrics() reads between two steps, so it waits for the step in progress, and under load
// the engine thread takes its step lock again at once, so a reader can wait for many steps. Here
// one thread of its own makes that call; a /metrics request waits at most `max_wait` for figures
// read after it arrived and otherwise answers with the latest ones (at most a few steps old).
// When the engine is idle the figures are always fresh (tests compare them exactly).
#pragma once

#include <chrono>
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

  // The engine's figures: fresh if they come within `max_wait`, else the latest read (waiting
  // for the first read if there is none yet).
  engine::EngineMetrics Read(const engine::Engine& engine, std::chrono::milliseconds max_wait) {
    std::unique_lock<std::mutex> lock(mutex_);
    engine_ = &engine;
    const uint64_t ticket = ++requested_;
    wake_.notify_all();
    done_wake_.wait_for(lock, max_wait, [&] { return read_ >= ticket; });
    done_wake_.wait(lock, [&] { return latest_.has_value(); });
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
