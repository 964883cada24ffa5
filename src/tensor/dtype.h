// Element types latent reads from checkpoints and keeps in caches, with scalar conversions.
// The conversions are the exact ones (round-to-nearest-even into bf16); kernels vectorise them.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace latent {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // float8_e4m3fn: no infinities, max 448.
  kF8E8M0,  // float8_e8m0fnu: a power-of-two scale (DeepSeek V3.2 ue8m0 scales).
  kI8,
  kU8,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType dtype);
// Parses a safetensors dtype string; nullopt when it is not one latent reads.
std::optional<DType> ParseSafetensorsDType(std::string_view name);
// The dtypes ParseSafetensorsDType accepts, for error messages.
std::string_view SupportedSafetensorsDTypes();

inline float BitsToF32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float BF16ToF32(uint16_t v) { return BitsToF32(static_cast<uint32_t>(v) << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t F32ToBF16(float f) {
  uint32_t bits = F32ToBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// Rounds an f32 value to the nearest bf16 and back: what a bf16 tensor would hold.
inline float RoundToBF16(float f) { return BF16ToF32(F32ToBF16(f)); }

float F16ToF32(uint16_t v);
float F8E4M3ToF32(uint8_t v);
inline float F8E8M0ToF32(uint8_t v) {
  // 2^(v - 127); 0xff is NaN.
  if (v == 0xff) return BitsToF32(0x7fc00000u);
  if (v == 0) return BitsToF32(0x00400000u);  // 2^-127 is subnormal in f32.
  return BitsToF32(static_cast<uint32_t>(v) << 23);
}

// Element i of a tensor of `dtype` at `base`, as f32 (for scalars: norm weights, block scales,
// the reference kernels). Mapped tensors need not be aligned, hence memcpy. 0 for other dtypes.
inline float LoadAsF32(const void* base, DType dtype, int64_t i) {
  const uint8_t* p = static_cast<const uint8_t*>(base);
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return dtype == DType::kBF16 ? BF16ToF32(v) : F16ToF32(v);
    }
    case DType::kF8E4M3: return F8E4M3ToF32(p[i]);
    case DType::kF8E8M0: return F8E8M0ToF32(p[i]);
    case DType::kI8: return static_cast<float>(static_cast<int8_t>(p[i]));
    default: return 0.0f;
  }
}

}  // namespace latent
