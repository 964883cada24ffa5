// W8A8 linear (`--quantize w8a8`) on AMX-INT8's TDPBUSD, over the packed int8 copy the AVX-512
// tables already make for vpdpbusd (avx512/linear_w8a8_vnni_packed.cc, kernels/tile_pack.h):
//
//   packed [ceil(n / 16) blocks][ceil(k / 64) tiles][16 k-quads][16 rows][4 int8]  (0 past n, k)
//
// whose 1 KiB tiles are TDPBUSD's B operand as stored. Activations are the vpdpbusd kernel's (u8
// = xq + 128, w8a8_packed_call.h), 64 a tile row, and the blocking is the bf16 AMX kernel's
// (tile_blocks.h) with int32 accumulator tiles.
//
// Integer sums are exact in any order, and the finish is the vpdpbusd kernel's (the reference's
// formula, w8a8_packed_call.h): every output equals the reference's and the vpdpbusd kernel's bit
// for bit. So the table may pick either kernel per call by m (FillAmxW8A8Linear) and a row's
// output still does not depend on its batch.
#include "kernels/avx512/intrinsics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/activation_rows.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/amx/amx_target.h"
#include "kernels/kernel_table.h"
#include "kernels/ref/linear_w8a8_ref.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

LATENT_AMX_BEGIN
#include "kernels/avx512/avx512_common.h"
#include "kernels/avx512/bf16_rows.h"  // tile_blocks.h's bf16 activations
#include "kernels/avx512/quantize_u8.h"
#include "kernels/avx512/w8a8_packed_call.h"
#include "kernels/amx/tile_blocks.h"

namespace latent::kernels::amx {
namespace {

// Calls of fewer rows stay on the kernel the table had (vpdpbusd over the same packed copy),
// which is as fast or faster there. Measured on a 2-core Xeon with AMX (wave 2 session
// 28, n x k 10944 x 2048, 2048 x 10944, 3072 x 2048, 576 x 2048): TDPBUSD 3-5% slower at m = 1,
// level at 2, then faster by 4-9% at 3, 7-14% at 4, 12-35% at 5-8. The two kernels' outputs are
// the same bits, so the switch is free.
constexpr int64_t kMinRows = 3;

using LinearFn = void (*)(const float*, int64_t, const WeightRef&, float*, float*);
LinearFn g_next_linear = nullptr;  // the table's linear before FillAmxW8A8Linear

void LinearW8A8AmxOrNext(const float* x, int64_t m, const WeightRef& w, float* y,
                         float* scratch) {
  if (m >= kMinRows && IsW8A8(w) && w.ReadsPacked(PackedLayout::kW8A8QuadTiles)) {
    return LinearW8A8Amx(x, m, w, y);
  }
  g_next_linear(x, m, w, y, scratch);
}

}  // namespace

void LinearW8A8Amx(const float* x, int64_t m, const WeightRef& w, float* y) {
  if (m <= 0 || w.n <= 0) return;
  const avx512::W8A8PackedCall j =
      avx512::MakeW8A8PackedCall(x, m, w, y, TileActivationRows(m), TileActivationRowTiles);
  ForEachPackedBlockRange(w, m, [&j](int64_t b0, int64_t b1) {
    TileBlocks<Int8Tiles>(j, b0, b1,
                          [&j](const int32_t* acc, int64_t ld, int64_t m0, int64_t count,
                               int64_t b, int64_t blocks) {
                            avx512::FinishW8A8(j, acc, ld, m0, count, b, blocks);
                          });
  });
}

void FillAmxW8A8Linear(KernelTable& t) {
  g_next_linear = t.linear;
  t.linear = LinearW8A8AmxOrNext;
}

}  // namespace latent::kernels::amx
LATENT_AMX_END
