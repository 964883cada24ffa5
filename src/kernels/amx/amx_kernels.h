// Entry points of the AMX kernels (kernels/amx/*.cc). Only dispatch.cc and the kernel tests
// call them, and only after checking the CPU (CpuHasAmxBf16, CpuHasAmxInt8 in
// base/cpu_features.h).
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace latent::kernels::amx {

// Wraps table.linear (filled before, the AVX-512 one): bf16 weights with bf16_activations that
// carry a packed copy go to the TDPBF16PS kernel (linear_amx.cc), the others to the kernel it
// wrapped; adds kernels/tile_pack.h's layout to the table's packing (keeping its W8A8 one).
void FillAmxLinear(KernelTable& table);

// Wraps table.linear (filled before, with the AVX512-VNNI W8A8 kernel and packing): W8A8 weights
// with a packed copy go to the TDPBUSD kernel (linear_w8a8_amx.cc) from 3 rows on, the same bits
// as the kernel it wraps. Needs AMX-INT8 (CpuHasAmxInt8).
void FillAmxW8A8Linear(KernelTable& table);

// The TDPBUSD kernel itself, at any m (the table sends it 3 rows or more): y[m, n] for a view of a
// W8A8 weight whose packed copy the AVX512-VNNI tables made. Exposed for the kernel tests.
void LinearW8A8Amx(const float* x, int64_t m, const WeightRef& w, float* y);

// Wraps table.linear (filled before, with the vdpbf16ps fp8 kernel and its fp8 tile packing):
// the fp8 weights AmxTakesFp8 takes go to the TDPBF16PS kernel (linear_fp8_amx.cc), every
// other weight to the kernel it wrapped. Needs AVX512-VBMI too (CpuHasAvx512Bf16Vbmi).
void FillAmxFp8Linear(KernelTable& table);
// Whether the AMX fp8 kernel takes w: an fp8 weight under bf16 compute in the fp8 tile layout
// (Fp8PacksFit) whose scale blocks hold whole tiles of k (block_k % 32 == 0, or no scales).
bool AmxTakesFp8(const WeightRef& w);
// The TDPBF16PS fp8 kernel itself: y[m, n] for a view of an fp8 weight AmxTakesFp8 takes, whose
// packed copy the table made. Exposed for the kernel tests.
void LinearFp8Amx(const float* x, int64_t m, const WeightRef& w, float* y);

// Wraps table.attention_queries (filled before: the AVX-512 one, on vdpbf16ps under
// bf16_products): the calls AmxTakesQueries takes run on TDPBF16PS (attention_queries_amx.cc),
// the others on the kernel it wrapped.
void FillAmxAttentionQueries(KernelTable& table);
// Whether the AMX attention takes qa: bf16 products, and a value dim of whole 16-column tiles.
bool AmxTakesQueries(const QueriesAttentionArgs& qa);
// The AMX attention itself, for a call AmxTakesQueries takes. Exposed for the kernel tests.
void AttentionQueriesAmx(const QueriesAttentionArgs& qa);

// Wraps table.attention (filled before: the AVX-512 one, on vdpbf16ps under bf16_products): the
// calls AmxTakesAttention takes run on TDPBF16PS (attention_amx.cc), the others on the kernel it
// wrapped.
void FillAmxAttention(KernelTable& table);
// Whether the AMX attention takes a: bf16 products over bf16 rows, or fp8 rows the kernels read
// in place (RowsReadInPlace; decoded to bf16 per block), with one shared head (MLA's absorbed
// decode), and a value dim of whole 16-column tiles.
bool AmxTakesAttention(const AttentionArgs& a);
// The AMX attention itself, for a call AmxTakesAttention takes. Exposed for the kernel tests.
void AttentionBf16Amx(const AttentionArgs& a);

// Wraps table.index_scores (filled before: the AVX-512 one, on vdpbf16ps under bf16_products):
// the calls AmxTakesIndexScores takes run on TDPBF16PS (index_scores_amx.cc), the others on the
// kernel it wrapped.
void FillAmxIndexScores(KernelTable& table);
// Whether the AMX indexer takes a: bf16 products over bf16 key rows of an even dim.
bool AmxTakesIndexScores(const IndexScoreArgs& a);
// The AMX indexer itself, for a call AmxTakesIndexScores takes. Exposed for the kernel tests.
void IndexScoresBf16Amx(const IndexScoreArgs& a);

}  // namespace latent::kernels::amx
