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

}  // namespace latent
