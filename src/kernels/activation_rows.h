// The W8A8 kernels' quantization of a call's activation rows (avx2/linear_w8a8_avx2.cc,
// avx512/linear_w8a8_vnni.cc, avx512/w8a8_packed_call.h): buffers, rounding mode and threads.
// Plain C++; include it before an ISA's target region.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "threads/thread_pool.h"

namespace latent::kernels {

// x [m, k] quantized row by row into this thread's buffers, returned as {q [m, kp], scales [m]}
// (valid until this thread's next call of the same kernel): scales[i] = quantize_row(x + i * k,
// q + i * kp), which writes the row's kp values. q holds max(m, buffer_rows) rows (AMX loads
// whole 16-row tiles); the caller writes those past m. On the thread pool, in chunks of about 16 Ki
// values, when the call holds at least 64 Ki of them, else on the caller; denormals flushed on
// the caller as on the pool's threads, so a tiny row's scale never depends on the batch. A row's
// result depends on that row alone.
template <class T, class F>
std::pair<const T*, const float*> QuantizeActivationRows(const float* x, int64_t m, int64_t k,
                                                         int64_t kp, F&& quantize_row,
                                                         int64_t buffer_rows = 0) {
  threads::FlushDenormals();
  thread_local std::vector<T> q;         // [max(m, buffer_rows), kp]
  thread_local std::vector<float> scale;  // [m]
  const int64_t q_size = std::max(m, buffer_rows) * kp;
  if (static_cast<int64_t>(q.size()) < q_size) q.resize(q_size);
  if (static_cast<int64_t>(scale.size()) < m) scale.resize(m);
  T* q_data = q.data();
  float* scale_data = scale.data();
  const auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) scale_data[i] = quantize_row(x + i * k, q_data + i * kp);
  };
  if (threads::NumThreads() > 1 && m * k >= (int64_t{1} << 16)) {
    threads::ParallelFor(m, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(k, 1)),
                         rows);
  } else {
    rows(0, m);
  }
  return {q_data, scale_data};
}

}  // namespace latent::kernels
