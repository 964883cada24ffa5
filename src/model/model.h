// The Model interface: one forward pass over a packed batch of tokens from any number of
// sequences. Each layer writes the rows it caches for the new tokens, then reads back the rows
// of every token its tokens attend to.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/load_options.h"
#include "model/model_config.h"

namespace latent::model {

// A packed batch: T tokens, each with its sequence's cache slot and its absolute position.
// A sequence's tokens in the batch have consecutive positions and sit after its cached ones.
struct ForwardBatch {
  std::vector<int32_t> token_ids;    // [T]
  std::vector<int64_t> positions;    // [T]
  std::vector<int32_t> seq_slots;    // [T] cache slot of the token's sequence
  std::vector<int32_t> logits_rows;  // [R] batch rows whose logits are wanted
};

// The rows a layer caches per token (DESIGN §4).
enum CacheRowKind : int {
  kLatentRow = 0,  // mla.latent: [kv_a_layernorm(c_kv) | rotated k_pe], C + dr values
  kIndexRow = 1,   // dsa.index_k: the DSA indexer's key, index_head_dim values
};

// Where the cached rows live. Storage may hold them in another dtype (bf16); the model always
// hands over and receives f32.
class LatentCache {
 public:
  virtual ~LatentCache() = default;
  // Stores row `row` of (layer, slot, position).
  virtual void WriteRow(int64_t layer, int row, int32_t slot, int64_t position,
                        const float* values) = 0;
  // Copies row `row` of positions [0, count) of (layer, slot) to out [count, width].
  virtual void GatherRows(int64_t layer, int row, int32_t slot, int64_t count,
                          float* out) const = 0;
  // Copies row `row` of the listed positions of (layer, slot) to out [positions.size(), width]
  // (DSA: only the rows the indexer selected).
  virtual void GatherPositions(int64_t layer, int row, int32_t slot,
                               std::span<const int32_t> positions, float* out) const = 0;
};

// How MLA attention is computed (DESIGN §5). kAuto picks per sequence by chunk length.
enum class AttentionForm : uint8_t { kAuto, kAbsorbed, kExpanded };

// Optional record of what a forward pass decided, for tests and debugging.
struct ForwardTrace {
  // experts[layer]: [T, k] chosen experts, ascending per token; empty for dense layers.
  std::vector<std::vector<int32_t>> experts;
  // selected[layer][t]: the key positions DSA kept for token t, ascending; empty when the
  // token attended densely (context <= index_topk) or the model has no DSA.
  std::vector<std::vector<std::vector<int32_t>>> selected;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs `batch`; writes logits [R, vocab_size] for batch.logits_rows.
  virtual void Forward(const ForwardBatch& batch, LatentCache& cache, AttentionForm form,
                       float* logits, ForwardTrace* trace = nullptr) const = 0;
};

// Loads the checkpoint in `dir` with the architecture its config.json names.
std::unique_ptr<Model> LoadModel(const std::string& dir, const LoadOptions& options = {});

}  // namespace latent::model
