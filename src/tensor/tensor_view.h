// TensorView: a non-owning, typed view of row-major memory (pointer + dtype + shape).
// Checkpoint tensors are viewed in place inside the mapped file, so data may be unaligned.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/error.h"
#include "tensor/dtype.h"

namespace latent {

inline constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    LATENT_CHECK(dims.size() <= kMaxDims);
    for (int64_t d : dims) Append(d);
  }
  void Append(int64_t d) {
    LATENT_CHECK(rank_ < kMaxDims);
    // A negative dimension is a wrapped product of sizes: never a shape to compare or allocate.
    LATENT_CHECK(d >= 0);
    dims_[rank_++] = d;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t NumElements() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& other) const {
    if (rank_ != other.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != other.dims_[i]) return false;
    return true;
  }
  // "[3, 4]"
  std::string ToString() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  int64_t NumElements() const { return shape.NumElements(); }
  size_t NumBytes() const { return static_cast<size_t>(NumElements()) * DTypeSize(dtype); }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data); }
};

}  // namespace latent
