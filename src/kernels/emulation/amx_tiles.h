// AMX-TILE, AMX-BF16 and AMX-INT8's TDPBUSD in portable code, for the kernel tests' emulated build
// (see avx512_intrinsics.h beside this file): eight tiles of up to 16 rows x 64 bytes per thread,
// as the hardware keeps them per thread, configured by LDTILECFG's 64-byte operand, and TDPBF16PS
// as Intel's SDM defines it: per output, the even and the odd products of all k-pairs summed apart
// (FMAs from zero), then their sum added to the accumulator; DAZ on the inputs, FTZ on each result;
// TDPBUSD as the SDM defines it too: per output, each k-quad's four u8 x s8 products summed and
// added to the int32 accumulator, wrapping. What would fault on hardware (#GP, #UD) throws
// std::logic_error here.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/emulation/avx512_intrinsics.h"

namespace latent::kernels::emulated {

struct TileState {
  uint8_t rows[8] = {};
  uint16_t colsb[8] = {};
  bool configured = false;
  alignas(64) uint8_t data[8][16][64] = {};
};

inline TileState& Tiles() {
  thread_local TileState state;
  return state;
}

inline void TileRelease() { Tiles() = TileState{}; }

// Palette 0 releases the tiles; palette 1 configures them and zeroes their data.
inline void TileLoadConfig(const void* config) {
  const uint8_t* c = static_cast<const uint8_t*>(config);
  if (c[0] == 0) return TileRelease();
  if (c[0] != 1) throw std::logic_error("emulated LDTILECFG: only palettes 0 and 1 exist");
  for (int i = 2; i < 16; ++i) {
    if (c[i] != 0) throw std::logic_error("emulated LDTILECFG: reserved bytes must be 0");
  }
  TileState s;
  for (int t = 0; t < 8; ++t) {
    std::memcpy(&s.colsb[t], c + 16 + 2 * t, 2);
    s.rows[t] = c[48 + t];
    if (s.rows[t] > 16 || s.colsb[t] > 64 || (s.rows[t] == 0) != (s.colsb[t] == 0)) {
      throw std::logic_error("emulated LDTILECFG: tile shape");
    }
  }
  s.configured = true;
  Tiles() = s;
}

// A tile instruction before LDTILECFG, or on a tile the configuration left empty, faults.
inline TileState& ConfiguredTiles(std::initializer_list<int> tiles) {
  TileState& s = Tiles();
  if (!s.configured) throw std::logic_error("emulated AMX: tile used before LDTILECFG");
  for (int t : tiles) {
    if (t < 0 || t > 7 || s.rows[t] == 0) {
      throw std::logic_error("emulated AMX: tile not configured");
    }
  }
  return s;
}

inline void TileLoad(int t, const void* base, int64_t stride) {
  TileState& s = ConfiguredTiles({t});
  std::memset(s.data[t], 0, sizeof(s.data[t]));
  for (int r = 0; r < s.rows[t]; ++r) {
    std::memcpy(s.data[t][r], static_cast<const uint8_t*>(base) + r * stride, s.colsb[t]);
  }
}

inline void TileStore(int t, void* base, int64_t stride) {
  const TileState& s = ConfiguredTiles({t});
  for (int r = 0; r < s.rows[t]; ++r) {
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, s.data[t][r], s.colsb[t]);
  }
}

inline void TileZero(int t) { std::memset(ConfiguredTiles({t}).data[t], 0, 16 * 64); }

// The checks every tile product makes (`name` for the error): three configured tiles, none
// twice, C of A's rows, B of one row per 4-byte group of A's row (a k-pair or k-quad) and C's
// width. Returns the state; C has rows[c] rows of colsb[c] / 4 outputs.
inline TileState& CheckedProductTiles(const char* name, int c, int a, int b) {
  TileState& s = ConfiguredTiles({c, a, b});
  if (c == a || c == b || a == b) throw std::logic_error(std::string(name) + ": a tile twice");
  if (s.rows[a] != s.rows[c] || s.rows[b] != s.colsb[a] / 4 || s.colsb[b] != s.colsb[c]) {
    throw std::logic_error(std::string(name) + ": tile shapes do not match");
  }
  return s;
}

// C[m][n] += (sum over k-pairs p of A[m][2p] B[p][2n]) + (the same over the odd halves).
inline void TileDpbf16ps(int c, int a, int b) {
  TileState& s = CheckedProductTiles("emulated TDPBF16PS", c, a, b);
  const int m_rows = s.rows[c], n_cols = s.colsb[c] / 4, pairs = s.colsb[a] / 4;
  for (int m = 0; m < m_rows; ++m) {
    float acc[16];
    std::memcpy(acc, s.data[c][m], sizeof(acc));
    for (int n = 0; n < n_cols; ++n) {
      float even = 0.0f, odd = 0.0f;
      for (int p = 0; p < pairs; ++p) {
        uint16_t x[2], w[2];
        std::memcpy(x, s.data[a][m] + 4 * p, 4);
        std::memcpy(w, s.data[b][p] + 4 * n, 4);
        even = FlushDenormal(std::fma(Bf16Input(x[0]), Bf16Input(w[0]), even));
        odd = FlushDenormal(std::fma(Bf16Input(x[1]), Bf16Input(w[1]), odd));
      }
      acc[n] = FlushDenormal(FlushDenormal(acc[n]) + FlushDenormal(even + odd));
    }
    std::memcpy(s.data[c][m], acc, 4 * n_cols);
  }
}

// C[m][n] += sum over k-quads p of (sum over i < 4 of u8 A[m][4p + i] * s8 B[p][4n + i]), int32
// arithmetic that wraps (done in uint32: no signed overflow in the emulation itself). Sums modulo
// 2^32 are the same in any order, so the loops run in the order that vectorizes (n innermost).
inline void TileDpbusd(int c, int a, int b) {
  TileState& s = CheckedProductTiles("emulated TDPBUSD", c, a, b);
  const int m_rows = s.rows[c], n_cols = s.colsb[c] / 4, quads = s.colsb[a] / 4;
  for (int m = 0; m < m_rows; ++m) {
    uint32_t acc[16];
    std::memcpy(acc, s.data[c][m], sizeof(acc));
    for (int p = 0; p < quads; ++p) {
      for (int i = 0; i < 4; ++i) {
        const uint32_t x = s.data[a][m][4 * p + i];
        const uint8_t* w = s.data[b][p] + i;
        for (int n = 0; n < n_cols; ++n) {
          acc[n] += x * static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(w[4 * n])));
        }
      }
    }
    std::memcpy(s.data[c][m], acc, 4 * n_cols);
  }
}

}  // namespace latent::kernels::emulated

#undef _tile_loadconfig
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#undef _tile_dpbusd
#undef _tile_release
// The tile instructions the kernels do not use: GCC's are inline asm with no target check, so
// leaving them would let one run for real. Undefined, a use fails to compile.
#undef _tile_stream_loadd
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbuud
#define _tile_loadconfig(config) latent::kernels::emulated::TileLoadConfig(config)
#define _tile_loadd(t, base, stride) latent::kernels::emulated::TileLoad(t, base, stride)
#define _tile_stored(t, base, stride) latent::kernels::emulated::TileStore(t, base, stride)
#define _tile_zero(t) latent::kernels::emulated::TileZero(t)
#define _tile_dpbf16ps(c, a, b) latent::kernels::emulated::TileDpbf16ps(c, a, b)
#define _tile_dpbusd(c, a, b) latent::kernels::emulated::TileDpbusd(c, a, b)
#define _tile_release() latent::kernels::emulated::TileRelease()
