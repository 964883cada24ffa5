#include "kernels/weight_ref.h"

#include <string>

#include "base/error.h"

namespace latent::kernels {

const char* PackedLayoutName(PackedLayout layout) {
  switch (layout) {
    case PackedLayout::kNone: return "none";
    case PackedLayout::kBf16Tiles: return "bf16-tiles";
    case PackedLayout::kFp8Tiles: return "fp8-tiles";
    case PackedLayout::kFp8Avx2Blocks: return "fp8-avx2-blocks";
    case PackedLayout::kW8A8Avx2Blocks: return "w8a8-avx2-blocks";
    case PackedLayout::kW8A8QuadTiles: return "w8a8-quad-tiles";
  }
  return "unknown";
}

namespace {

[[noreturn]] void FailLayout(const WeightRef& w, PackedLayout reads) {
  const std::string has = w.packed == nullptr
                              ? std::string("with no packed copy")
                              : StrCat("packed as ", PackedLayoutName(w.packed_layout));
  Fail("a kernel that reads packed weights in the ", PackedLayoutName(reads),
       " layout was given a [", w.n, ", ", w.k, "] ", DTypeName(w.dtype), " weight ", has,
       " (kernels/weight_ref.h, PackedLayout)");
}

}  // namespace

bool WeightRef::ReadsPacked(PackedLayout reads) const {
  if (packed == nullptr) return false;
  if (packed_layout != reads) FailLayout(*this, reads);
  return true;
}

void WeightRef::ExpectPacked(PackedLayout reads) const {
  if (!ReadsPacked(reads)) FailLayout(*this, reads);
}

WeightRef WeightRef::Rows(int64_t row, int64_t rows) const {
  WeightRef sub = *this;
  sub.n = rows;
  sub.data = static_cast<const uint8_t*>(data) + row * k * DTypeSize(dtype);
  sub.scale_row0 = scale_row0 + row;    // scales stay those of the full matrix
  sub.packed_row0 = packed_row0 + row;  // and so does the packed copy, in its layout
  return sub;
}

}  // namespace latent::kernels
