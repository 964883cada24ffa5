#include "tensor/dtype.h"

#include <cmath>

namespace latent {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kF8E4M3:
    case DType::kF8E8M0:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E8M0: return "F8_E8M0";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kBool: return "BOOL";
  }
  return "?";
}

std::optional<DType> ParseSafetensorsDType(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E8M0,
                  DType::kI8, DType::kU8, DType::kI32, DType::kI64, DType::kBool}) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

std::string_view SupportedSafetensorsDTypes() {
  return "F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I32, I64, BOOL";
}

float F16ToF32(uint16_t v) {
  uint32_t sign = (v >> 15) & 1u;
  uint32_t exp = (v >> 10) & 0x1fu;
  uint32_t mant = v & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    magnitude = mant ? BitsToF32(0x7fc00000u) : BitsToF32(0x7f800000u);
  } else {
    magnitude = BitsToF32(((exp + 112u) << 23) | (mant << 13));
  }
  return sign ? -magnitude : magnitude;
}

float F8E4M3ToF32(uint8_t v) {
  uint32_t sign = (v >> 7) & 1u;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t mant = v & 0x7u;
  float magnitude;
  if (exp == 0xf && mant == 0x7) {
    magnitude = BitsToF32(0x7fc00000u);  // e4m3fn has NaN but no infinity.
  } else if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -9);
  } else {
    magnitude = BitsToF32(((exp + 120u) << 23) | (mant << 20));
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace latent
