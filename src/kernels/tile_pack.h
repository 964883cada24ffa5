// The tile-packed layout of a bf16 weight W [n, k] for bf16 compute, written once at load
// (KernelTable::pack) and read by both bf16 kernels that stream packed weights: AMX
// (amx/linear_amx.cc: one 1 KiB tile is TDPBF16PS's B operand) and the vdpbf16ps packed kernel
// (avx512/linear_bf16_packed.cc: one k-pair of 16 rows is one zmm).
//
//   packed [ceil(n / 16) blocks][ceil(k / 32) tiles][16 k-pairs][16 rows][2 bf16]
//
// Block b holds rows 16 b .. 16 b + 15 over all of k, its tiles in k order (contiguous: a
// block's weights stream front to back); values past n and past k are zero.
#pragma once

#include <cstdint>

#include "threads/thread_pool.h"

#include "kernels/kernel_table.h"
#include "kernels/weight_ref.h"

namespace latent::kernels {

inline constexpr int64_t kPackRows = 16;        // weight rows per block (a tile's columns)
inline constexpr int64_t kPackK = 32;           // bf16 values of k per tile (16 pairs)
inline constexpr int64_t kPackTileBytes = 1024;  // 16 k-pairs x 16 rows x 2 bf16 x 2 bytes

// Bytes of w's packed copy: ceil(n / 16) * ceil(k / 32) KiB for bf16 weights with
// bf16_activations, else 0 (the kernels read every other weight as stored).
int64_t TilePackedBytes(const WeightRef& w);
// Writes w (rows as stored at w.data, any alignment) in the layout above to `out`
// (TilePackedBytes(w) bytes), over the thread pool.
void TilePack(const WeightRef& w, void* out);

// True when a kernel reads w from its packed copy (else it takes the table's unpacked linear).
bool ReadsTilePacked(const WeightRef& w);

// Splits the packed blocks of w's view (rows packed_row0 .. packed_row0 + n) among the thread
// pool for an m-row product and calls blocks(b0, b1) with packed block indices. Threads take whole
// groups of 4 blocks (64 outputs), at least ~128 KiB of weights each and about 4 chunks per
// thread; small products run on the calling thread. The split never changes a block's sums, so
// either packed kernel stays batch and thread-count invariant.
void ForEachPackedBlockRange(const WeightRef& w, int64_t m, threads::RangeFn blocks);

// Makes `Packed` (y[m, n] = bf16(x) . W^T from w's packed copy) t's linear for the weights it
// reads packed (ReadsTilePacked), keeping the linear t had for every other weight, and t's
// packing the tile layout above. One instantiation per packed kernel: its fallback lives in a
// static, as KernelTable holds plain function pointers.
template <void (*Packed)(const float* x, int64_t m, const WeightRef& w, float* y)>
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
  t.packed_bytes = TilePackedBytes;
  t.pack = TilePack;
}

}  // namespace latent::kernels
