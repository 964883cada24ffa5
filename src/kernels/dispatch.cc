// Picks the kernel table once from the CPU's features (and LATENT_KERNELS, LATENT_BF16_DOT,
// LATENT_GEMM).
#include <optional>
#include <string>

#include "base/cpu_features.h"
#include "base/env.h"
#include "kernels/amx/amx_kernels.h"
#include "kernels/avx2/avx2_kernels.h"
#include "kernels/avx512/avx512_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/tile_pack.h"
#include "tensor/dtype.h"
#if LATENT_HAVE_ONEDNN
#include "kernels/onednn/onednn_linear.h"
#endif

namespace latent::kernels {
namespace {

// Whether the AMX kernels are the default on CPUs that have them. bench/kernels, one thread of a
// 2-core Xeon with AMX, against the AVX-512 vdpbf16ps kernel: 2-4x faster from m = 8 (prefill
// m = 512: 4x), level at m = 4, and at m = 1-2 10-20% slower in CPU time when both read weights
// on huge pages. The engine is what counts, and there the vdpbf16ps kernel reads the mapped
// checkpoint while AMX reads its packed copy: `latent bench` on bench/compare's checkpoint
// (v2lite-L2, bf16, pp 128, tg 32, quiet machine, two runs each): batch-1 decode 19.3-19.4 ->
// 19.7-24.1 t/s, 64-request decode 107.5 -> 273-289 t/s, prefill 185-241 -> 506-756 t/s.
constexpr bool kAmxByDefault = true;

// Whether the packed vdpbf16ps kernel is the default for bf16 compute on CPUs with AVX512_BF16
// where AMX is not chosen (else the row-major vdpbf16ps kernel, LATENT_GEMM=avx512).
// bench/kernels on a 2-core AMD Zen 5 (no AMX), n 2048 x k 7168 bf16 weights, 2 threads, against
// the row-major kernel: m = 1 17.0 -> 29.4 GB/s, m = 8 120 -> 182 GFLOP/s, m = 64 204 -> 314.
constexpr bool kBf16PackedByDefault = true;

const KernelTable* MakeAvx512() {
#if defined(__x86_64__)
  if (!CpuHasAvx512()) return nullptr;
  static KernelTable table = RefKernels();
  avx512::FillLinearKernels(table);
  avx512::FillInt8Kernels(table);  // after FillLinearKernels: wraps its linear kernels
  // W8A8 weights: vpdpbusd with VNNI; without it the int8 kernel hands them to the AVX2 one.
  if (CpuHasAvx512Vnni()) avx512::FillW8A8VnniLinear(table);
  // bf16 compute over bf16 weights: vdpbf16ps where the CPU has it (the same bf16(x) . W^T as
  // the f32 kernels on rounded inputs, in its own fixed order).
  if (CpuHasAvx512Bf16()) avx512::FillBf16DotLinear(table, /*every_bf16_weight=*/false);
  avx512::FillNormKernels(table);
  avx512::FillAttentionKernel(table);
  if (CpuHasAvx512Bf16()) avx512::FillBf16AttentionQueries(table);
  if (CpuHasAvx512Bf16()) avx512::FillBf16Attention(table);
  avx512::FillIndexScoresKernel(table);
  if (CpuHasAvx512Bf16()) avx512::FillBf16IndexScores(table);
  return &table;
#else
  return nullptr;
#endif
}

const KernelTable* MakeAvx2() {
#if defined(__x86_64__)
  if (!CpuHasAvx2()) return nullptr;
  static KernelTable table = RefKernels();
  avx2::FillLinearKernels(table);
  avx2::FillNormKernels(table);
  avx2::FillAttentionKernel(table);
  avx2::FillIndexScoresKernel(table);
  return &table;
#else
  return nullptr;
#endif
}

const KernelTable* MakeAvx2Packed() {
#if defined(__x86_64__)
  if (Avx2Kernels() == nullptr) return nullptr;
  static KernelTable table = *Avx2Kernels();
  avx2::FillBf16PackedLinear(table);
  avx2::FillFp8PackedLinear(table);
  avx2::FillW8A8Packing(table);
  return &table;
#else
  return nullptr;
#endif
}

const KernelTable* MakeBf16Dot() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (Avx512Kernels() == nullptr || !CpuHasAvx512Bf16()) return nullptr;
  static KernelTable table = *Avx512Kernels();
  avx512::FillBf16DotLinear(table, /*every_bf16_weight=*/true);
  return &table;
#else
  return nullptr;
#endif
}

const KernelTable* MakeAmx() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // CpuHasAmxBf16 implies AVX512_BF16: the AVX-512 table already runs the other bf16-compute
  // weights (those without a packed copy) on vdpbf16ps.
  if (Avx512Kernels() == nullptr || !CpuHasAmxBf16()) return nullptr;
  static KernelTable table = *Avx512Kernels();
  amx::FillAmxLinear(table);
  amx::FillAmxAttentionQueries(table);
  amx::FillAmxAttention(table);
  amx::FillAmxIndexScores(table);
  // W8A8 weights: TDPBUSD over the vpdpbusd kernel's packed copy, which FillAmxLinear kept.
  if (CpuHasAmxInt8() && CpuHasAvx512Vnni()) amx::FillAmxW8A8Linear(table);
  // fp8 weights under bf16 compute: their packed codes widened to bf16 tiles for TDPBF16PS where
  // the scale blocks hold whole tiles, else on vdpbf16ps (AMX has no fp8 tiles).
  if (CpuHasAvx512Bf16Vbmi()) {
    avx512::FillFp8PackedLinear(table, avx512::Fp8PackedSlot::kAmxTable);
    amx::FillAmxFp8Linear(table);
  }
  return &table;
#else
  return nullptr;
#endif
}

const KernelTable* MakeBf16Packed() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (Avx512Kernels() == nullptr || !CpuHasAvx512Bf16()) return nullptr;
  static KernelTable table = *Avx512Kernels();
  avx512::FillBf16PackedLinear(table);
  if (CpuHasAvx512Bf16Vbmi()) {
    avx512::FillFp8PackedLinear(table, avx512::Fp8PackedSlot::kPackedTable);
  }
  return &table;
#else
  return nullptr;
#endif
}

// LATENT_BF16_DOT and LATENT_KERNELS, read strictly as LATENT_GEMM is: LATENT_BF16_DOT=true
// once kept the default kernels (only "1" switched), and LATENT_KERNELS=REF ran the vector ones.
bool UseBf16Dot() { return EnvBool("LATENT_BF16_DOT").value_or(false); }

bool ForceRef() { return EnvChoice("LATENT_KERNELS", {"ref"}).has_value(); }

// LATENT_GEMM, read strictly: a misspelt GEMM must not run the default unnoticed.
std::optional<std::string> Gemm() {
  return EnvChoice("LATENT_GEMM", {"amx", "avx512", "avx512-packed", "avx2", "avx2-packed",
                                   "onednn"});
}

bool GemmIs(const char* name) { return Gemm() == name; }

bool UseOnednn() { return GemmIs("onednn"); }

// AMX for bf16 compute: the default where the CPU has it (kAmxByDefault) unless LATENT_GEMM names
// another GEMM (avx512 keeps the vdpbf16ps kernels; onednn runs its own AMX code over the weights
// as stored, which packing would release); LATENT_GEMM=amx asks for it.
bool UseAmx() {
  if (AmxKernels() == nullptr) return false;
  if (const std::optional<std::string> gemm = Gemm()) return *gemm == "amx";
  return kAmxByDefault;
}

// The packed vdpbf16ps kernel for bf16 compute (avx512/linear_bf16_packed.cc): where the CPU has
// AVX512_BF16 and AMX is not chosen, by default (kBf16PackedByDefault) unless LATENT_GEMM names
// another GEMM; LATENT_GEMM=avx512-packed asks for it (on AMX CPUs too).
bool UseBf16Packed() {
  if (Bf16PackedKernels() == nullptr) return false;
  if (const std::optional<std::string> gemm = Gemm()) return *gemm == "avx512-packed";
  return kBf16PackedByDefault;
}

// Whether the packed AVX2 kernel is the default for bf16 compute on CPUs with AVX2 and no AVX-512
// (else the row-major AVX2 kernel, LATENT_GEMM=avx2). bench/kernels on a 2-core AMD EPYC Zen 3,
// n 10944 x k 2048 bf16 weights under bf16 compute, 2 threads, against the row-major kernel:
// m = 1 16-20 -> 34-36 GB/s, m = 6 43-53 -> 66-74 GFLOP/s, m = 64 45-63 -> 102-106, m = 512 67-81
// -> 99-117. `latent bench` on bench/compare's checkpoint: prefill 512 174 -> 282 t/s, batch-1
// decode 16.6 -> 25.3 t/s, 64-request decode 79.7 -> 120.4 t/s.
constexpr bool kAvx2PackedByDefault = true;

// The packed AVX2 kernel (avx2/linear_bf16_packed_avx2.cc) for bf16 compute where the AVX2 family
// runs: by default (kAvx2PackedByDefault); LATENT_GEMM=avx2 keeps the row-major one and
// LATENT_GEMM=avx2-packed asks for the packed one. The AVX-512 GEMMs' names change nothing here.
bool UseAvx2Packed() {
  if (Avx2PackedKernels() == nullptr) return false;
  if (GemmIs("avx2")) return false;
  return GemmIs("avx2-packed") || kAvx2PackedByDefault;
}

// Where the AVX2 family runs: CPUs without AVX-512, and any CPU under LATENT_GEMM=avx2 or
// avx2-packed (so that the AVX2 path can be tested end to end on AVX-512 machines too).
bool UseAvx2Family() {
  return Avx512Kernels() == nullptr || GemmIs("avx2") || GemmIs("avx2-packed");
}

// The AVX2 family: the packed kernels (UseAvx2Packed), else the row-major ones; the reference
// where the CPU has no AVX2.
const KernelTable& Avx2OrRefKernels() {
  if (Avx2Kernels() == nullptr) return RefKernels();
  return UseAvx2Packed() ? *Avx2PackedKernels() : *Avx2Kernels();
}

// The choice before oneDNN: AVX-512 (on AMX where the CPU has it, UseAmx; else over packed
// weights, UseBf16Packed), else AVX2, else the reference.
const KernelTable& OwnKernels() {
  static const KernelTable& table =
      ForceRef()                                    ? RefKernels()
      : UseAvx2Family()                             ? Avx2OrRefKernels()
      : UseBf16Dot() && Bf16DotKernels() != nullptr ? *Bf16DotKernels()
      : UseAmx()                                    ? *AmxKernels()
      : UseBf16Packed()                             ? *Bf16PackedKernels()
                                                    : *Avx512Kernels();
  return table;
}

bool OwnIsAvx2OrRef() {
  const KernelTable* own = &OwnKernels();
  return own == &RefKernels() || own == Avx2Kernels() || own == Avx2PackedKernels();
}

const KernelTable* MakeOnednn() {
#if LATENT_HAVE_ONEDNN
  // oneDNN's bf16 matmul is for AVX-512 machines (kernel_table.h).
  if (OwnIsAvx2OrRef()) return nullptr;
  static KernelTable table = OwnKernels();
  onednn::FillOnednnLinear(table);
  return &table;
#else
  return nullptr;
#endif
}

}  // namespace

bool Avx512HasW8A8Vnni() { return Avx512Kernels() != nullptr && CpuHasAvx512Vnni(); }

bool AmxHasW8A8() { return AmxKernels() != nullptr && CpuHasAmxInt8() && CpuHasAvx512Vnni(); }

bool Avx512HasBf16Dot() { return Avx512Kernels() != nullptr && CpuHasAvx512Bf16(); }

const KernelTable* Avx512Kernels() {
  static const KernelTable* table = MakeAvx512();
  return table;
}

const KernelTable* Avx2Kernels() {
  static const KernelTable* table = MakeAvx2();
  return table;
}

const KernelTable* Avx2PackedKernels() {
  static const KernelTable* table = MakeAvx2Packed();
  return table;
}

const KernelTable* Bf16DotKernels() {
  static const KernelTable* table = MakeBf16Dot();
  return table;
}

const KernelTable* OnednnKernels() {
  static const KernelTable* table = MakeOnednn();
  return table;
}

const KernelTable* AmxKernels() {
  static const KernelTable* table = MakeAmx();
  return table;
}

const KernelTable* Bf16PackedKernels() {
  static const KernelTable* table = MakeBf16Packed();
  return table;
}

const KernelTable& BestKernels() {
  static const KernelTable& table =
      UseOnednn() && OnednnKernels() != nullptr ? *OnednnKernels() : OwnKernels();
  return table;
}

void CheckKernelEnvironment() {
  // Each read whatever the others say: OwnKernels reads LATENT_BF16_DOT and LATENT_GEMM only
  // where LATENT_KERNELS and the CPU leave them a choice.
  ForceRef();
  UseBf16Dot();
  Gemm();
#if LATENT_HAVE_ONEDNN
  onednn::MinRows();
#endif
}

const char* BestKernelsName() {
  const bool onednn = &BestKernels() == OnednnKernels();
  if (&OwnKernels() == &RefKernels()) return "ref";
  if (&OwnKernels() == Avx2Kernels()) return "avx2";
  if (&OwnKernels() == Avx2PackedKernels()) return "avx2-packed";
  if (&OwnKernels() == Bf16DotKernels()) return onednn ? "avx512-bf16dot+onednn" : "avx512-bf16dot";
  if (&OwnKernels() == AmxKernels()) return onednn ? "avx512-amx+onednn" : "avx512-amx";
  if (&OwnKernels() == Bf16PackedKernels()) {
    return onednn ? "avx512-packed+onednn" : "avx512-packed";
  }
  return onednn ? "avx512+onednn" : "avx512";
}

const char* BestBf16ProductsName() {
  if (&BestKernels() == OnednnKernels()) return "onednn";
  if (&OwnKernels() == AmxKernels()) return "amx";
  if (OwnIsAvx2OrRef()) return "f32 fma";
  // Every AVX-512 table runs bf16 compute on vdpbf16ps where the CPU has it (MakeAvx512).
  return Avx512HasBf16Dot() ? "vdpbf16ps" : "f32 fma";
}

// The three below: the AMX table's wrapper takes what its predicate takes and hands the rest to
// the AVX-512 table's entry, which it copied; that one (on CPUs with AVX512_BF16) runs what its
// vdpbf16ps predicate takes, and f32 products otherwise. oneDNN's table copies OwnKernels'.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {
template <class Args>
const char* ProductsName(const Args& a, bool (*amx_takes)(const Args&),
                         bool (*bf16_takes)(const Args&)) {
  if (OwnIsAvx2OrRef()) return "f32 fma";
  if (&OwnKernels() == AmxKernels() && amx_takes(a)) return "amx";
  return CpuHasAvx512Bf16() && bf16_takes(a) ? "vdpbf16ps" : "f32 fma";
}
}  // namespace

const char* BestAttentionName(const AttentionArgs& decode) {
  return ProductsName(decode, amx::AmxTakesAttention, avx512::Bf16TakesAttention);
}
const char* BestQueriesAttentionName(const QueriesAttentionArgs& prefill) {
  return ProductsName(prefill, amx::AmxTakesQueries, avx512::Bf16TakesQueries);
}
const char* BestIndexScoresName(const IndexScoreArgs& indexer) {
  return ProductsName(indexer, amx::AmxTakesIndexScores, avx512::Bf16TakesIndexScores);
}
#else  // only the reference table here
const char* BestAttentionName(const AttentionArgs&) { return "f32 fma"; }
const char* BestQueriesAttentionName(const QueriesAttentionArgs&) { return "f32 fma"; }
const char* BestIndexScoresName(const IndexScoreArgs&) { return "f32 fma"; }
#endif

const char* BestFp8ProductsName(int64_t block_n, int64_t block_k) {
  // The fp8 packed kernels are in the packed and AMX tables where the CPU has VBMI (MakeAmx,
  // MakeBf16Packed); oneDNN's table copies OwnKernels, so it keeps what that table does. Each
  // takes the weights its own rule fits, asked of a weight with the checkpoint's blocks.
  const bool amx = &OwnKernels() == AmxKernels();
  if (!(amx || &OwnKernels() == Bf16PackedKernels()) || !CpuHasAvx512Bf16Vbmi()) return "f32 fma";
  const float scale = 1.0f;
  WeightRef w;
  w.dtype = DType::kF8E4M3;
  w.bf16_activations = true;
  w.n = w.k = 1;  // any shape: the rules are the blocks'
  w.scale = block_k > 0 ? &scale : nullptr;
  w.block_n = block_n;
  w.block_k = block_k;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (amx && amx::AmxTakesFp8(w)) return "amx";
#endif
  return Fp8PacksFit(w) ? "vdpbf16ps" : "f32 fma";
}

}  // namespace latent::kernels
