// Named dump points for debugging a model family against transformers: with
// LATENT_DUMP=name[,name] (or "all"), each forward pass prints the named intermediate tensors of
// every layer to stderr, one line each:
//   LATENT_DUMP <name> layer=<l> shape=<rows>x<cols> v0 v1 ...
// (row-major f32, 9 significant digits). tools/compare_dump.py runs a tiny model this way and
// compares the lines with transformers' forward hooks. Off (one branch per point) when unset.
#pragma once

#include <cstdint>
#include <string_view>

namespace latent::dump {

// Whether LATENT_DUMP names `name` (read once, at the first call).
bool Wants(std::string_view name);

// Prints `data` [rows, cols] as dump point `name` of `layer` (-1: not in a layer), if wanted.
void Tensor(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols);

// Same for a column slice: columns [col0, col0 + cols) of rows of `stride` floats.
void Columns(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t stride,
             int64_t col0, int64_t cols);

}  // namespace latent::dump
