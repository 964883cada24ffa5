// The Model interface: one forward pass over a packed batch of tokens from any number of
// sequences. Each layer writes the rows it caches for the new tokens into the paged cache
// (ForwardBatch::rows), then reads back the rows of every token its tokens attend to.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "cache/paged_rows.h"
#include "model/load_options.h"
#include "model/model_config.h"
#include "ops/attention_batch.h"

namespace latent::model {

// A packed batch: T tokens of S sequences, with everything a step needs to read and write their
// cache rows. What attention and the DSA indexers read (positions, the grouping by sequence, the
// block-table rows, the PagedRows view) is its ops::AttentionBatch; the rest is the model's.
// Built once per step (engine::BuildBatch, or AddSequence below); layers read the grouping from
// here.
struct ForwardBatch : ops::AttentionBatch {
  std::vector<int32_t> token_ids;    // [T]
  std::vector<int32_t> logits_rows;  // [R] batch rows whose logits are wanted
  // [S] or empty: each sequence's per-sequence state slot in rows->states (hybrid models'
  // linear-attention layers), pushed by the caller after AddSequence; empty: slot s is slot s
  // (the CLI tools, which run one sequence in a cache of their own).
  std::vector<int32_t> state_slots;

  // The state slot of sequence `s`.
  int32_t StateSlot(int64_t s) const { return state_slots.empty() ? static_cast<int32_t>(s) : state_slots.at(s); }
  // Empties every array, keeping their memory and `rows`.
  void Clear();
  // Appends sequence `tokens` at positions [first_position, first_position + tokens.size()) with
  // its block-table row as the next slot and its ExpandedPositions; logits of its last token when
  // `last_logits`, of every token when `all_logits`.
  void AddSequence(std::span<const int32_t> tokens, int64_t first_position,
                   std::span<const cache::BlockId> table, const cache::RegimeBounds& expanded_below,
                   bool last_logits, bool all_logits = false);
  // Fails unless the per-sequence arrays agree with token_ids/positions/seq_slots and every
  // table covers its sequence's context (a malformed batch, not bad input).
  void Validate() const;
};

// The rows a layer caches per token (DESIGN §4).
enum CacheRowKind : int {
  kLatentRow = 0,  // mla.latent: [kv_a_layernorm(c_kv) | rotated k_pe], C + dr values
  kIndexRow = 1,   // dsa.index_k: the DSA indexer's key, index_head_dim values
};

using ops::AttentionForm;

// The positions of a sequence with `prompt_tokens` prompt tokens that `form` computes expanded,
// [0, bound) for each kind of layer. Under kAuto the whole prompt when it is long enough for the
// expanded form to cost fewer FLOPs, else none; in the layers that attend a DSA selection only
// the positions before FirstSelectingPosition (those from it on attend the positions their
// indexer selected: absorbed, as a decode does), while a DSA model's other layers
// (ModelConfig::dsa_causal_layers) keep the whole prompt expanded. Generated tokens are always
// absorbed. A function of the request alone (not of how its prompt was chunked, batched or
// recomputed after a preemption), because the two forms round differently and seeded sampling
// over a flat distribution would show it.
cache::RegimeBounds ExpandedPositions(const ModelConfig& config, AttentionForm form,
                                      int64_t prompt_tokens);
// In a DSA model, the first position whose indexer selects (index_topk; with KPool's pools of
// index_kpool tokens, the first that sees more complete pools than it keeps).
int64_t FirstSelectingPosition(const ModelConfig& config);

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
  // The precision its linears run in (LoadOptions::precision resolved; never kAuto).
  virtual Precision precision() const { return Precision::kF32; }
  // Sizes the forward's working memory for steps of up to `max_tokens` tokens, once (the engine
  // calls it at start with its token budget); every step then reuses it. A larger step still
  // runs (growing it), so a tool that never calls this works too.
  virtual void Reserve(int64_t max_tokens) { (void)max_tokens; }
  // The engine's cache, once built and before any step (Engine's constructor). A scale-out job's
  // rank 0 sends its layout to the other ranks here, which build their replicas and report back,
  // so that a rank that cannot hold one stops start-up instead of the first request
  // (engine/distributed_model.h). Tools that build their own cache skip it: their first step
  // sends it.
  virtual void AttachCache(const cache::PagedRows& rows) const { (void)rows; }
  // Runs `batch`, writing and reading cache rows through batch.rows; writes logits
  // [R, vocab_size] for batch.logits_rows. One call at a time per model: the steps share the
  // model's working memory (Reserve).
  virtual void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
                       ForwardTrace* trace = nullptr) const = 0;
  // Sequences whose cached rows differ for the same leading tokens get different salts, so
  // that prefix caching never hands one the other's blocks: LongRoPE rotates every prompt
  // position by the long or the short frequencies depending on the prompt's length.
  virtual uint64_t PrefixCacheSalt(int64_t prompt_len) const {
    (void)prompt_len;
    return 0;
  }
  // Copies every row of the first `tokens` positions of block `from` into block `to` (forking a
  // partially filled block). Through the model so that the ranks of a scale-out job, which each
  // hold a replica of the cache, all copy (engine/distributed_model.h).
  virtual void CopyCacheBlock(const cache::PagedRows& rows, cache::BlockId from, cache::BlockId to,
                              uint32_t tokens) const {
    rows.CopyBlock(from, to, tokens);
  }
  // Copies every per-sequence state row of slot `from` into slot `to` (forking a hybrid model's
  // sequence). Through the model for the same reason as CopyCacheBlock: every rank's replica of
  // the state slots must copy.
  virtual void CopyStateSlot(const cache::PagedRows& rows, cache::StateSlot from,
                             cache::StateSlot to) const {
    rows.states.CopySlot(from, to);
  }
};

// Loads the checkpoint in `dir` with the architecture its config.json names.
std::unique_ptr<Model> LoadModel(const std::string& dir, const LoadOptions& options = {});

}  // namespace latent::model
