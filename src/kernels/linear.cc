#include "kernels/linear.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kernel_table.h"

namespace latent::kernels {

void Linear(const float* x, int64_t m, const WeightRef& w, float* y) {
  thread_local std::vector<float> scratch;  // the reference kernel's k floats
  if (static_cast<int64_t>(scratch.size()) < w.k) scratch.resize(w.k);
  BestKernels().linear(x, m, w, y, scratch.data());
}

std::unique_ptr<uint8_t[]> PackForLinear(const KernelTable& table, WeightRef& w, int64_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  const int64_t size = table.packed_bytes != nullptr ? table.packed_bytes(w) : 0;
  if (size <= 0) return nullptr;
  constexpr int64_t kAlign = 64;  // whole cache lines per tile row
  auto buffer = std::make_unique_for_overwrite<uint8_t[]>(size + kAlign);
  const auto address = reinterpret_cast<uintptr_t>(buffer.get());
  uint8_t* aligned = buffer.get() + (kAlign - address % kAlign) % kAlign;
  table.pack(w, aligned);
  w.packed = aligned;
  w.packed_row0 = 0;
  if (bytes != nullptr) *bytes = size;
  return buffer;
}

}  // namespace latent::kernels
