#include "kernels/linear.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstdint>
#include <memory>
#include <vector>

#include "base/error.h"
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
#if defined(__linux__)
  // Transparent huge pages for the copy's whole 2 MiB pages (asked before they are first
  // touched): a decode step streams every weight once, and with 4 KiB pages each 4 KiB of each
  // stream costs a TLB miss.
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (address + kHuge - 1) / kHuge * kHuge;
  const uintptr_t end = (address + static_cast<uintptr_t>(size + kAlign)) / kHuge * kHuge;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
  const PackedLayout layout = table.packed_layout(w);
  LATENT_CHECK(layout != PackedLayout::kNone);
  table.pack(w, aligned);
  w.packed = aligned;
  w.packed_row0 = 0;
  w.packed_layout = layout;
  if (bytes != nullptr) *bytes = size;
  return buffer;
}

}  // namespace latent::kernels
