// The kernels latent runs, as one table of function pointers filled once at start from the
// CPU's features. ref/ holds the plain scalar versions: the oracle every faster kernel is tested
// against (tests/kernels/). avx512/ holds the AVX-512 versions, avx2/ the AVX2 + FMA + F16C
// versions (both compiled in every x86-64 build under a target pragma, chosen at run time by
// dispatch.cc: AVX-512 when the CPU has it, else AVX2, else the reference). Kernels are pure functions on raw
// pointers; callers pass scratch (the AVX-512 attention keeps a per-thread workspace).
//
// Batch invariance: every kernel computes each output row of a token the same way whatever else
// is in the call (m, the other rows, the thread count), so a token's result never depends on its
// batch; bf16 compute (WeightRef::bf16_activations) only rounds each input element first. The fast kernels use their own fixed f32 summation order, not the reference's. The one
// exception is the opt-in oneDNN GEMM (OnednnKernels, LATENT_GEMM=onednn): oneDNN's summation
// order depends on M and its blocking, and it rounds the activations to bf16.
//
// Threads: the fast linear and attention kernels split their work over the process-wide pool of
// threads/thread_pool.h (threads::SetNumThreads; the CLI's --threads).
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/index_scores.h"
#include "kernels/norm_rope.h"
#include "kernels/weight_ref.h"

namespace latent::kernels {

struct KernelTable {
  // y[m, n] = x[m, k] . W[n, k]^T, accumulating in f32; bf16(x) . W^T when w.bf16_activations
  // (kernels/bf16_activations.h). scratch: k floats (the reference kernel's; the AVX-512 one
  // ignores it).
  void (*linear)(const float* x, int64_t m, const WeightRef& w, float* y, float* scratch);
  // out[k] = row `row` of W, dequantized to f32.
  void (*dequant_row)(const WeightRef& w, int64_t row, float* out);
  // y[m, d] = x * rsqrt(mean(x^2) + eps) * weight[d]; weight f32/bf16/f16. In place allowed.
  void (*rms_norm)(const float* x, int64_t m, int64_t d, const void* weight, DType weight_dtype,
                   float eps, float* y);
  // y[m, d] = (x - mean) / sqrt(var + eps) * weight[d] + bias[d] (biased variance, as
  // torch.nn.LayerNorm); weight/bias f32/bf16/f16. In place allowed.
  void (*layer_norm)(const float* x, int64_t m, int64_t d, const void* weight, const void* bias,
                     DType dtype, float eps, float* y);
  // out[i] = silu(gate[i]) * up[i]
  void (*silu_mul)(const float* gate, const float* up, int64_t n, float* out);
  // y[m, c] = sum over r of x[m, r] * W[r, c]: x [m, w.n], y [m, w.k] (x . W, not x . W^T; MLA's
  // q_nope . W_UK). Each y lane is summed over r in order. x rounded to bf16 first when
  // w.bf16_activations, as linear.
  void (*transposed_linear)(const float* x, int64_t m, const WeightRef& w, float* y);
  // Attention of one query token over its positions (kernels/attention.h).
  void (*attention)(const AttentionArgs& args);
  // Several query tokens of one sequence, each over its own causal prefix or from its own first
  // position (a sliding window); a query's output depends on nothing else in the call
  // (kernels/attention.h).
  void (*attention_queries)(const QueriesAttentionArgs& args);
  // MLA's kv_a_layernorm and rotary embedding of keys and queries, fused (kernels/norm_rope.h);
  // the norm equals this table's rms_norm bit for bit.
  void (*norm_rope)(const NormRopeArgs& args);
  // DSA indexer scores of one query over a run of index keys (kernels/index_scores.h).
  void (*index_scores)(const IndexScoreArgs& args);
  // The sampler's weights at a temperature (scale = 1 / temperature > 0) over a logits row x[n]:
  // returns max = the largest x[i], and writes w[i] = exp((x[i] - max) * scale), 0 where x[i] is
  // -inf (a disallowed token: never drawn), and block_mass[b] = the sum of w over ids
  // [b * block, (b + 1) * block) in f64, in an order fixed by the block's length alone. block is
  // a positive multiple of 16.
  float (*exp_weights)(const float* x, int64_t n, float scale, int64_t block, float* w,
                       double* block_mass);
  // Greedy sampling: the index of the largest x[i] over x[n], the first of equal ones, as
  // std::max_element with operator< answers (0 for n <= 0; a NaN is never chosen unless x[0] is
  // one, which then wins). Every kernel returns the same index.
  int64_t (*argmax)(const float* x, int64_t n);
  // Weights repacked once at load for `linear` (null in tables that read every weight as stored):
  // packed_bytes(w) is the size of w's packed copy (0: this table reads w as stored), pack(w, out)
  // writes it to `out` (64-byte aligned) in the layout packed_layout(w) names. The loader then
  // sets w.packed and w.packed_layout (kernels/linear.h, PackForLinear); linear computes the same
  // values with or without it.
  int64_t (*packed_bytes)(const WeightRef& w) = nullptr;
  void (*pack)(const WeightRef& w, void* out) = nullptr;
  PackedLayout (*packed_layout)(const WeightRef& w) = nullptr;
};

// Makes t pack the weights for which Fits(w) holds with Pack (Bytes(w) bytes, in kLayout),
// keeping t's packing for every other weight: packings chain, one kind of weight each (the bf16
// and fp8 tile layouts, tile_pack.h; the AVX2 fp8 lines, avx2/linear_fp8_packed_avx2.cc; the W8A8
// blocks of AVX2, avx2/linear_w8a8_avx2.cc, and of AVX512-VNNI, avx512/linear_w8a8_vnni_packed.cc).
// The previous entries live in statics, one set per instantiation, as KernelTable holds plain
// function pointers: kSlot (any constant: an int, the kernel's function) tells apart tables that
// add the same packing.
template <bool (*Fits)(const WeightRef&), int64_t (*Bytes)(const WeightRef&),
          void (*Pack)(const WeightRef&, void*), PackedLayout kLayout, auto kSlot = 0>
void AddPacking(KernelTable& t) {
  static int64_t (*other_bytes)(const WeightRef&) = nullptr;
  static void (*other_pack)(const WeightRef&, void*) = nullptr;
  static PackedLayout (*other_layout)(const WeightRef&) = nullptr;
  other_bytes = t.packed_bytes;
  other_pack = t.pack;
  other_layout = t.packed_layout;
  t.packed_bytes = [](const WeightRef& w) -> int64_t {
    if (Fits(w)) return Bytes(w);
    return other_bytes != nullptr ? other_bytes(w) : 0;
  };
  t.pack = [](const WeightRef& w, void* out) {
    if (Fits(w)) {
      Pack(w, out);
    } else {
      other_pack(w, out);
    }
  };
  t.packed_layout = [](const WeightRef& w) {
    if (Fits(w)) return kLayout;
    return other_layout != nullptr ? other_layout(w) : PackedLayout::kNone;
  };
}

// The scalar reference kernels.
const KernelTable& RefKernels();
// The AVX-512 kernels (F, BW, VL, DQ; plus VNNI for W8A8 and BF16's vdpbf16ps for bf16 compute
// over bf16 weights where the CPU has them), or null when this CPU or OS lacks them.
const KernelTable* Avx512Kernels();
// The AVX2 kernels (AVX2, FMA, F16C and the OS's ymm state), or null when this CPU or OS lacks
// them. Every entry but dequant_row has an AVX2 version; W8A8 weights use an exact integer dot
// (vpmaddubsw; avx2/linear_w8a8_avx2.cc), so they equal the reference bit for bit.
const KernelTable* Avx2Kernels();
// The AVX2 kernels with linear over bf16 weights with bf16_activations (bf16 compute) on FMAs over
// the tile-packed copy the loader makes (avx2/linear_bf16_packed_avx2.cc, kernels/tile_pack.h;
// the other weights stay on the row-major AVX2 kernels; fp8 and W8A8 weights are packed too), or
// null without AVX2. Batch invariant like the others.
const KernelTable* Avx2PackedKernels();
// Whether Avx512Kernels() (and the tables built on it) computes W8A8 weights (`--quantize w8a8`)
// with the AVX512-VNNI kernel; otherwise their linear hands them to the AVX2 one.
bool Avx512HasW8A8Vnni();
// Whether Avx512Kernels() runs linear over bf16 weights with bf16_activations (bf16 compute,
// `--precision bf16`) on the AVX512_BF16 vdpbf16ps kernel (avx512/linear_bf16dot.cc); otherwise
// the f32 kernels run on the rounded inputs.
bool Avx512HasBf16Dot();
// The AVX-512 kernels with linear over every bf16 weight replaced by the bf16-activation kernel
// (activations rounded to bf16, vdpbf16ps; avx512/linear_bf16dot.cc), also without
// bf16_activations, or null without AVX512_BF16. Not parity-exact with f32 math: opt-in only.
const KernelTable* Bf16DotKernels();
// The AVX-512 (or, with LATENT_BF16_DOT=1, bf16-dot) kernels with linear over bf16 weights at
// m >= LATENT_GEMM_MIN_ROWS (default 32) sent to oneDNN's bf16 matmul (onednn/onednn_linear.h;
// AMX where the CPU has it). Activations rounded to bf16 and NOT batch invariant: opt-in only.
// Null without AVX-512 (also on AVX2 machines), under LATENT_KERNELS=ref, or in a build without oneDNN.
const KernelTable* OnednnKernels();
// The AVX-512 kernels with linear over bf16 weights with bf16_activations (bf16 compute) on AMX
// (TDPBF16PS, amx/linear_amx.cc) for weights repacked at load (packed_bytes, pack; the others
// stay on the AVX-512 kernels), or null without AMX-BF16 (or the OS's tile state). Batch
// invariant like the AVX-512 kernels. fp8 weights under bf16 compute run on TDPBF16PS where their
// scale blocks hold whole tiles of k (amx/linear_fp8_amx.cc: DeepSeek's 128 x 128), the others as
// in Bf16PackedKernels(); W8A8 weights (AmxHasW8A8) on AMX-INT8 from 3 rows on. attention and
// attention_queries under bf16_products run on TDPBF16PS too where the value dim is whole
// 16-column tiles (amx/attention_amx.cc: the absorbed decode over shared bf16 rows;
// amx/attention_queries_amx.cc: the expanded prefill), and so does index_scores over bf16 keys
// of an even dim (amx/index_scores_amx.cc), batch invariant as the others.
const KernelTable* AmxKernels();
// Whether AmxKernels() computes W8A8 calls of 3 rows or more with TDPBUSD (AMX-INT8,
// amx/linear_w8a8_amx.cc; the same bits as the vpdpbusd kernel it keeps for fewer rows).
bool AmxHasW8A8();
// The AVX-512 kernels with linear over bf16 weights with bf16_activations on vdpbf16ps over the
// tile-packed copy the loader makes (avx512/linear_bf16_packed.cc, kernels/tile_pack.h), or null
// without AVX512_BF16. Batch invariant like the others. With AVX512-VBMI too, fp8 weights with
// bf16_activations are packed likewise (one byte per code) and run on vdpbf16ps
// (avx512/linear_fp8_packed.cc).
const KernelTable* Bf16PackedKernels();
// The best kernels this CPU supports, chosen once: AmxKernels() where the CPU has AMX-BF16, else
// AVX-512 when available, else AVX2 (over packed bf16 weights: Avx2PackedKernels(), unless
// LATENT_GEMM=avx2 keeps the row-major kernel), else the reference (dispatch.cc's kAmxByDefault
// and kAvx2PackedByDefault have the measurements). LATENT_KERNELS=ref forces the reference
// kernels; LATENT_BF16_DOT=1 picks Bf16DotKernels() when available; LATENT_GEMM=avx512 keeps the
// AVX-512 kernels on an AMX CPU; LATENT_GEMM=onednn picks OnednnKernels() (over the AVX-512
// kernels); LATENT_GEMM=avx2 or avx2-packed picks the AVX2 family on any CPU with AVX2.
const KernelTable& BestKernels();
// Reads LATENT_KERNELS, LATENT_BF16_DOT, LATENT_GEMM (and LATENT_GEMM_MIN_ROWS where oneDNN is
// built in), throwing latent::Error naming the variable when a value is not one latent knows:
// the CLI calls it at start-up, before the kernels are chosen where they are first used.
void CheckKernelEnvironment();
// "avx512", "avx512-bf16dot", "avx512-amx", any of them with "+onednn", "avx2-packed", "avx2" or
// "ref": what
// BestKernels() chose.
const char* BestKernelsName();
// What multiplies a bf16 weight by bf16-rounded activations (bf16 compute) in BestKernels'
// linear: "onednn", "amx" (TDPBF16PS tiles), "vdpbf16ps" (the AVX-512 tables on CPUs with
// AVX512_BF16), or "f32 fma" (the bf16 values widened to f32 products: AVX2, the reference, and
// AVX-512 without AVX512_BF16).
const char* BestBf16ProductsName();
// What multiplies an fp8 e4m3 weight with scale blocks of block_n x block_k (0 x 0: no scales) by
// bf16-rounded activations in BestKernels' linear: "amx" (its packed codes widened to bf16 tiles
// for TDPBF16PS: the AMX table where the blocks hold whole tiles of k, amx/linear_fp8_amx.cc),
// "vdpbf16ps" (widened to bf16 lines: the packed and AMX tables on CPUs with AVX512-BF16 and
// VBMI, avx512/linear_fp8_packed.cc) or "f32 fma" (each code widened to f32).
const char* BestFp8ProductsName(int64_t block_n, int64_t block_k);
// What runs the products of an attention or index-score call of this shape, row format and
// bf16_products in BestKernels (no data is read; `latent info` asks it of the model's calls):
// "amx" (TDPBF16PS tiles: amx/attention_amx.cc, attention_queries_amx.cc, index_scores_amx.cc),
// "vdpbf16ps" (the AVX-512 tables on CPUs with AVX512_BF16) or "f32 fma" (f32 products: the
// reference, AVX2, and the calls neither of those takes).
const char* BestAttentionName(const AttentionArgs& decode);
const char* BestQueriesAttentionName(const QueriesAttentionArgs& prefill);
const char* BestIndexScoresName(const IndexScoreArgs& indexer);

}  // namespace latent::kernels
