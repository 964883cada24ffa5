// AMX linear over bf16 weights with bf16 activations (bf16 compute, WeightRef::bf16_activations):
// y[m, n] = bf16(x)[m, k] . W[n, k]^T with TDPBF16PS (16 x 32 bf16 tiles, f32 accumulation).
//
// Weights are repacked once at load (kernels/tile_pack.h, through KernelTable::pack) into the
// layout a B tile reads: for each block of 16 weight rows (output columns), for each 32-wide
// block of k, one 1 KiB tile of [16 k-pairs][16 columns][2] bf16 (VNNI pairs), zero-padded past
// n and k:
//
//   packed[n / 16][k / 32][16][16][2], packed[b][kb][p][j][e] = W[16 b + j, 32 kb + 2 p + e]
//
// so every tile is one contiguous 1 KiB read and a weight is streamed in order. Weights without a
// packed copy (built outside the loader) go to the kernel this one wraps (the vdpbf16ps kernel):
// a weight is always computed by the same kernel.
//
// Summation order (the contract that keeps batched = alone) and blocking: tile_blocks.h, shared
// with the W8A8 kernel. Each output y[m, n] is one lane of an f32 accumulator tile, zeroed, then
// one TDPBF16PS per 32-wide block of k, in order (the last block zero-padded; an f32 store and
// reload between k chunks changes nothing), whatever M and the thread split. TDPBF16PS ignores
// MXCSR (round to nearest even, denormal inputs and outputs flushed), as vdpbf16ps does.
//
// Speed (bench/kernels, one thread of a 2-core Xeon with AMX, DeepSeek-sized bf16 weights, with
// the k chunks of 16 tiles back then; chunks of 64 gained another 5-15% on batches, session 28):
// against the AVX-512 vdpbf16ps kernel, 1.5-2x at m = 8, 2.5-4.5x from m = 16 (prefill m = 512:
// about 4x, and above oneDNN's bf16 matmul), level at m = 4. At m = 1 and 2 (both stream the
// weights from memory) it depends on the pages: with vdpbf16ps also on huge pages (the bench's
// default) AMX is 10-20% slower in CPU time; with vdpbf16ps reading a mapped file as the engine
// does (--file), level in CPU time and faster in wall time. In the engine, where the vdpbf16ps
// kernel reads the mapped checkpoint, AMX wins at every batch: the default on CPUs with AMX
// (dispatch.cc, kAmxByDefault, has the figures).
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/amx/amx_kernels.h"
#include "kernels/amx/amx_target.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AMX_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"
#include "kernels/amx/tile_blocks.h"

namespace latent::kernels::amx {
namespace {

// y[m, n] = bf16(x)[m, k] . W[n, k]^T from w's packed copy.
void LinearPacked(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  PackedCall<uint8_t> j = MakePackedCall<uint8_t>(w, m, y);  // x: bf16 pairs, 64 bytes a tile
  j.x = TileActivationsBf16(x, m, w.k, j.tiles);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) {
    TileBlocks<Bf16Tiles>(j, b0, b1,
                          [&j](const float* acc, int64_t ld, int64_t m0, int64_t count, int64_t b,
                               int64_t blocks) {
                            CopyPackedOut(j, acc, ld, m0, count, b, blocks);
                          });
  });
}

}  // namespace

void FillAmxLinear(KernelTable& t) {
  UseTilePackedLinear<LinearPacked, avx512::TilePackAvx512>(t);
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
