#include "base/detached_threads.h"

#include <atomic>
#include <system_error>
#include <thread>

namespace latent {
namespace {

std::atomic<size_t>& Running() {
  static std::atomic<size_t>* running = new std::atomic<size_t>(0);  // Outlives the threads.
  return *running;
}

}  // namespace

void RunDetached(std::function<void()> work) {
  Running().fetch_add(1);
  try {
    std::thread([work = std::move(work)]() mutable {
      work();
      work = nullptr;  // What it captured goes while the thread still counts as running.
      Running().fetch_sub(1);
    }).detach();
  } catch (...) {
    Running().fetch_sub(1);
    throw;
  }
}

size_t DetachedThreadsRunning() { return Running().load(); }

}  // namespace latent
