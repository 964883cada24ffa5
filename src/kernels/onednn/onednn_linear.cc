#include "kernels/onednn/onednn_linear.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "base/env.h"
#include "kernels/onednn/onednn_cache.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

// libgomp: the threading runtime of Debian's oneDNN build (DNNL_CPU_RUNTIME OMP), linked by name
// (src/kernels/CMakeLists.txt) and declared here, so that none of our sources needs -fopenmp.
extern "C" void omp_set_num_threads(int num_threads);

namespace latent::kernels::onednn {
namespace {

// Output columns per slice are a multiple of this: oneDNN's bf16 kernels block N by up to 64.
constexpr int64_t kSliceAlign = 64;
// Rows per oneDNN call. Primitives are cached per exact m (oneDNN 2.6's brgemm matmul has no
// run-time M; a run-time M falls back to gemm:jit), so longer calls go in chunks of this many
// rows: at most kMaxRows primitives per weight shape in a long-running server, for one more
// pass over a slice's weights (from cache or memory) per 512 rows.
constexpr int64_t kMaxRows = 512;

std::atomic<bool> g_unavailable{false};

// oneDNN's OpenMP team size is a per-thread setting: one thread here, the pool does the rest.
void SingleThreadedOnednn() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

// This thread's 64-byte-aligned oneDNN scratchpad of at least `bytes` (null for none).
void* Scratchpad(size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buffer;
  thread_local size_t size = 0;
  if (bytes > size) {
    size = (bytes + 63) / 64 * 64;
    buffer.reset(std::aligned_alloc(64, size));
  }
  return buffer.get();
}

// y[m, w.n] (rows ldy floats apart) = xb[m, w.k] . W^T on this thread. oneDNN writes a dense
// [m, w.n] (see GetMatmul), so a slice narrower than y goes through a per-thread buffer.
void RunSlice(const uint16_t* xb, int64_t m, const WeightRef& w, float* y, int64_t ldy) {
  SingleThreadedOnednn();
  const Matmul& mm = GetMatmul(m, w.n, w.k);
  const dnnl::memory& weights = GetPackedWeights(w, mm.weights);
  thread_local std::vector<float> slice_out;  // [m, w.n] when ldy != w.n
  float* out = y;
  if (ldy != w.n) {
    if (static_cast<int64_t>(slice_out.size()) < m * w.n) slice_out.resize(m * w.n);
    out = slice_out.data();
  }
  const dnnl::engine& engine = CpuEngine();
  thread_local dnnl::stream stream(engine);
  dnnl::memory src(mm.src, engine, const_cast<uint16_t*>(xb));  // only read
  dnnl::memory dst(mm.dst, engine, out);
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (mm.scratchpad_bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(mm.scratchpad, engine, Scratchpad(mm.scratchpad_bytes)));
  }
  mm.primitive.execute(stream, args);
  stream.wait();
  if (out != y) {
    for (int64_t i = 0; i < m; ++i) std::copy(out + i * w.n, out + (i + 1) * w.n, y + i * ldy);
  }
}

void (*g_fallback)(const float*, int64_t, const WeightRef&, float*, float*) = nullptr;

void LinearOrFallback(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
  if (w.dtype == DType::kBF16 && m >= MinRows() && Linear(x, m, w, y)) return;
  g_fallback(x, m, w, y, scratch);
}

}  // namespace

bool Linear(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (g_unavailable.load(std::memory_order_relaxed) || w.dtype != DType::kBF16 || w.k <= 0) {
    return false;
  }
  if (m <= 0 || w.n <= 0) return true;
  const int64_t n = w.n, k = w.k;
  const int64_t threads = threads::NumThreads();
  const int64_t width = ((n + threads - 1) / threads + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  const int64_t slices = (n + width - 1) / width;
  // Create the (at most four) matmuls here, where a failure can still fall back: thrown from a
  // pool chunk it would fail the whole call (threads::ParallelFor rethrows it on the caller).
  SingleThreadedOnednn();
  try {
    for (int64_t rows : {std::min(m, kMaxRows), (m - 1) % kMaxRows + 1}) {
      GetMatmul(rows, std::min(width, n), k);
      GetMatmul(rows, n - (slices - 1) * width, k);
    }
  } catch (const dnnl::error& e) {
    if (!g_unavailable.exchange(true)) {
      std::fprintf(stderr, "latent: LATENT_GEMM=onednn disabled, no oneDNN matmul: %s\n", e.what());
    }
    return false;
  }
  thread_local std::vector<uint16_t> rounded;  // [m, k] bf16
  if (static_cast<int64_t>(rounded.size()) < m * k) rounded.resize(m * k);
  uint16_t* xb = rounded.data();  // not `rounded` in the lambdas: that names each thread's own
  threads::ParallelFor(m, std::max<int64_t>(1, 32768 / k), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * k; i < r1 * k; ++i) xb[i] = F32ToBF16(x[i]);
  });
  threads::ParallelFor(slices, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t c0 = s * width;
      const WeightRef slice = w.Rows(c0, std::min(width, n - c0));
      for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {
        RunSlice(xb + r0 * k, std::min(kMaxRows, m - r0), slice, y + r0 * n + c0, n);
      }
    }
  });
  return true;
}

int64_t MinRows() {
  static const int64_t rows = [] {
    return EnvInteger("LATENT_GEMM_MIN_ROWS", 1, int64_t{1} << 40).value_or(32);
  }();
  return rows;
}

void FillOnednnLinear(KernelTable& table) {
  g_fallback = table.linear;
  table.linear = LinearOrFallback;
}

}  // namespace latent::kernels::onednn
