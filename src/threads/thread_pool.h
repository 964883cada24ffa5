// A small persistent thread pool for the compute kernels: the calling thread plus N - 1
// workers that spin for a while after each job (a decode step runs hundreds of short kernels
// back to back; waking a sleeping thread costs tens of microseconds) and then sleep on a futex.
//
// ParallelFor(n, grain, fn) cuts [0, n) into chunks of `grain` (chunk boundaries depend only on
// n and grain) and hands them out dynamically; the caller runs chunks too and returns when all
// are done. Kernels must compute each output the same way whichever thread runs its chunk, so
// results never depend on the thread count or on timing. A ParallelFor issued while the pool is
// busy (from inside a chunk, or from a second thread) runs its chunks inline on the caller. A
// chunk that throws, on any thread, fails the job: the chunks not yet started are skipped, and
// ParallelFor rethrows the first exception on the caller once the others have ended, with the
// pool ready for the next job.
//
// Why not OpenMP: the same pool semantics (spin then sleep, inline when nested) with no
// -fopenmp on every library, and a process-wide thread count that also applies to jobs started
// from threads other than main (the server's engine thread).
//
// Every pool thread and every ParallelFor caller runs with FTZ/DAZ set (denormals flushed):
// denormal operands slow AVX-512 code down by orders of magnitude, and all threads must round
// alike.
#pragma once

#include <cstdint>
#include <type_traits>

namespace latent::threads {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)`.
class RangeFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& f)  // NOLINT: implicit, like std::function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* obj, int64_t begin, int64_t end) {
          (*static_cast<std::remove_reference_t<F>*>(obj))(begin, end);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// Sets the process-wide thread count (the caller included); n <= 0 means the default. Call it at
// start-up (the CLI's --threads), not while kernels run. The default: LATENT_THREADS, else the
// CPUs the process's affinity mask allows (LATENT_THREADS=0 too). LATENT_PIN_THREADS=1 pins
// thread i to the i-th of those CPUs (the thread issuing ParallelFor is thread 0).
// Throws latent::Error for n > kMaxThreads, for a bad LATENT_THREADS (not an integer from 0 to
// kMaxThreads) and when the system refuses a thread, with the workers started so far stopped.
void SetNumThreads(int n);
int NumThreads();
// A bound checked where the count is read, so a typo fails with a message rather than with
// thousands of threads; the default (the CPUs allowed) is capped at it too.
inline constexpr int kMaxThreads = 1024;

// Reads LATENT_THREADS, LATENT_SPIN_US and LATENT_PIN_THREADS, throwing latent::Error that names
// the variable when one is not a number in range (the CLI calls it at start-up: a bad setting
// must not fail the first request that runs a kernel).
void CheckThreadEnvironment();

// Runs fn(begin, end) over [0, n) in chunks of `grain` items on the process-wide pool.
void ParallelFor(int64_t n, int64_t grain, RangeFn fn);

// ParallelFor over `rows` independent rows of `row_items` items each (elementwise and row-wise
// ops: norms, activations, copies), in chunks of whole rows of at least kMinRowChunkItems items
// (one row per chunk where a row is wider): a decode step's few rows of a few thousand items stay
// on the caller, a prefill's hundreds are shared out. The caller computes each row the same way
// whichever chunk it falls in (the chunks' bounds depend only on rows and row_items).
inline constexpr int64_t kMinRowChunkItems = int64_t{1} << 15;
void ParallelRows(int64_t rows, int64_t row_items, RangeFn fn);

// Sets FTZ and DAZ in this thread's MXCSR (x86; no-op elsewhere).
void FlushDenormals();

}  // namespace latent::threads
