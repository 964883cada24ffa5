// Weight quantization at load (`--quantize int8|w8a8`, model/load_options.h): per-row symmetric
// int8 with f32 scales (and, for W8A8, int32 row sums), into buffers the model owns (the
// checkpoint's pages of the converted tensors are released from the mapping).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/quantize_row.h"
#include "kernels/weight_ref.h"
#include "model/load_options.h"
#include "model/model_config.h"
#include "model/weight_table.h"
#include "weights/checkpoint.h"

namespace latent::model {

// The row quantizer (kernels/quantize_row.h): the one rule for weights and W8A8 activations.
using kernels::QuantizeRowInt8;

// The owner of weights converted at load.
struct OwnedWeights {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
};

// `w` (any dtype the kernels read; each row dequantized to f32 first) as an I8 WeightRef with
// per-row f32 scales, in a new buffer kept by `owned`. Rows are converted in parallel.
// `row_sums`: also the int32 row sums that select the W8A8 linear (kernels/weight_ref.h).
kernels::WeightRef QuantizeInt8(const kernels::WeightRef& w, OwnedWeights& owned,
                                bool row_sums = false);

// Bytes of a weight view as stored: its elements plus, for fp8/int8, its scales (and row sums).
int64_t WeightBytes(const kernels::WeightRef& w);

// Whether `--quantize int8` converts this checkpoint tensor, as its family's tensor list says
// (lm_head.weight included; with tied embeddings the LM head is an int8 copy of
// model.embed_tokens.weight, which itself stays).
bool QuantizedByInt8(const ExpectedWeight& w);

// Whether `--quantize w8a8` also quantizes the activations of this converted tensor (W8A8, with
// row sums): every one but kv_b_proj (model/load_options.h says why), as the tensor list says.
bool W8A8Activations(const ExpectedWeight& w);

// Bytes of the decoder's weights in memory after loading with `quantize`: the checkpoint's
// tensors as stored (fp8 scales included), with the converted ones as int8 plus f32 row scales
// (plus int32 row sums for W8A8).
// `checkpoint_bytes` (optional) gets the bytes as stored. `shard`: those one rank of an expert-
// parallel job holds (routed experts outside it not counted).
int64_t LoadedWeightBytes(const ModelConfig& config, const weights::Checkpoint& ckpt,
                          const CheckpointReport& report, WeightQuantization quantize,
                          int64_t* checkpoint_bytes = nullptr, const ExpertShard& shard = {});

// Bytes of one listed tensor as some checkpoint stores it (fp8 scales included).
using StoredBytesFn = std::function<int64_t(const ExpectedWeight&)>;

// The same count over `weights` stored as `stored_bytes` says: the one rule (shards, fused
// experts, --quantize conversions, the tied int8 LM head) behind both the checkpoint on disk
// (above) and a checkpoint described by config.json alone (StoredBytes).
int64_t LoadedWeightBytes(const ModelConfig& config, const std::vector<ExpectedWeight>& weights,
                          const StoredBytesFn& stored_bytes, WeightQuantization quantize,
                          int64_t* checkpoint_bytes = nullptr, const ExpertShard& shard = {});

// How a checkpoint known only from config.json stores its tensors. Routers and buffers are f32
// in both (as transformers keeps them, _keep_in_fp32_modules_strict, and as latent loads them).
enum class StoredDType : uint8_t {
  kBF16,      // every other tensor bf16
  kFP8Block,  // DeepSeek's format, as the hub's fp8 checkpoints ship: Fp8Eligible tensors fp8
              // e4m3 with one f32 scale per [block_n, block_k] block (weight_scale_inv), the rest
              // bf16
};
const char* StoredDTypeName(StoredDType dtype);  // "bf16", "fp8"

// Bytes of `w` stored as `dtype` (fp8 blocks of block_n x block_k).
int64_t StoredBytes(const ExpectedWeight& w, StoredDType dtype, int64_t block_n, int64_t block_k);

}  // namespace latent::model
