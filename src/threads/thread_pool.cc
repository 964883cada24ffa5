// The spin is bounded (LATENT_SPIN_US, default 300 us) for the workers and for the caller waiting
// on their last chunks alike: an idle pool, or one whose worker lost its core, sleeps on a futex
// instead of taking CPU from the process's other threads (on 2 cores, the HTTP threads).
#include "threads/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "base/env.h"
#include "base/error.h"

namespace latent::threads {
namespace {

using Clock = std::chrono::steady_clock;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

// LATENT_SPIN_US, read once by CheckThreadEnvironment (main) or the first pool; at most 10 s.
constexpr int64_t kMaxSpinMicros = 10'000'000;
int64_t SpinMicros() {
  static const int64_t micros = EnvInteger("LATENT_SPIN_US", 0, kMaxSpinMicros).value_or(300);
  return micros;
}

// The CPUs this process may run on, in order (its affinity mask; containers often restrict it).
std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// LATENT_PIN_THREADS=1: pool thread i runs on the i-th allowed CPU only (the thread that issues
// ParallelFor calls is thread 0). Off by default: on a machine shared with other work, a pinned
// thread waits for its core instead of moving to an idle one.
bool PinThreads() {
  static const bool pin = [] {
    return EnvBool("LATENT_PIN_THREADS").value_or(false);
  }();
  return pin;
}

void PinCurrentThread(int index) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus[static_cast<size_t>(index) % cpus.size()], &set);
  sched_setaffinity(0, sizeof(set), &set);  // Best effort: a refusal leaves the thread free.
}

class Pool {
 public:
  // Throws latent::Error when the system refuses a thread (ulimit -u, memory for the stacks),
  // once the workers already started have been stopped: an exception escaping with joinable
  // threads in workers_ would end the process in std::terminate.
  explicit Pool(int num_threads) : num_threads_(std::max(1, num_threads)) {
    // The settings the workers read, read here first: a bad one throws on this thread.
    SpinMicros();
    PinThreads();
    // Workers start with the process-directed stop and user signals blocked (a thread inherits
    // its creator's mask): a SIGTERM meant for the server's signal thread (server.cc,
    // HandleSignals) would otherwise be delivered to a worker of a pool made before it, and kill
    // the process. Only these: a profiler's SIGPROF, the faults a worker raises, a debugger's
    // SIGTRAP must still reach the worker.
    sigset_t stops, before;
    sigemptyset(&stops);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&stops, sig);
    pthread_sigmask(SIG_BLOCK, &stops, &before);
    try {
      for (int i = 1; i < num_threads_; ++i) {
        workers_.emplace_back([this, i] {
          if (PinThreads()) PinCurrentThread(i);
          WorkerLoop();
        });
      }
    } catch (const std::system_error& e) {
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      const size_t started = workers_.size() + 1;
      StopWorkers();
      Fail("cannot start ", num_threads_, " compute threads (--threads or LATENT_THREADS): the "
           "system refused thread ", started + 1, ": ", e.what());
    }
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
  }

  ~Pool() { StopWorkers(); }

  int num_threads() const { return num_threads_; }

  void ParallelFor(int64_t n, int64_t grain, RangeFn fn) {
    FlushDenormals();
    thread_local bool pinned = false;
    if (!pinned && PinThreads()) {
      PinCurrentThread(0);
      pinned = true;
    }
    if (n <= 0) return;
    grain = std::max<int64_t>(1, grain);
    const int64_t chunks = (n + grain - 1) / grain;
    bool expected = false;
    if (num_threads_ == 1 || chunks == 1 ||
        !busy_.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
      for (int64_t c = 0; c < chunks; ++c) fn(c * grain, std::min(n, (c + 1) * grain));
      return;
    }
    // Publish the job: parameters first, then the tagged chunk counter, then the epoch. The
    // parameters are stored with release (plain stores on x86) so that a worker that reads one of
    // them reads the closing of the previous job too (see RunChunks).
    n_.store(n, std::memory_order_release);
    grain_.store(grain, std::memory_order_release);
    chunks_.store(chunks, std::memory_order_release);
    fn_obj_.store(&fn, std::memory_order_release);
    done_.store(0, std::memory_order_release);
    failed_.store(false, std::memory_order_release);
    const uint32_t gen = epoch_.load(std::memory_order_relaxed) + 1;
    state_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
    epoch_.store(gen, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) FutexWakeAll(&epoch_);

    RunChunks(gen);
    WaitForChunks(chunks);
    // Close the job before the next one reuses the parameters. A worker may have read this
    // job's state (every chunk claimed) and then the next job's chunk count, larger: without the
    // close, its claim on this job's state would succeed, run a chunk with mixed parameters and
    // count it done for the next job, which would then return while a chunk still runs.
    state_.store((static_cast<uint64_t>(gen) << 32) | kClosed, std::memory_order_seq_cst);
    std::exception_ptr error;
    if (failed_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      error = std::exchange(error_, nullptr);
    }
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
  }

 private:
  // Claims and runs chunks of job `gen` until none is left (or a newer job replaced it).
  void RunChunks(uint32_t gen) {
    uint64_t s = state_.load(std::memory_order_acquire);
    while (true) {
      if (static_cast<uint32_t>(s >> 32) != gen) return;
      const int64_t index = static_cast<int64_t>(s & 0xffffffffu);
      if (index == kClosed) return;
      // Acquire: if these read a later job's parameters, this thread also sees this job closed
      // (the caller closes it before it publishes the next), and the claim below fails.
      const int64_t chunks = chunks_.load(std::memory_order_acquire);
      if (index >= chunks) return;
      const int64_t n = n_.load(std::memory_order_acquire);
      const int64_t grain = grain_.load(std::memory_order_acquire);
      const RangeFn* fn = fn_obj_.load(std::memory_order_acquire);
      // The claim succeeds only while job `gen` is current and open, so the parameters read
      // above are that job's (a new job is published only after this one is done and closed).
      if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;
      }
      RunChunk(*fn, index * grain, std::min(n, (index + 1) * grain));
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == chunks) {
        // The job's last chunk: wake the caller if it went to sleep waiting for it.
        finished_.fetch_add(1, std::memory_order_seq_cst);
        if (caller_sleeping_.load(std::memory_order_seq_cst)) FutexWakeAll(&finished_);
      }
      s = state_.load(std::memory_order_acquire);
    }
  }

  // One chunk, unless one of the job's chunks has thrown: the first exception is kept for the
  // caller, who rethrows it once every chunk is done and the job closed (an exception leaving a
  // worker's loop would end the process; one leaving the caller's RunChunks would leave the job
  // open and the pool busy for good). The chunks after it are skipped: the job has failed.
  void RunChunk(const RangeFn& fn, int64_t begin, int64_t end) {
    if (failed_.load(std::memory_order_acquire)) return;
    try {
      fn(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_release);
    }
  }

  // The caller, its own chunks done, waits for those still running on workers: it spins for a
  // while (they usually end within microseconds), then sleeps until the last one ends. Spinning
  // or yielding for longer would burn a core whenever a worker lost its own to another thread
  // (on a small machine, the HTTP threads that need it).
  void WaitForChunks(int64_t chunks) {
    if (done_.load(std::memory_order_acquire) >= chunks) return;
    const auto deadline = Clock::now() + std::chrono::microseconds(SpinMicros());
    for (int i = 0; done_.load(std::memory_order_acquire) < chunks; ++i) {
      CpuRelax();
      if ((i & 255) == 255 && Clock::now() >= deadline) break;
    }
    // The worker finishing the last chunk bumps finished_ after its done_ increment and then
    // reads caller_sleeping_; all seq_cst, so either it sees the flag, or this thread's read of
    // done_ below sees its increment (or the futex word already changed and the wait returns).
    while (done_.load(std::memory_order_acquire) < chunks) {
      const uint32_t finished = finished_.load(std::memory_order_seq_cst);
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      if (done_.load(std::memory_order_seq_cst) < chunks) FutexWait(&finished_, finished);
      caller_sleeping_.store(false, std::memory_order_seq_cst);
    }
  }

  void WorkerLoop() {
    FlushDenormals();
    // The epoch the pool started with: a worker that starts late must still see every job
    // published (and a stop requested) before it ran.
    uint32_t seen = 0;
    while (true) {
      uint32_t now = epoch_.load(std::memory_order_acquire);
      if (now == seen) {
        // Spin for a while: the next kernel usually comes within microseconds.
        const auto deadline = Clock::now() + std::chrono::microseconds(SpinMicros());
        for (int i = 0;; ++i) {
          CpuRelax();
          now = epoch_.load(std::memory_order_acquire);
          if (now != seen) break;
          if ((i & 255) == 255 && Clock::now() >= deadline) break;
        }
        while (now == seen) {
          sleepers_.fetch_add(1, std::memory_order_seq_cst);
          if (epoch_.load(std::memory_order_seq_cst) == seen) FutexWait(&epoch_, seen);
          sleepers_.fetch_sub(1, std::memory_order_seq_cst);
          now = epoch_.load(std::memory_order_acquire);
        }
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = now;
      RunChunks(now);
    }
  }

  void StopWorkers() {
    stop_.store(true, std::memory_order_seq_cst);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    FutexWakeAll(&epoch_);
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  // The chunk index of a finished job's state: no claim on it can succeed.
  static constexpr int64_t kClosed = 0xffffffff;

  const int num_threads_;
  std::vector<std::thread> workers_;
  alignas(64) std::atomic<uint64_t> state_{0};  // job generation << 32 | next chunk
  alignas(64) std::atomic<uint32_t> epoch_{0};  // futex word: the current job generation
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<int64_t> done_{0};  // chunks finished of the current job
  std::atomic<uint32_t> finished_{0};           // futex word: jobs whose last chunk has ended
  std::atomic<bool> caller_sleeping_{false};    // the caller sleeps on finished_
  alignas(64) std::atomic<bool> busy_{false};
  std::atomic<int64_t> n_{0}, grain_{1}, chunks_{0};
  std::atomic<const RangeFn*> fn_obj_{nullptr};
  std::atomic<bool> failed_{false};  // a chunk of the current job has thrown
  std::mutex error_mutex_;
  std::exception_ptr error_;  // its exception (error_mutex_)
};

std::mutex g_pool_mutex;
std::atomic<Pool*> g_pool{nullptr};

int DefaultThreads() {
  // 0 means the default, as --threads 0 does.
  const std::optional<int64_t> n = EnvInteger("LATENT_THREADS", 0, kMaxThreads);
  if (n.has_value() && *n > 0) return static_cast<int>(*n);
  // The CPUs the affinity mask allows (a container's share), else what the hardware has.
  const size_t allowed = AllowedCpus().size();
  const size_t cpus = allowed > 0 ? allowed : std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::min<size_t>(cpus, kMaxThreads));
}

Pool& GlobalPool() {
  Pool* pool = g_pool.load(std::memory_order_acquire);
  if (pool != nullptr) return *pool;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  pool = g_pool.load(std::memory_order_relaxed);
  if (pool == nullptr) {
    pool = new Pool(DefaultThreads());  // Lives until exit: workers never outlive it.
    g_pool.store(pool, std::memory_order_release);
  }
  return *pool;
}

}  // namespace

void CheckThreadEnvironment() {
  DefaultThreads();
  SpinMicros();
  PinThreads();
}

void SetNumThreads(int n) {
  if (n > kMaxThreads) Fail("--threads ", n, ": at most ", kMaxThreads, " compute threads");
  if (n <= 0) n = DefaultThreads();
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  Pool* old = g_pool.load(std::memory_order_relaxed);
  if (old != nullptr && old->num_threads() == n) return;
  g_pool.store(new Pool(n), std::memory_order_release);
  delete old;  // Joins its workers; no job may be running (see the header).
}

int NumThreads() { return GlobalPool().num_threads(); }

void ParallelFor(int64_t n, int64_t grain, RangeFn fn) { GlobalPool().ParallelFor(n, grain, fn); }

void ParallelRows(int64_t rows, int64_t row_items, RangeFn fn) {
  const int64_t items = std::max<int64_t>(1, row_items);
  ParallelFor(rows, (kMinRowChunkItems + items - 1) / items, fn);
}

void FlushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
  constexpr unsigned kFtzDaz = 0x8040;  // FTZ (bit 15) | DAZ (bit 6)
  const unsigned csr = _mm_getcsr();
  if ((csr & kFtzDaz) != kFtzDaz) _mm_setcsr(csr | kFtzDaz);
#endif
}

}  // namespace latent::threads
