// Entry points of the AVX-512 kernels (kernels/avx512/*.cc). Only dispatch.cc calls them, and
// only after checking the CPU (see CpuHasAvx512 in base/cpu_features.h); the packing functions
// also go into the AMX table (an AMX CPU has AVX-512).
#pragma once

#include "kernels/kernel_table.h"

namespace latent::kernels::avx512 {

void FillLinearKernels(KernelTable& table);    // linear, dequant_row, transposed_linear
// Wraps the table's linear, dequant_row and transposed_linear: int8 weights (DType::kI8) go to
// linear_int8_avx512.cc, the others to the kernels it wrapped.
void FillInt8Kernels(KernelTable& table);
// rms_norm, layer_norm, silu_mul, norm_rope, exp_weights, argmax
void FillNormKernels(KernelTable& table);
void FillAttentionKernel(KernelTable& table);  // attention, attention_queries
void FillIndexScoresKernel(KernelTable& table);  // index_scores
// Wraps table.linear (filled before): bf16 weights go to the bf16-activation vdpbf16ps kernel
// (linear_bf16dot.cc), all of them when `every_bf16_weight` (LATENT_BF16_DOT=1), else only those
// with bf16_activations (bf16 compute); the others to the kernel it wrapped. Needs AVX512_BF16.
void FillBf16DotLinear(KernelTable& table, bool every_bf16_weight);
// Wraps table.linear: bf16 weights with bf16_activations that carry a packed copy go to the
// vdpbf16ps kernel over kernels/tile_pack.h's layout (linear_bf16_packed.cc), the others to the
// kernel it wrapped; adds that layout to the table's packing (keeping its W8A8 one). Needs
// AVX512_BF16.
void FillBf16PackedLinear(KernelTable& table);
// Wraps table.linear, packed_bytes and pack (after any other packing): fp8 weights with
// bf16_activations whose scale blocks hold whole k-pairs are packed at load and go to the
// vdpbf16ps kernel over their codes (linear_fp8_packed.cc), the others to what it wrapped. One
// slot per table that calls it (the wrapped entries live in statics). Needs AVX512_BF16.
enum class Fp8PackedSlot { kPackedTable, kAmxTable };
void FillFp8PackedLinear(KernelTable& table, Fp8PackedSlot slot);
// attention_queries under QueriesAttentionArgs::bf16_products on vdpbf16ps (CPUs with
// AVX512_BF16); the table's own kernel for the other calls.
void FillBf16AttentionQueries(KernelTable& table);
// index_scores under IndexScoreArgs::bf16_products over bf16 key rows of an even dim on vdpbf16ps
// (index_scores_bf16.cc, CPUs with AVX512_BF16); the table's own kernel for the other calls.
void FillBf16IndexScores(KernelTable& table);
// attention under AttentionArgs::bf16_products over bf16 rows with one shared head on vdpbf16ps
// (attention_bf16.cc, CPUs with AVX512_BF16); the table's own kernel for the other calls.
void FillBf16Attention(KernelTable& table);
// Whether the three vdpbf16ps kernels above take a call (its shape and flags; no data is read).
// Compiled for AVX512_BF16: call them only where the CPU has it.
bool Bf16TakesQueries(const QueriesAttentionArgs& qa);
bool Bf16TakesIndexScores(const IndexScoreArgs& a);
bool Bf16TakesAttention(const AttentionArgs& a);
// Wraps table.linear: W8A8 weights (I8 with row_sums, `--quantize w8a8`) go to the vpdpbusd
// kernels (linear_w8a8_vnni.cc over the rows as stored, linear_w8a8_vnni_packed.cc over the
// packed copy), the others to the kernel it wrapped; and adds the packing of W8A8 weights to the
// table's. Needs AVX512-VNNI.
void FillW8A8VnniLinear(KernelTable& table);
// The packed W8A8 layout (linear_w8a8_vnni_packed.cc): its size for w (0 unless IsW8A8(w)), the
// plain C++ packer, and the vpdpbusd linear over a weight packed so (w.packed).
int64_t W8A8VnniPackedBytes(const WeightRef& w);
void W8A8VnniPack(const WeightRef& w, void* out);
void LinearW8A8VnniPacked(const float* x, int64_t m, const WeightRef& w, float* y);
// kernels/tile_pack.h's TilePack and Fp8TilePack, the same bytes, on AVX-512 (tile_pack_avx512.cc).
void TilePackAvx512(const WeightRef& w, void* out);
void Fp8TilePackAvx512(const WeightRef& w, void* out);

}  // namespace latent::kernels::avx512
