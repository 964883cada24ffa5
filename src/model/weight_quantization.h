// Weight quantization at load (`--quantize int8`, model/load_options.h): per-row symmetric int8
// with f32 scales, into buffers the model owns (the checkpoint's pages of the converted tensors
// are released from the mapping).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/weight_ref.h"
#include "model/load_options.h"
#include "model/model_config.h"
#include "model/weight_table.h"
#include "weights/checkpoint.h"

namespace latent::model {

// Quantizes one f32 row: scale = max |w| / 127 (f32), q[c] = round-to-nearest-even(w[c] / scale)
// clamped to [-127, 127]; an all-zero row gets scale 0 and q = 0. Returns the scale.
float QuantizeRowInt8(const float* w, int64_t k, int8_t* q);

// The owner of weights converted at load.
struct OwnedWeights {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
};

// `w` (any dtype the kernels read; each row dequantized to f32 first) as an I8 WeightRef with
// per-row f32 scales, in a new buffer kept by `owned`. Rows are converted in parallel.
kernels::WeightRef QuantizeInt8(const kernels::WeightRef& w, OwnedWeights& owned);

// Bytes of a weight view as stored: its elements plus, for fp8/int8, its scales.
int64_t WeightBytes(const kernels::WeightRef& w);

// Whether `--quantize int8` converts this checkpoint tensor (lm_head.weight included; with tied
// embeddings the LM head is an int8 copy of model.embed_tokens.weight, which itself stays).
bool QuantizedByInt8(const ExpectedWeight& w);

// Bytes of the decoder's weights in memory after loading with `quantize`: the checkpoint's
// tensors as stored (fp8 scales included), with the converted ones as int8 plus f32 row scales.
// `checkpoint_bytes` (optional) gets the bytes as stored.
int64_t LoadedWeightBytes(const ModelConfig& config, const weights::Checkpoint& ckpt,
                          const CheckpointReport& report, WeightQuantization quantize,
                          int64_t* checkpoint_bytes = nullptr);

}  // namespace latent::model
