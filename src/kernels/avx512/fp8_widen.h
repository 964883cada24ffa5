// fp8 e4m3 codes widened to bf16 exactly, and the block scales of a column block, for the kernels
// over the fp8 tile layout (kernels/tile_pack.h): vdpbf16ps (avx512/linear_fp8_packed.cc) and
// AMX's TDPBF16PS (amx/linear_fp8_amx.cc). Include only inside a target region with AVX-512
// F/BW/VL/DQ and AVX512-VBMI (vpermi2b), after avx512_common.h, with kernels/tile_pack.h,
// <cmath> and <cstring> included before the region.
#pragma once

#include <cstdint>

namespace latent::kernels::avx512 {
// Internal linkage, as in bf16_rows.h: its includers differ in their targets.
namespace {

constexpr int64_t kFp8LineBytes = kPackRows * 2;  // one k-pair of 16 rows: 32 codes

// The two bytes of the bf16 holding each e4m3 magnitude 0 .. 127 exactly (sign clear): exponent
// field 0 is subnormal (m * 2^-9), 0x7f is NaN. vpermi2b looks 64 codes up at once in each.
struct Fp8ToBf16Bytes {
  alignas(64) uint8_t high[128];
  alignas(64) uint8_t low[128];
  Fp8ToBf16Bytes() {
    for (int c = 0; c < 128; ++c) {
      const int e = c >> 3, m = c & 7;
      const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                             : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      const uint32_t bits = c == 0x7f ? 0x7fc0u : u >> 16;  // exact: 4 significant bits
      high[c] = static_cast<uint8_t>(bits >> 8);
      low[c] = static_cast<uint8_t>(bits);
    }
  }
};

const Fp8ToBf16Bytes& Fp8Tables() {
  static const Fp8ToBf16Bytes bytes;
  return bytes;
}

// 64 codes (two lines, stored interleaved as tile_pack.h says) -> the two lines' 32 bf16 each,
// exactly: the bf16's high byte (with the code's sign) and low byte looked up by the code's 7
// magnitude bits, then vpunpck{l,h}bw pair them in line order. The tables are read from memory
// (L1): the register tiles need the registers.
inline void WidenFp8Lines(const uint8_t* codes, const Fp8ToBf16Bytes& t, __m512i& line0,
                          __m512i& line1) {
  const __m512i c = _mm512_load_si512(codes);
  const __m512i high = _mm512_ternarylogic_epi32(
      c, _mm512_permutex2var_epi8(_mm512_load_si512(t.high), c, _mm512_load_si512(t.high + 64)),
      _mm512_set1_epi8(static_cast<char>(0x80)), 0xEC);  // (c & 0x80) | high byte
  const __m512i low =
      _mm512_permutex2var_epi8(_mm512_load_si512(t.low), c, _mm512_load_si512(t.low + 64));
  line0 = _mm512_unpacklo_epi8(low, high);
  line1 = _mm512_unpackhi_epi8(low, high);
}

// Widens `lines` k-pair lines of codes (an even count from an even line: 32 codes each, stored
// as tile_pack.h says; lines run on across tiles) into out [lines][32 bf16], in line order. With
// prefetch > 0, each 64 bytes of codes read also prefetch the 64 at `prefetch` bytes ahead, where
// that stays inside the `readable` bytes from `codes` (a pointer past the copy is undefined,
// even only prefetched).
inline void WidenFp8Run(const uint8_t* codes, int64_t lines, uint16_t* out, int64_t prefetch = 0,
                        int64_t readable = 0) {
  const Fp8ToBf16Bytes& tables = Fp8Tables();
  for (int64_t i = 0; i < lines * kFp8LineBytes; i += 64, out += 64) {
    if (prefetch > 0 && i + prefetch + 64 <= readable) {
      _mm_prefetch(reinterpret_cast<const char*>(codes + i + prefetch), _MM_HINT_T0);
    }
    __m512i line0, line1;
    WidenFp8Lines(codes + i, tables, line0, line1);
    _mm512_store_si512(out, line0);
    _mm512_store_si512(out + 32, line1);
  }
}

// The 16 scales of column block b (packed rows 16 b ..) for the k block holding pair p0; rows
// outside the view get 0 (their outputs are never copied out).
template <class X>
__m512 Fp8BlockScales(const Fp8PackedCall<X>& j, int64_t b, int64_t p0) {
  if (j.scale == nullptr) return _mm512_set1_ps(1.0f);
  const int64_t kb = 2 * p0 / j.block_k;
  const auto at = [&](int64_t packed_row) { return Fp8ScaleIndex(j, packed_row, kb); };
  const int64_t first = at(b * kPackRows), last = at(b * kPackRows + kPackRows - 1);
  if (first >= 0 && first == last) {
    return _mm512_set1_ps(LoadAsF32(j.scale, j.scale_dtype, first));
  }
  alignas(64) float s[kPackRows];
  for (int64_t i = 0; i < kPackRows; ++i) {
    const int64_t index = at(b * kPackRows + i);
    s[i] = index < 0 ? 0.0f : LoadAsF32(j.scale, j.scale_dtype, index);
  }
  return _mm512_load_ps(s);
}

}  // namespace
}  // namespace latent::kernels::avx512
