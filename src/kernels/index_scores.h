// DSA indexer scores of one query token over a run of cached index keys (DeepSeek V3.2's
// lightning indexer): scores[j] = sum over heads h of w[h] * relu(scale * q[h] . keys[j]), with
// relu(NaN) = 0 in every kernel.
// A key's score depends only on that key and the query, never on n or on which call or thread
// scored it, so selections do not depend on how positions are split.
#pragma once

#include <cstdint>

#include "kernels/row_format.h"
#include "tensor/dtype.h"

namespace latent::kernels {

struct IndexScoreArgs {
  const float* q = nullptr;  // [heads, dim], rotated
  const float* w = nullptr;  // [heads] head weights (already / sqrt(heads))
  int64_t heads = 0;
  int64_t dim = 0;
  float scale = 1.0f;           // 1 / sqrt(dim)
  // [n] -> key j, dim elements in `rows`' format (f32, bf16 or fp8, read in place as
  // kernels/row_format.h describes: a key scores exactly as the same key converted to f32).
  const void* const* keys = nullptr;
  RowFormat rows;
  int64_t n = 0;
  float* scores = nullptr;  // [n]
  // bf16 compute (the indexer's query projection computes in bf16): the query rounded to bf16
  // and bf16 keys multiplied, f32 sums, where the keys are bf16 rows of an even dim: on AMX tiles
  // where the CPU has AMX-BF16 (amx/index_scores_amx.cc), else on vdpbf16ps where it has
  // AVX512_BF16 (avx512/index_scores_bf16.cc; other bits: the dots sum in another order).
  // Elsewhere (the reference, AVX2, f32 or fp8 rows) it is ignored: the f32 products, bit for
  // bit. Either way a key's score depends on the key and the query only.
  bool bf16_products = false;
};

// The scalar reference (KernelTable::index_scores of RefKernels()): each dot in order of the dims,
// the head sum in head order.
void IndexScoresRef(const IndexScoreArgs& args);

}  // namespace latent::kernels
