// WeightRef: a raw view of one weight matrix [n, k] as stored in the checkpoint (f32, bf16, f16
// or fp8 e4m3 with block scales), or as quantized at load (int8 with per-row scales, see I8
// below). Kernels convert inside, so checkpoint weights are never copied at load.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace latent::kernels {

// The layout of a weight's packed copy (WeightRef::packed). The table that packs a weight names
// its layout (KernelTable::packed_layout), the loader keeps it beside the copy, and every kernel
// that reads a packed copy checks it first (WeightRef::ReadsPacked). A copy reaching a kernel
// written for another layout is a bug in latent that would otherwise go unseen: its bytes look
// like weights to any kernel, and a W8A8 weight's rows as stored are dropped once packed.
enum class PackedLayout : uint8_t {
  kNone,             // no packed copy: kernels read `data`
  kBf16Tiles,        // bf16 tiles of 16 rows x 32 k (kernels/tile_pack.h): vdpbf16ps, AMX, AVX2
  kFp8Tiles,         // fp8 codes in the same tiles (Fp8TilePack): the AVX512-BF16 fp8 kernel
  kFp8Avx2Blocks,    // the AVX2 fp8 kernel's blocks (avx2/linear_fp8_packed_avx2.cc)
  kW8A8Avx2Blocks,   // the AVX2 W8A8 kernel's 4-row blocks (avx2/linear_w8a8_avx2.cc)
  kW8A8QuadTiles,    // int8 k-quads in 16-row tiles (kW8A8PackK): vpdpbusd and AMX's TDPBUSD
};

// "bf16-tiles", "w8a8-quad-tiles", ...: for messages.
const char* PackedLayoutName(PackedLayout layout);

struct WeightRef {
  const void* data = nullptr;  // [n, k] row-major, possibly unaligned (mapped file).
  DType dtype = DType::kF32;
  int64_t n = 0;  // Output features (rows).
  int64_t k = 0;  // Input features (columns).
  // FP8 and I8: scales [ceil(n / block_n), ceil(k / block_k)], W[r, c] = q[r, c] * s[r / bn, c / bk].
  // I8 (symmetric per-output-channel int8, `--quantize int8`): one f32 scale per row, so
  // scale_dtype is F32, block_n = 1 and block_k = k: W[r, c] = q[r, c] * s[r]. The reference
  // dequantizes rows; the AVX-512 linear computes y[m, r] = s[r] * sum over c of x[m, c] * q[r, c]
  // (the scale applied once per output).
  const void* scale = nullptr;
  DType scale_dtype = DType::kF32;
  int64_t block_n = 0;
  int64_t block_k = 0;
  // FP8 and I8: the row of the full matrix (the one `scale` covers) that row 0 of this view is.
  int64_t scale_row0 = 0;
  // I8 only, `--quantize w8a8`: sum over c of q[r, c] per row of the full matrix (int32 [n],
  // indexed like `scale`, from scale_row0). Non-null selects the W8A8 linear: each activation row
  // is quantized to int8 the same way as the weights (kernels/quantize_row.h; scale sx[m]) and
  //   y[m, r] = float(sum over c of xq[m, c] * q[r, c]) * (sx[m] * s[r])
  // with the integer sum exact (the VNNI kernel feeds xq + 128 as u8 to vpdpbusd and subtracts
  // 128 * row_sums[r]). dequant_row and transposed_linear ignore it (W8A16 as plain I8).
  const int32_t* row_sums = nullptr;
  // bf16 compute (`--precision bf16`, model/load_options.h): every linear and transposed_linear
  // over this weight first rounds its activations to bf16 (round to nearest even, as
  // F32ToBF16), then multiplies as usual with f32 accumulation: y = bf16(x) . W^T. The rounding
  // is per element, so it keeps batch invariance. Honoured by every kernel family for float
  // weights (f32, bf16, f16, fp8); int8 weights (`--quantize`) ignore it (their activations are
  // f32 for int8 and quantized per token for w8a8). The loader sets it; Rows() keeps it.
  bool bf16_activations = false;
  // The same matrix repacked at load for the table's linear (KernelTable::pack: the tile layouts
  // of kernels/tile_pack.h, the W8A8 blocks of kernels/avx2/linear_w8a8_avx2.cc and
  // kernels/avx512/linear_w8a8_vnni_packed.cc; packed_layout says which), or null:
  // read `data`. The packed copy covers the whole matrix the loader packed; packed_row0 is the
  // row of it that row 0 of this view is (Rows() moves it, so sub-views of rows use the same
  // copy). `data` stays valid for the kernels that read rows as stored (dequant_row,
  // transposed_linear), but for a W8A8 weight (`row_sums`): the loader drops the pages of its own
  // int8 copy once packed, as nothing reads them (kv_b, which transposed_linear reads, is never
  // W8A8; model/weight_table.h).
  const void* packed = nullptr;
  int64_t packed_row0 = 0;
  PackedLayout packed_layout = PackedLayout::kNone;  // what `packed` holds (read only with it)

  // Whether this weight has a packed copy, for a kernel that reads `reads`; throws latent::Error
  // naming both layouts when the copy is in another one (a bug: see PackedLayout); from a pool
  // chunk, threads::ParallelFor rethrows it on its caller.
  bool ReadsPacked(PackedLayout reads) const;
  // The same for a kernel that reads packed copies only: throws when there is none, too.
  void ExpectPacked(PackedLayout reads) const;

  // The sub-matrix of rows [row, row + rows): shares data, scales and the packed copy; any row,
  // also mid-block.
  WeightRef Rows(int64_t row, int64_t rows) const;
};

}  // namespace latent::kernels
