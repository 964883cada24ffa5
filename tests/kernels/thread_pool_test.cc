#include "threads/thread_pool.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace latent::threads {
namespace {

// Each thread that runs a chunk: the CPUs its affinity mask allows.
std::set<std::vector<int>> MasksOfPoolThreads(int threads) {
  SetNumThreads(threads);
  std::mutex mutex;
  std::set<std::vector<int>> masks;
  ParallelFor(64, 1, [&](int64_t, int64_t) {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof(set), &set);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    // Hold the chunk a moment so that every thread takes some.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    while (std::chrono::steady_clock::now() < until) {
    }
    std::lock_guard<std::mutex> lock(mutex);
    masks.insert(cpus);
  });
  return masks;
}

// LATENT_PIN_THREADS=1 is read once per process, so the pinned pool runs in a child process.
TEST(ThreadPoolDeathTest, PinnedThreadsRunOnOneCpuEach) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child re-runs this test from the start
  setenv("LATENT_PIN_THREADS", "1", 1);  // (with "0" the child fails: its masks hold every CPU)
  EXPECT_EXIT(
      {
        const std::set<std::vector<int>> masks = MasksOfPoolThreads(2);
        bool ok = !masks.empty() && masks.size() <= 2;
        for (const auto& m : masks) ok = ok && m.size() == 1;
        std::exit(ok ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
  unsetenv("LATENT_PIN_THREADS");
}

TEST(ThreadPool, EveryIndexRunsOnce) {
  const int saved = NumThreads();
  for (int threads : {1, 2, 3}) {
    SetNumThreads(threads);
    EXPECT_EQ(NumThreads(), threads);
    for (int64_t n : {0, 1, 5, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          EXPECT_LE(end - begin, grain);
          EXPECT_EQ(begin % grain, 0);
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << n << " " << grain << " " << i;
      }
    }
  }
  SetNumThreads(saved);
}

// ParallelRows: whole rows per chunk, at least kMinRowChunkItems items each (one row where a row
// is wider), every row once; zero rows run nothing, zero-item rows count as one item.
TEST(ThreadPool, ParallelRowsCutsWholeRowsOfAtLeastTheMinimum) {
  const int saved = NumThreads();
  SetNumThreads(2);
  struct Case {
    int64_t rows, row_items, grain;  // the chunk size in rows the case must get
  };
  for (const Case& c : {Case{0, 100, 0}, Case{3, 1000, 33}, Case{1000, 1000, 33},
                        Case{7, 0, kMinRowChunkItems}, Case{5, 100000, 1},
                        Case{100, kMinRowChunkItems, 1}, Case{100, kMinRowChunkItems - 1, 2}}) {
    std::vector<std::atomic<int>> hits(c.rows);
    std::atomic<int64_t> calls{0};
    ParallelRows(c.rows, c.row_items, [&](int64_t begin, int64_t end) {
      calls.fetch_add(1);
      EXPECT_EQ(begin % c.grain, 0) << c.rows << " x " << c.row_items;
      EXPECT_EQ(end - begin, std::min(c.grain, c.rows - begin)) << c.rows << " x " << c.row_items;
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < c.rows; ++i) ASSERT_EQ(hits[i].load(), 1) << c.rows << " " << i;
    EXPECT_EQ(calls.load(), c.rows == 0 ? 0 : (c.rows + c.grain - 1) / c.grain);
  }
  SetNumThreads(saved);
}

// Back-to-back jobs whose chunk counts alternate between few and many: a worker that lags
// behind one job must never claim a chunk of it with the next job's parameters, nor make the
// next job return before all of its chunks have run (that once crashed the expanded attention,
// which runs a packing job and then a larger one). Each job counts its own chunks in an object
// that lives only until its ParallelFor returns; a chunk that ran late or twice shows up as a
// wrong count, in this job or in the next one (the same stack slot).
TEST(ThreadPool, BackToBackJobsNeverOverlap) {
  const int saved = NumThreads();
  for (int threads : {2, 3}) {
    SetNumThreads(threads);
    for (int iter = 0; iter < 100000; ++iter) {
      const int64_t n = iter % 2 == 0 ? 2 : 3 + iter % 61;
      struct Job {
        std::atomic<int64_t> running{0}, finished{0};
      } job;
      ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
        job.running.fetch_add(1);
        job.finished.fetch_add(end - begin);
        job.running.fetch_sub(1);
      });
      ASSERT_EQ(job.finished.load(), n) << "threads " << threads << " job " << iter;
      ASSERT_EQ(job.running.load(), 0) << "threads " << threads << " job " << iter;
    }
  }
  SetNumThreads(saved);
}

TEST(ThreadPool, NestedAndConcurrentCallsRunInline) {
  const int saved = NumThreads();
  SetNumThreads(2);
  std::atomic<int64_t> total{0};
  auto job = [&] {
    for (int rep = 0; rep < 200; ++rep) {
      ParallelFor(8, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          ParallelFor(10, 2, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
        }
      });
    }
  };
  std::thread other(job);
  job();
  other.join();
  EXPECT_EQ(total.load(), 2 * 200 * 8 * 10);
  SetNumThreads(saved);
}

// A chunk that throws, on a worker or on the caller, or inside a nested call, fails its job:
// ParallelFor rethrows the first exception on the caller, and the pool then runs jobs on all its
// threads again (a worker's exception used to end the process, and the caller's left the pool
// busy, so that every later job ran on the caller alone).
TEST(ThreadPool, AChunksExceptionReachesTheCallerAndThePoolGoesOn) {
  const int saved = NumThreads();
  SetNumThreads(2);
  for (int rep = 0; rep < 50; ++rep) {
    // Every chunk throws: the caller's and the worker's alike; one exception comes out.
    EXPECT_THROW(ParallelFor(64, 1, [](int64_t, int64_t) { throw std::runtime_error("each"); }),
                 std::runtime_error);
    try {
      ParallelFor(16, 1, [](int64_t b, int64_t) {
        if (b == 7) throw std::runtime_error("chunk 7");
      });
      ADD_FAILURE() << "chunk 7's exception was not rethrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk 7");
    }
    try {  // from a nested call, which runs inline inside the outer chunk
      ParallelFor(4, 1, [](int64_t, int64_t) {
        ParallelFor(4, 1, [](int64_t b, int64_t) {
          if (b == 2) throw std::runtime_error("inner");
        });
      });
      ADD_FAILURE() << "the inner chunk's exception was not rethrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "inner");
    }
  }
  // A worker's chunk throws for sure: the caller holds chunk 0 until the worker, which alone can
  // take chunk 1, has thrown from it.
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> worker_threw{false};
  try {
    ParallelFor(2, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) {
        worker_threw = true;
        throw std::runtime_error("worker");
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!worker_threw.load() && std::chrono::steady_clock::now() < deadline) {
      }
    });
    ADD_FAILURE() << "the worker's exception was not rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "worker");
  }
  EXPECT_TRUE(worker_threw.load());
  // Two chunks that wait for each other: they meet only if the pool runs them on two threads.
  std::atomic<int> started{0};
  std::atomic<bool> met{true};
  ParallelFor(2, 1, [&](int64_t, int64_t) {
    started.fetch_add(1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        met = false;
        return;
      }
    }
  });
  EXPECT_TRUE(met) << "the pool stayed busy after a failed job";
  SetNumThreads(saved);
}

TEST(ThreadPool, WorkersFlushDenormals) {
  const int saved = NumThreads();
  SetNumThreads(2);
  std::atomic<int> flushed{0};
  for (int rep = 0; rep < 100; ++rep) {
    ParallelFor(2, 1, [&](int64_t, int64_t) {
      volatile float tiny = 1e-38f;
      volatile float r = tiny * 0.01f;  // denormal result: flushed to zero under FTZ
      if (r == 0.0f) flushed.fetch_add(1);
    });
  }
  EXPECT_EQ(flushed.load(), 200);
  SetNumThreads(saved);
}

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The caller, its own chunk done, waits for a worker's slow chunk asleep, not spinning: on a
// 2-core machine a spinning caller takes the core that the server's HTTP threads need.
TEST(ThreadPool, CallerSleepsWhileAWorkerRunsALongChunk) {
  const int saved = NumThreads();
  SetNumThreads(2);
  const auto caller = std::this_thread::get_id();
  double caller_cpu = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::atomic<bool> worker_started{false};
    const double before = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
    ParallelFor(2, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != caller) {
        worker_started = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        return;
      }
      // The caller's chunk: let the worker claim the other one (polling asleep, not spinning).
      for (int i = 0; i < 1000 && !worker_started; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    caller_cpu += CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - before;
    ASSERT_TRUE(worker_started.load()) << "the worker never took a chunk";
  }
  // 5 waits of 40 ms: a spinning or yielding caller burns ~200 ms; a sleeping one, the bounded
  // spin (300 us) and the wake-ups.
  EXPECT_LT(caller_cpu, 0.05) << "caller CPU seconds over 5 waits of 40 ms";
  SetNumThreads(saved);
}

// Between jobs the workers spin only briefly, then sleep: an idle pool costs no CPU.
TEST(ThreadPool, IdleWorkersSleep) {
  const int saved = NumThreads();
  SetNumThreads(3);
  std::atomic<int64_t> sum{0};
  ParallelFor(64, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  ASSERT_EQ(sum.load(), 64);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin
  const double before = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double used = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - before;
  EXPECT_LT(used, 0.02) << "CPU seconds used by an idle pool of 3 threads in 200 ms";
  SetNumThreads(saved);
}

}  // namespace
}  // namespace latent::threads
