#include "weights/finite_check.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/env.h"
#include "base/error.h"
#include "weights/checkpoint.h"

namespace latent::weights {
namespace {

// The bit patterns of one dtype: a value is NaN or infinite when (bits & exp_mask) == exp_mask
// (all exponent bits set); among those, NaN when also (bits & mantissa_mask) != 0.
template <typename Bits>
struct Pattern {
  Bits exp_mask;
  Bits mantissa_mask;
};

// Elements are read with memcpy: checkpoint data is mapped in place and may be unaligned.
template <typename Bits>
Bits Load(const uint8_t* p) {
  Bits v;
  std::memcpy(&v, p, sizeof(Bits));
  return v;
}

// Non-finite values among `count` elements from p, without a branch. Inlined where it is called
// with a whole block's constant count, which -O2's vectoriser then takes (its cheapest cost model
// wants no remainder loop); only a tensor's last, shorter block runs scalar.
template <typename Bits>
[[gnu::always_inline]] inline unsigned CountNonFinite(const uint8_t* p, int64_t count,
                                                      Pattern<Bits> pattern) {
  unsigned hits = 0;
  for (int64_t i = 0; i < count; ++i) {
    const Bits v = Load<Bits>(p + i * int64_t{sizeof(Bits)});
    hits += static_cast<unsigned>((v & pattern.exp_mask) == pattern.exp_mask);
  }
  return hits;
}

template <typename Bits>
std::optional<NonFinite> Scan(const uint8_t* data, int64_t n, Pattern<Bits> pattern) {
  // Blocks of 4096 elements counted without a branch; only a block with a hit is scanned again
  // for the details.
  constexpr int64_t kBlock = 4096;
  std::optional<NonFinite> found;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = start + kBlock < n ? start + kBlock : n;
    const uint8_t* block = data + start * int64_t{sizeof(Bits)};
    const unsigned hits = end - start == kBlock ? CountNonFinite(block, kBlock, pattern)
                                                : CountNonFinite(block, end - start, pattern);
    if (hits == 0) continue;
    if (!found) {
      found = NonFinite{};
      for (int64_t i = start; i < end; ++i) {
        const Bits v = Load<Bits>(data + i * int64_t{sizeof(Bits)});
        if ((v & pattern.exp_mask) == pattern.exp_mask) {
          found->first_index = i;
          found->first_is_nan = (v & pattern.mantissa_mask) != 0;
          break;
        }
      }
    }
    found->count += hits;
  }
  return found;
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
         dtype == DType::kF8E4M3 || dtype == DType::kF8E8M0;
}

}  // namespace

std::optional<NonFinite> FindNonFinite(const TensorView& tensor) {
  const uint8_t* data = tensor.bytes();
  const int64_t n = tensor.NumElements();
  switch (tensor.dtype) {
    case DType::kF32:
      return Scan<uint32_t>(data, n, {0x7f800000u, 0x007fffffu});
    case DType::kF16:
      return Scan<uint16_t>(data, n, {0x7c00, 0x03ff});
    case DType::kBF16:
      return Scan<uint16_t>(data, n, {0x7f80, 0x007f});
    case DType::kF8E4M3:
      // e4m3fn: S.1111.111 is NaN; S.1111.xxx otherwise are ordinary values up to 448.
      return Scan<uint8_t>(data, n, {0x7f, 0x7f});
    case DType::kF8E8M0:
      return Scan<uint8_t>(data, n, {0xff, 0xff});
    default:
      return std::nullopt;
  }
}

bool ShouldCheckWeights(const Checkpoint& ckpt) {
  if (const std::optional<bool> forced = EnvBool("LATENT_CHECK_WEIGHTS")) return *forced;
  uint64_t floating_bytes = 0;
  for (const auto& file : ckpt.files())
    for (const SafetensorsEntry& e : file->entries())
      if (IsFloating(e.dtype)) floating_bytes += e.end - e.begin;
  return floating_bytes <= kAutoCheckBytes;
}

void CheckFinite(const Checkpoint& ckpt) {
  for (const auto& file : ckpt.files()) {
    for (const SafetensorsEntry& e : file->entries()) {
      const std::optional<NonFinite> bad = FindNonFinite(file->View(e.name));
      if (!bad) continue;
      Fail(file->path(), ": tensor '", e.name, "' (", DTypeName(e.dtype), " ", e.shape.ToString(),
           ") holds ", bad->count, " NaN or infinite value", bad->count == 1 ? "" : "s",
           ", the first (", bad->first_is_nan ? "NaN" : "infinity", ") at element ",
           bad->first_index, ": the checkpoint is corrupt");
    }
  }
}

}  // namespace latent::weights
