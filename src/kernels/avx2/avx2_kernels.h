// Entry points of the AVX2 kernels (kernels/avx2/*.cc). Only dispatch.cc calls them, and only
// after checking the CPU and the OS (AVX2, FMA, F16C and the ymm state in XCR0).
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace latent::kernels::avx2 {

// linear (every weight dtype; W8A8 too) and transposed_linear; dequant_row stays the reference's.
void FillLinearKernels(KernelTable& table);
// linear over bf16 weights under bf16 compute on the tile-packed copy (packed_bytes, pack); every
// other weight keeps the table's linear. After FillLinearKernels.
void FillBf16PackedLinear(KernelTable& table);
// linear over fp8 weights with block scales under bf16 compute on a packed copy of the codes
// (their packed_bytes and pack: Fp8Avx2PackedBytes, Fp8Avx2Pack); the other weights keep the
// table's entries. After FillBf16PackedLinear.
void FillFp8PackedLinear(KernelTable& table);
// The AVX2 fp8 kernel's layout (linear_fp8_packed_avx2.cc), for the fp8 weights that fit
// (Fp8PacksFit; else 0 bytes): per block of 16 rows a 32-byte header (uint16 at byte 0: bit i set
// when row i holds a NaN code; the rest zero), then the codes [kp][16 rows], k rounded up to 32,
// zero past n and k. The kernel and the packing read and write the lines with aligned 16-byte
// accesses: `out` (and so w.packed) must be 16-byte aligned, as KernelTable's packed copies are
// (64).
int64_t Fp8Avx2PackedBytes(const WeightRef& w);
void Fp8Avx2Pack(const WeightRef& w, void* out);
// Packs a bf16 weight in kernels/tile_pack.h's layout: the same bytes as TilePack (the table's
// `pack` after FillBf16PackedLinear).
void TilePackAvx2(const WeightRef& w, void* out);
// rms_norm, layer_norm, silu_mul, norm_rope, exp_weights, argmax
void FillNormKernels(KernelTable& table);
void FillAttentionKernel(KernelTable& table);    // attention, attention_queries
void FillIndexScoresKernel(KernelTable& table);  // index_scores

// The W8A8 linear (linear_w8a8_avx2.cc): y [m, n] for x [m, k] and a weight with IsW8A8(w)
// (ref/linear_w8a8_ref.h), bit for bit the reference's. It reads w.packed when set, in W8A8Pack's
// layout only (only FillW8A8Packing's tables pack W8A8 weights in it; any other layout throws,
// WeightRef::ReadsPacked), else the rows as stored.
// FillLinearKernels' linear calls it, and so do the AVX-512 tables on CPUs without VNNI (which
// pack no W8A8 weight; those with VNNI pack their own layout and never call this).
void LinearW8A8(const float* x, int64_t m, const WeightRef& w, float* y);
// Packs a W8A8 weight for LinearW8A8 (the layout in linear_w8a8_avx2.cc).
void W8A8Pack(const WeightRef& w, void* out);
// Makes the table pack W8A8 weights with W8A8Pack (packed_bytes, pack); every other weight keeps
// the table's packing. Its linear must reach LinearW8A8 for them (FillLinearKernels').
void FillW8A8Packing(KernelTable& table);

// out[i] = RoundToBF16(x[i]) for i < count (bf16 compute's rounding of a linear's inputs; in
// place allowed). The AVX-512 family uses it too (every AVX-512 CPU has AVX2).
void RoundActivationsToBf16(const float* x, int64_t count, float* out);

}  // namespace latent::kernels::avx2
