// The tile-packed layout of a bf16 weight W [n, k] for bf16 compute, written once at load
// (KernelTable::pack) and read by both bf16 kernels that stream packed weights: AMX
// (amx/linear_amx.cc: one 1 KiB tile is TDPBF16PS's B operand) and the vdpbf16ps packed kernel
// (avx512/linear_bf16_packed.cc: one k-pair of 16 rows is one zmm).
//
//   packed [ceil(n / 16) blocks][ceil(k / 32) tiles][16 k-pairs][16 rows][2 bf16]
//
// Block b holds rows 16 b .. 16 b + 15 over all of k, its tiles in k order (contiguous: a
// block's weights stream front to back); values past n and past k are zero.
//
// fp8 e4m3 weights with block scales, under bf16 compute, pack the same way with one-byte codes
// (for the vdpbf16ps kernel over them, avx512/linear_fp8_packed.cc, and AMX's TDPBF16PS one,
// amx/linear_fp8_amx.cc):
//
//   packed [ceil(n / 16) blocks][ceil(k / 32) tiles][16 k-pairs][16 rows][2 codes]
//
// 512-byte tiles, one k-pair of 16 rows a 32-byte line, except that inside each 64 bytes (two
// lines) the codes are interleaved: byte 16 L + i holds the first line's code 8 L + i and byte
// 16 L + 8 + i the second's (L < 4, i < 8), the order the kernel's per-lane byte unpacking
// undoes. The block scales stay where they are. (The AVX2 fp8 kernel packs fp8 weights in a
// layout of its own, one k's 16 codes per line: avx2/linear_fp8_packed_avx2.cc.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"
#include "threads/thread_pool.h"

#include "kernels/kernel_table.h"
#include "kernels/weight_ref.h"

namespace latent::kernels {

inline constexpr int64_t kPackRows = 16;        // weight rows per block (a tile's columns)
inline constexpr int64_t kPackK = 32;           // bf16 values of k per tile (16 pairs)
inline constexpr int64_t kPackTileBytes = 1024;  // 16 k-pairs x 16 rows x 2 bf16 x 2 bytes
inline constexpr int64_t kPackFp8TileBytes = 512;  // 16 k-pairs x 16 rows x 2 codes
// W8A8 weights on vpdpbusd (avx512/linear_w8a8_vnni_packed.cc) pack in the same 1 KiB tiles of
// 16 rows x 64 bytes, 4 int8 values of k where the bf16 layout has a pair: 64 values per tile.
inline constexpr int64_t kW8A8PackK = 64;

// Bytes of w's packed copy: ceil(n / 16) * ceil(k / 32) KiB for bf16 weights with
// bf16_activations, else 0 (the kernels read every other weight as stored).
int64_t TilePackedBytes(const WeightRef& w);
// Whether w packs in the layout above (TilePackedBytes(w) > 0).
inline bool TilePacks(const WeightRef& w) { return TilePackedBytes(w) > 0; }
// Writes w (rows as stored at w.data, any alignment) in the layout above to `out`
// (TilePackedBytes(w) bytes), over the thread pool. Plain C++, on any CPU: the reference for the
// AVX-512 packing the tables load with (avx512::TilePackAvx512, the same bytes).
void TilePack(const WeightRef& w, void* out);

// True when a kernel reads w from its packed copy in the layout above (else it takes the table's
// unpacked linear); throws when w's copy is in another layout (WeightRef::ReadsPacked).
bool ReadsTilePacked(const WeightRef& w);

// The same for fp8 weights (the layout with one-byte codes above; Fp8PacksFit also decides which
// fp8 weights the AVX2 kernel packs in its own): those with bf16_activations whose scale blocks
// hold whole pairs of lines (block_k % 4 == 0; DeepSeek's 128 x 128, and any unscaled fp8), else
// 0 bytes / false (they stay on the table's unpacked fp8 linear).
bool Fp8PacksFit(const WeightRef& w);
int64_t Fp8TilePackedBytes(const WeightRef& w);
void Fp8TilePack(const WeightRef& w, void* out);  // reference of avx512::Fp8TilePackAvx512

// Splits the packed blocks of w's view (rows packed_row0 .. packed_row0 + n) among the thread
// pool for an m-row product and calls blocks(b0, b1) with packed block indices. Threads take whole
// groups of 4 blocks (64 outputs), at least ~128 KiB of weights each and about 4 chunks per
// thread; small products run on the calling thread. The split never changes a block's sums, so
// every packed kernel stays batch and thread-count invariant.
void ForEachPackedBlockRange(const WeightRef& w, int64_t m, threads::RangeFn blocks);

// One packed linear call, y[m, n] = x . W^T over w's packed copy (bf16 weights), for the kernels
// that stream whole column blocks: the vdpbf16ps one (X = bf16 bits) and the AVX2 one (X =
// bf16-rounded f32); the W8A8 vpdpbusd kernel derives its call from it (X = u8 activations
// padded with 128, 64 values of k per tile), and the AMX kernels read x as bytes (X = uint8_t:
// 64 bytes per tile of k, bf16 pairs or u8 quads; kp still counts the values, and x holds whole
// 16-row tiles past m for batches, and rows of an odd number of tiles: amx/tile_blocks.h). Plain
// C++: include this header outside any target region.
template <class X>
struct PackedCall {
  const X* x;             // [m, kp] the kernel's activation rows, zero past k (AMX: see above)
  int64_t m, kp, tiles;   // tiles = kp / 32 (W8A8: kp / 64)
  const uint8_t* packed;  // block 0 of the packed copy
  int64_t block_bytes;    // one block of 16 weight rows: tiles * 1 KiB (fp8: tiles * 512; the
                          // AVX2 fp8 kernel sets its own layout's)
  int64_t row0;           // packed row of the view's row 0
  int64_t n;              // the view's rows: y's columns
  float* y;               // [m, n]
};

// Batches: rows per row block of a packed linear, a multiple of 4 and at least 64, whose
// activations (kp values of x_bytes each per row) fill at most 4 MiB. The kernels take a block of
// rows past every column block before the next: the activations stay in the last-level cache,
// where one pass over all the rows per column block would stream a large batch's from memory
// each time (a 1,800-row chunk's 11k-wide down projection: 80 MB of f32 activations).
inline int64_t PackedRowBlock(int64_t kp, int64_t x_bytes) {
  constexpr int64_t kRowBlockBytes = int64_t{4} << 20;
  constexpr int64_t kMinRowBlock = 64;
  return std::max<int64_t>(kMinRowBlock, kRowBlockBytes / (kp * x_bytes) / 4 * 4);
}

// Every field but x, from w (a view of a packed weight) and the call's m and y; tile_k values of
// k per 1 KiB tile (kW8A8PackK for the W8A8 layout).
template <class X>
PackedCall<X> MakePackedCall(const WeightRef& w, int64_t m, float* y, int64_t tile_k = kPackK) {
  PackedCall<X> j;
  j.x = nullptr;
  j.tiles = (w.k + tile_k - 1) / tile_k;
  j.kp = j.tiles * tile_k;
  j.m = m;
  j.packed = static_cast<const uint8_t*>(w.packed);
  j.block_bytes = j.tiles * kPackTileBytes;
  j.row0 = w.packed_row0;
  j.n = w.n;
  j.y = y;
  return j;
}

// Copies acc (rows of ld floats, column 0 = packed row 16 b) for activation rows [m0, m0 + rows)
// and `blocks` column blocks into j.y, keeping the packed rows inside the view (any of the packed
// calls below: PackedCall, Fp8PackedCall).
template <class Call>
void CopyPackedOut(const Call& j, const float* acc, int64_t ld, int64_t m0, int64_t rows,
                   int64_t b, int64_t blocks) {
  const int64_t first = std::max<int64_t>(b * kPackRows, j.row0);
  const int64_t last = std::min<int64_t>((b + blocks) * kPackRows, j.row0 + j.n);
  if (last <= first) return;
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(j.y + (m0 + r) * j.n + (first - j.row0), acc + r * ld + (first - b * kPackRows),
                static_cast<size_t>(last - first) * sizeof(float));
  }
}

// The same for the fp8 packed linears (vdpbf16ps, TDPBF16PS, AVX2 FMAs): the call's shape and
// the weight's block scales.
template <class X>
struct Fp8PackedCall : PackedCall<X> {
  int64_t k;  // the weight's columns (kp pads them with zeros to whole tiles)
  // Block scales of the full matrix (null: unscaled): s(view row r, k block kb) at
  // ((scale_row0 + r) / block_n) * scale_cols + kb.
  const void* scale;
  DType scale_dtype;
  int64_t scale_row0, block_n, block_k, scale_cols;
};

// Every field but x, from w (a view of a packed fp8 weight: 512-byte tiles; the AVX2 fp8 kernel
// then sets block_bytes for its layout) and the call's m, y.
template <class X>
Fp8PackedCall<X> MakeFp8PackedCall(const WeightRef& w, int64_t m, float* y) {
  Fp8PackedCall<X> j;
  static_cast<PackedCall<X>&>(j) = MakePackedCall<X>(w, m, y);
  j.block_bytes = j.tiles * kPackFp8TileBytes;
  j.k = w.k;
  j.scale = w.scale;
  j.scale_dtype = w.scale_dtype;
  j.scale_row0 = w.scale_row0;
  j.block_n = w.block_n;
  j.block_k = w.block_k;
  j.scale_cols = w.scale != nullptr ? (w.k + w.block_k - 1) / w.block_k : 0;
  return j;
}

// The index into j.scale (scaled weights only) of the block scale of packed row `packed_row` in
// k block kb, or -1 when that row lies outside the view (its outputs are never copied out).
template <class X>
int64_t Fp8ScaleIndex(const Fp8PackedCall<X>& j, int64_t packed_row, int64_t kb) {
  const int64_t row = packed_row - j.row0;  // the view's row
  if (row < 0 || row >= j.n) return -1;
  return (j.scale_row0 + row) / j.block_n * j.scale_cols + kb;
}

// The end of the fp8 segment that starts at pair p0: `max_pairs` on, the end of its scale block
// or the end of k, whichever comes first.
template <class X>
int64_t Fp8SegmentEnd(const Fp8PackedCall<X>& j, int64_t p0, int64_t max_pairs) {
  int64_t end = std::min(j.kp / 2, p0 + max_pairs);
  if (j.scale != nullptr) end = std::min(end, (2 * p0 / j.block_k + 1) * j.block_k / 2);
  return end;
}

// Makes `Packed` (y[m, n] = bf16(x) . W^T from w's packed copy) t's linear for the weights it
// reads packed (ReadsTilePacked), keeping the linear t had for every other weight, and the tile
// layout above, written by `Pack` (TilePack or a vector version of it), t's packing for the
// weights it fits, keeping t's packing for the others (the W8A8 layout of the AVX-512 tables). One
// instantiation per packed kernel: its fallback lives in a static, as KernelTable holds plain
// function pointers.
template <void (*Packed)(const float* x, int64_t m, const WeightRef& w, float* y),
          void (*Pack)(const WeightRef& w, void* out)>
void UseTilePackedLinear(KernelTable& t) {
  using LinearFn = void (*)(const float*, int64_t, const WeightRef&, float*, float*);
  static LinearFn unpacked = nullptr;  // the table's linear before this call
  unpacked = t.linear;
  t.linear = [](const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
    if (ReadsTilePacked(w)) {
      Packed(x, m, w, y);
    } else {
      unpacked(x, m, w, y, scratch);
    }
  };
  // t's packing for the other weights stays.
  AddPacking<TilePacks, TilePackedBytes, Pack, PackedLayout::kBf16Tiles, Packed>(t);
}

// Makes `Packed` (y[m, n] = bf16(x) . W^T from the packed codes) t's linear for the fp8 weights it
// reads packed (Fp8PacksFit and a copy in kLayout), and t's packing for the fp8 weights that fit:
// `Bytes` bytes written by `Pack` in kLayout (the fp8 tile layout: Fp8TilePackedBytes and
// Fp8TilePack or a vector version of it; the AVX2 kernel's own blocks); every other weight keeps
// t's linear and packing as they were. kSlot tells the tables that use it apart (the fallbacks
// live in statics, one set per instantiation).
template <void (*Packed)(const float* x, int64_t m, const WeightRef& w, float* y),
          int64_t (*Bytes)(const WeightRef& w), void (*Pack)(const WeightRef& w, void* out),
          PackedLayout kLayout, int kSlot>
void UseFp8PackedLinear(KernelTable& t) {
  using LinearFn = void (*)(const float*, int64_t, const WeightRef&, float*, float*);
  static LinearFn other_linear = nullptr;  // t's linear before this call
  other_linear = t.linear;
  t.linear = [](const float* x, int64_t m, const WeightRef& w, float* y, float* scratch) {
    if (Fp8PacksFit(w) && w.ReadsPacked(kLayout)) {
      Packed(x, m, w, y);
    } else {
      other_linear(x, m, w, y, scratch);
    }
  };
  AddPacking<Fp8PacksFit, Bytes, Pack, kLayout, kSlot>(t);
}

}  // namespace latent::kernels
