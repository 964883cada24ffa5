// The packings against the layout kernels/tile_pack.h documents, element by element: whole blocks
// and tiles, and the ends of n and k (zeros past them), including an odd k (a half pair). Each
// packer this CPU runs is checked: the plain C++ reference (TilePack, Fp8TilePack) and the `pack`
// of every kernel table that packs (the AVX-512 version in the packed and AMX tables, the AVX2 one
// in the AVX2 packed table). The AVX2 table packs fp8 weights in a layout of its own
// (avx2::Fp8Avx2Pack), checked against its own description; the AVX512-VNNI tables pack W8A8
// weights in one more, checked the same way.
#include "kernels/tile_pack.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

namespace latent::kernels {
namespace {

using PackFn = void (*)(const WeightRef& w, void* out);

// (name, packer) for the reference and for each table on this CPU that packs in its layout (the
// AVX2 packed table: for bf16 weights only).
std::vector<std::pair<std::string, PackFn>> Packers(PackFn reference) {
  std::vector<std::pair<std::string, PackFn>> packers = {{"reference", reference}};
  const bool fp8 = reference == Fp8TilePack;
  const std::pair<const char*, const KernelTable*> tables[] = {
      {"packed table", Bf16PackedKernels()},
      {"amx table", AmxKernels()},
      {"avx2 packed table", fp8 ? nullptr : Avx2PackedKernels()}};
  for (const auto& [name, table] : tables) {
    if (table != nullptr && table->pack != nullptr) packers.emplace_back(name, table->pack);
  }
  return packers;
}

// An fp8 weight [n, k] under bf16 compute over w's bytes from w[1] (an odd address) with one
// 128 x 128 block scale.
WeightRef Fp8ComputeWeight(const std::vector<uint8_t>& w, int64_t n, int64_t k,
                           const float* scale) {
  WeightRef ref{w.data() + 1, DType::kF8E4M3, n, k};
  ref.scale = scale;
  ref.block_n = 128;
  ref.block_k = 128;
  ref.bf16_activations = true;
  return ref;
}

// packed [ceil(n / 16)][ceil(k / 32)][16 k-pairs][16 rows][2] of bf16 bits, zero past n and k.
std::vector<uint16_t> ReferencePack(const std::vector<uint16_t>& w, int64_t n, int64_t k) {
  const int64_t tiles = (k + kPackK - 1) / kPackK, blocks = (n + kPackRows - 1) / kPackRows;
  std::vector<uint16_t> out(blocks * tiles * kPackTileBytes / 2, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t b = r / kPackRows, j = r % kPackRows, t = c / kPackK, p = (c % kPackK) / 2;
      out[((b * tiles + t) * (kPackK / 2) + p) * kPackRows * 2 + j * 2 + c % 2] = w[r * k + c];
    }
  }
  return out;
}

TEST(TilePack, WritesTheDocumentedLayout) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> bits(1, 0xffff);
  const int64_t shapes[][2] = {{16, 32}, {32, 64}, {48, 1024}, {17, 33}, {5, 7},  {64, 100},
                               {33, 2048}, {1, 1}, {100, 31}, {40, 4113}, {16, 2}, {3, 63}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[0], k = shape[1];
    // Stored one byte off an aligned address, as a mapped checkpoint's tensor may be.
    std::vector<uint8_t> storage(n * k * 2 + 1);
    std::vector<uint16_t> w(n * k);
    for (uint16_t& v : w) v = static_cast<uint16_t>(bits(rng));
    std::memcpy(storage.data() + 1, w.data(), w.size() * 2);
    WeightRef ref{storage.data() + 1, DType::kBF16, n, k};
    ref.bf16_activations = true;
    const std::vector<uint16_t> expected = ReferencePack(w, n, k);
    ASSERT_EQ(TilePackedBytes(ref), static_cast<int64_t>(expected.size() * 2));
    for (const auto& [name, pack] : Packers(TilePack)) {
      std::vector<uint16_t> got(expected.size(), 0xabcd);  // garbage: every byte must be written
      pack(ref, got.data());
      EXPECT_EQ(got, expected) << name << ": n " << n << " k " << k;
    }
  }
}

// The fp8 layout: the same positions with one-byte codes (512-byte tiles), each two lines'
// codes interleaved by 8.
TEST(TilePack, WritesTheFp8LayoutWithOneByteCodes) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> bits(1, 0xff);
  const int64_t shapes[][2] = {{16, 32}, {48, 1024}, {17, 33}, {5, 7},   {100, 31},
                               {1, 1},   {40, 4113}, {16, 2},  {3, 63}, {33, 96}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[0], k = shape[1];
    const int64_t tiles = (k + kPackK - 1) / kPackK, blocks = (n + kPackRows - 1) / kPackRows;
    std::vector<uint8_t> w(n * k + 1);
    for (uint8_t& v : w) v = static_cast<uint8_t>(bits(rng));
    std::vector<uint8_t> expected(blocks * tiles * kPackFp8TileBytes, 0);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const int64_t b = r / kPackRows, j = r % kPackRows, t = c / kPackK, p = (c % kPackK) / 2;
        // Position in its line, then the interleave of each two lines.
        const int64_t line = (b * tiles + t) * (kPackK / 2) + p, at = j * 2 + c % 2;
        const int64_t lane = at / 8, i = at % 8;
        expected[(line / 2) * 64 + 16 * lane + 8 * (line % 2) + i] = w[1 + r * k + c];
      }
    }
    const float scale = 1.0f;
    const WeightRef ref = Fp8ComputeWeight(w, n, k, &scale);
    ASSERT_EQ(Fp8TilePackedBytes(ref), static_cast<int64_t>(expected.size()));
    for (const auto& [name, pack] : Packers(Fp8TilePack)) {
      std::vector<uint8_t> got(expected.size(), 0xab);  // garbage: every byte must be written
      pack(ref, got.data());
      EXPECT_EQ(got, expected) << name << ": n " << n << " k " << k;
    }
  }
}

// The AVX2 table's fp8 layout: per block of 16 rows a 32-byte header (bit r of its first uint16:
// row r holds a NaN code, 0x7f or 0xff) and then [kp][16 rows] codes, zero past n and k. Shapes
// with whole 16 x 16 squares (the transposing path) and without (the code-by-code one).
TEST(TilePack, Avx2WritesItsFp8LayoutWithTheNanRows) {
  const KernelTable* table = Avx2PackedKernels();
  if (table == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> bits(0, 0xff);
  const int64_t shapes[][2] = {{16, 32},  {48, 1024}, {17, 33}, {5, 7},  {100, 31},
                               {1, 1},    {40, 4113}, {16, 2},  {3, 63}, {33, 96},
                               {32, 160}, {16, 48}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[0], k = shape[1];
    const int64_t kp = (k + kPackK - 1) / kPackK * kPackK, blocks = (n + kPackRows - 1) / kPackRows;
    const int64_t block_bytes = 32 + kp * kPackRows;
    std::vector<uint8_t> w(n * k + 1);
    for (uint8_t& v : w) {
      v = static_cast<uint8_t>(bits(rng));
      if ((v & 0x7f) == 0x7f) v ^= 1;  // NaN codes only where placed below
    }
    // A NaN code in every third row, at a column that moves along k (both signs).
    for (int64_t r = 0; r < n; r += 3) w[1 + r * k + (r * 7) % k] = r % 2 == 0 ? 0x7f : 0xff;
    std::vector<uint8_t> expected(blocks * block_bytes, 0);
    for (int64_t r = 0; r < n; ++r) {
      uint8_t* block = expected.data() + r / kPackRows * block_bytes;
      if (r % 3 == 0) block[(r % kPackRows) / 8] |= static_cast<uint8_t>(1 << (r % 8));
      for (int64_t c = 0; c < k; ++c) block[32 + c * kPackRows + r % kPackRows] = w[1 + r * k + c];
    }
    const float scale = 1.0f;
    const WeightRef ref = Fp8ComputeWeight(w, n, k, &scale);
    ASSERT_EQ(table->packed_bytes(ref), static_cast<int64_t>(expected.size()));
    std::vector<uint8_t> got(expected.size(), 0xab);  // garbage: every byte must be written
    table->pack(ref, got.data());
    EXPECT_EQ(got, expected) << "n " << n << " k " << k;
  }
}

// The W8A8 layout of the tables with AVX512-VNNI (avx512/linear_w8a8_vnni_packed.cc): the bf16
// layout's 1 KiB tiles with 4 int8 values of k per row where bf16 has a pair,
// packed [ceil(n / 16)][ceil(k / 64)][16 k-quads][16 rows][4], zero past n and k. Every such table
// packs it, the bf16 packed and AMX tables too (their bf16 packing chains to it).
TEST(TilePack, W8A8WritesTheVnniLayout) {
  if (!Avx512HasW8A8Vnni()) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> bits(0, 0xff);
  const int64_t shapes[][2] = {{16, 64}, {48, 1024}, {17, 65}, {5, 7},  {100, 31},
                               {1, 1},   {40, 4113}, {16, 2},  {3, 63}, {33, 130}};
  for (const auto& shape : shapes) {
    const int64_t n = shape[0], k = shape[1];
    const int64_t tiles = (k + kW8A8PackK - 1) / kW8A8PackK;
    const int64_t blocks = (n + kPackRows - 1) / kPackRows;
    std::vector<uint8_t> w(n * k + 1);  // the weight from w[1]: an odd address
    for (uint8_t& v : w) v = static_cast<uint8_t>(bits(rng));
    std::vector<uint8_t> expected(blocks * tiles * kPackTileBytes, 0);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const int64_t b = r / kPackRows, t = c / kW8A8PackK, quad = (c % kW8A8PackK) / 4;
        expected[((b * tiles + t) * kPackRows + quad) * 64 + (r % kPackRows) * 4 + c % 4] =
            w[1 + r * k + c];
      }
    }
    const std::vector<float> scales(n, 1.0f);
    const std::vector<int32_t> sums(n, 0);
    WeightRef ref{w.data() + 1, DType::kI8, n, k};
    ref.scale = scales.data();
    ref.scale_dtype = DType::kF32;
    ref.block_n = 1;
    ref.block_k = k;
    ref.row_sums = sums.data();
    const std::pair<const char*, const KernelTable*> tables[] = {
        {"avx512 table", Avx512Kernels()}, {"packed table", Bf16PackedKernels()},
        {"amx table", AmxKernels()}};
    for (const auto& [name, table] : tables) {
      if (table == nullptr) continue;
      ASSERT_EQ(table->packed_bytes(ref), static_cast<int64_t>(expected.size())) << name;
      std::vector<uint8_t> got(expected.size(), 0xab);  // garbage: every byte must be written
      table->pack(ref, got.data());
      EXPECT_EQ(got, expected) << name << ": n " << n << " k " << k;
    }
  }
}

}  // namespace
}  // namespace latent::kernels
