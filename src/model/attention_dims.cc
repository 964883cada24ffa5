#include "model/attention_dims.h"

#include <algorithm>
#include <limits>

#include "model/model.h"

namespace latent::model {

MlaDims MlaDimsOf(const ModelConfig& c) {
  MlaDims d{c.num_attention_heads, c.q_lora_rank.value_or(0), c.kv_lora_rank,
            c.qk_nope_head_dim,    c.qk_rope_head_dim,        c.v_head_dim};
  d.q_scale = static_cast<float>(c.mla_q_scale);
  d.latent_scale = static_cast<float>(c.mla_latent_scale);
  return d;
}

DsaDims DsaDimsOf(const ModelConfig& c) {
  DsaDims d{c.index_n_heads, c.index_head_dim, c.index_topk, c.index_rope_last,
            static_cast<float>(c.index_k_norm_eps)};
  d.kpool = c.index_kpool;
  return d;
}

int64_t FirstSelectingPosition(const ModelConfig& c) {
  if (c.index_kpool <= 0) return c.index_topk;  // ops/dsa_indexer.cc: position + 1 > topk
  // ops/kpool_indexer.cc: (position + 1) / kpool complete pools > topk / kpool
  return (c.index_topk / c.index_kpool + 1) * c.index_kpool - 1;
}

cache::RegimeBounds ExpandedPositions(const ModelConfig& config, AttentionForm form,
                                      int64_t prompt_tokens) {
  switch (form) {
    case AttentionForm::kAbsorbed:
      return cache::RegimeBounds::Both(0);
    case AttentionForm::kExpanded:
      return cache::RegimeBounds::Both(std::numeric_limits<int64_t>::max());
    case AttentionForm::kAuto:
      break;
  }
  const MlaDims dims = MlaDimsOf(config);
  const int64_t causal = ops::PreferExpanded(dims, prompt_tokens) ? prompt_tokens : 0;
  if (!config.is_dsa()) return cache::RegimeBounds::Both(causal);
  // DSA: a position from the first that selects on attends the index_topk positions its indexer
  // selected, a set of its own. Expanded, that is one query over per-head rows (no block of keys
  // shared with other queries, f32 products: 40 t/s for an 8k prompt of
  // bench/.cache/models/v32-dsa-L2); absorbed, the token's heads share the latent rows as tile
  // rows, as in its decode steps. The positions before it attend causally, which the expanded
  // form runs a block of keys at a time for many queries.
  const int64_t causal_part = std::min(prompt_tokens, FirstSelectingPosition(config));
  const int64_t selected = ops::PreferExpanded(dims, causal_part) ? causal_part : 0;
  // The layers that attend their whole prefix or window (dots3_note's) stay expanded past it:
  // absorbed, a long prompt would cost them 2-4x the FLOPs. Without such layers the second bound
  // follows the first, so that it never splits a prefix-cache block's identity.
  return {selected, config.dsa_causal_layers ? causal : selected};
}

}  // namespace latent::model
