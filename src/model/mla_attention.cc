#include "model/mla_attention.h"

#include <algorithm>
#include <map>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kernel_table.h"

namespace latent::model {
namespace {

// q.k and q_nope/q_pe norms use this eps regardless of rms_norm_eps, as transformers does.
constexpr float kLatentNormEps = 1e-6f;

void Linear(const float* x, int64_t m, const kernels::WeightRef& w, float* y) {
  std::vector<float> scratch(w.k);
  kernels::BestKernels().linear(x, m, w, y, scratch.data());
}

// The tokens of one sequence in the batch.
struct SequenceTokens {
  std::vector<int64_t> rows;  // batch rows, in position order
  int64_t context = 0;        // rows 0..context-1 are attended by the last token
};

std::map<int32_t, SequenceTokens> GroupBySequence(const ForwardBatch& batch) {
  std::map<int32_t, SequenceTokens> seqs;
  for (size_t t = 0; t < batch.token_ids.size(); ++t) {
    SequenceTokens& s = seqs[batch.seq_slots[t]];
    s.rows.push_back(static_cast<int64_t>(t));
    s.context = std::max(s.context, batch.positions[t] + 1);
  }
  return seqs;
}

// Absorbed: fold W_UK into the query, attend over the latent rows with one shared head,
// then apply W_UV. q [H, dqk] of one token -> attn_out [H, dv].
void AbsorbedToken(const MlaDims& d, const kernels::WeightRef& kv_b, const float* q,
                   const std::vector<const float*>& rows, float scale, float* attn_out) {
  const auto& k = kernels::BestKernels();
  const int64_t head_rows = d.nope + d.v;
  std::vector<float> q_cat(d.heads * d.row(), 0.0f);  // [H, C + dr]: [q_lat | q_pe]
  std::vector<float> w_row(d.latent);
  for (int64_t h = 0; h < d.heads; ++h) {
    float* q_lat = &q_cat[h * d.row()];
    const float* q_nope = q + h * d.qk();
    for (int64_t j = 0; j < d.nope; ++j) {  // q_lat = q_nope . W_UK[h]
      k.dequant_row(kv_b, h * head_rows + j, w_row.data());
      for (int64_t c = 0; c < d.latent; ++c) q_lat[c] += q_nope[j] * w_row[c];
    }
    std::copy(q_nope + d.nope, q_nope + d.qk(), q_lat + d.latent);
  }
  std::vector<float> out_lat(d.heads * d.latent);
  std::vector<float> scores(rows.size());
  kernels::AttentionArgs args;
  args.q = q_cat.data();
  args.num_heads = d.heads;
  args.qk_dim = d.row();
  args.keys = rows.data();
  args.key_head_stride = 0;
  args.values = rows.data();  // The value is the latent part of the same row.
  args.value_head_stride = 0;
  args.v_dim = d.latent;
  args.length = static_cast<int64_t>(rows.size());
  args.scale = scale;
  args.out = out_lat.data();
  args.scratch = scores.data();
  kernels::AttentionRef(args);
  for (int64_t h = 0; h < d.heads; ++h) {  // out[h] = out_lat[h] . W_UV[h]^T
    const float* lat = &out_lat[h * d.latent];
    for (int64_t i = 0; i < d.v; ++i) {
      k.dequant_row(kv_b, h * head_rows + d.nope + i, w_row.data());
      float acc = 0.0f;
      for (int64_t c = 0; c < d.latent; ++c) acc += lat[c] * w_row[c];
      attn_out[h * d.v + i] = acc;
    }
  }
}

// Expanded: rebuild k_nope and v of the sequence's first `context` tokens through kv_b_proj,
// then ordinary attention for each of its batch tokens.
void ExpandedSequence(const MlaDims& d, const kernels::WeightRef& kv_b, const SequenceTokens& seq,
                      const std::vector<const float*>& rows, const ForwardBatch& batch,
                      const DsaSelection* selection, const float* q, float scale, float* attn_out) {
  const int64_t n = seq.context;
  const int64_t head_rows = d.nope + d.v;
  std::vector<float> latents(n * d.latent);  // [n, C]
  for (int64_t t = 0; t < n; ++t) std::copy(rows[t], rows[t] + d.latent, &latents[t * d.latent]);
  std::vector<float> kv(n * d.heads * head_rows);  // [n, H, dn + dv]
  Linear(latents.data(), n, kv_b, kv.data());
  std::vector<float> keys(n * d.heads * d.qk());  // [n, H, dn + dr]
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < d.heads; ++h) {
      const float* src = &kv[(t * d.heads + h) * head_rows];
      float* dst = &keys[(t * d.heads + h) * d.qk()];
      std::copy(src, src + d.nope, dst);
      std::copy(rows[t] + d.latent, rows[t] + d.row(), dst + d.nope);  // shared rotary key
    }
  }
  std::vector<const float*> key_ptrs(n), value_ptrs(n);
  for (int64_t t = 0; t < n; ++t) {
    key_ptrs[t] = &keys[t * d.heads * d.qk()];
    value_ptrs[t] = &kv[t * d.heads * head_rows + d.nope];
  }
  std::vector<float> scores(n);
  std::vector<const float*> picked_keys, picked_values;
  for (int64_t row : seq.rows) {
    kernels::AttentionArgs args;
    args.q = q + row * d.heads * d.qk();
    args.num_heads = d.heads;
    args.qk_dim = d.qk();
    args.keys = key_ptrs.data();
    args.key_head_stride = d.qk();
    args.values = value_ptrs.data();
    args.value_head_stride = head_rows;
    args.v_dim = d.v;
    args.length = batch.positions[row] + 1;  // causal: up to and including itself
    if (selection != nullptr && !(*selection)[row].empty()) {
      const std::vector<int32_t>& picked = (*selection)[row];
      picked_keys.clear();
      picked_values.clear();
      for (int32_t p : picked) {
        picked_keys.push_back(key_ptrs[p]);
        picked_values.push_back(value_ptrs[p]);
      }
      args.keys = picked_keys.data();
      args.values = picked_values.data();
      args.length = static_cast<int64_t>(picked.size());
    }
    args.scale = scale;
    args.out = attn_out + row * d.heads * d.v;
    args.scratch = scores.data();
    kernels::AttentionRef(args);
  }
}

}  // namespace

MlaDims MlaDimsOf(const ModelConfig& c) {
  return {c.num_attention_heads, c.q_lora_rank.value_or(0), c.kv_lora_rank,
          c.qk_nope_head_dim,    c.qk_rope_head_dim,        c.v_head_dim};
}

bool PreferExpanded(const MlaDims& d, int64_t chunk_tokens) {
  // Per attended token and head, expanded pays C*(dn+dv) once for the whole chunk; per chunk
  // token and attended token, absorbed pays (2C + dr) against expanded's (dqk + dv).
  const int64_t absorbed_extra = 2 * d.latent + d.rope - d.qk() - d.v;
  return chunk_tokens * absorbed_extra > d.latent * (d.nope + d.v);
}

void MlaAttentionForward(const MlaDims& d, const AttentionWeights& w, const ops::Rope& rope,
                         int64_t layer, const ForwardBatch& batch, const float* x,
                         int64_t hidden, LatentCache& cache, AttentionForm form,
                         const DsaLayer* dsa, float* out) {
  const auto& k = kernels::BestKernels();
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());

  // Queries [T, H, dn + dr].
  std::vector<float> q(tokens * d.heads * d.qk());
  std::vector<float> q_a;  // [T, Q] q_a_layernorm(q_a_proj(x)); the DSA indexer reads it too.
  if (w.q_proj) {
    Linear(x, tokens, *w.q_proj, q.data());
  } else {
    q_a.resize(tokens * d.q_lora);
    Linear(x, tokens, *w.q_a, q_a.data());
    k.rms_norm(q_a.data(), tokens, d.q_lora, w.q_a_norm.data, w.q_a_norm.dtype, kLatentNormEps,
               q_a.data());
    Linear(q_a.data(), tokens, *w.q_b, q.data());
  }

  // Latent rows [T, C + dr]: normalised c_kv, then the rotated shared key; written to the cache.
  std::vector<float> kv_a(tokens * d.row());
  Linear(x, tokens, w.kv_a, kv_a.data());
  std::vector<float> cos(d.rope / 2), sin(d.rope / 2);
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = &kv_a[t * d.row()];
    k.rms_norm(row, 1, d.latent, w.kv_a_norm.data, w.kv_a_norm.dtype, kLatentNormEps, row);
    rope.CosSin(batch.positions[t], cos.data(), sin.data());
    rope.Apply(row + d.latent, cos.data(), sin.data());
    for (int64_t h = 0; h < d.heads; ++h) {
      rope.Apply(&q[(t * d.heads + h) * d.qk() + d.nope], cos.data(), sin.data());
    }
    cache.WriteRow(layer, kLatentRow, batch.seq_slots[t], batch.positions[t], row);
  }

  const DsaSelection* selection = nullptr;
  if (dsa != nullptr) {
    if (dsa->indexer != nullptr) {
      RunDsaIndexer(dsa->dims, *dsa->indexer, *dsa->rope, layer, batch, x, hidden, q_a.data(),
                    d.q_lora, cache, *dsa->selection);
    }
    selection = dsa->selection;
  }

  // Attention per sequence, over its cached rows (or the ones DSA selected).
  std::vector<float> attn(tokens * d.heads * d.v);  // [T, H, dv]
  for (const auto& [slot, seq] : GroupBySequence(batch)) {
    std::vector<float> gathered(seq.context * d.row());  // [context, C + dr]
    cache.GatherRows(layer, kLatentRow, slot, seq.context, gathered.data());
    std::vector<const float*> rows(seq.context);
    for (int64_t p = 0; p < seq.context; ++p) rows[p] = &gathered[p * d.row()];
    const bool expanded = form == AttentionForm::kExpanded ||
                          (form == AttentionForm::kAuto &&
                           PreferExpanded(d, static_cast<int64_t>(seq.rows.size())));
    if (expanded) {
      ExpandedSequence(d, w.kv_b, seq, rows, batch, selection, q.data(), rope.softmax_scale, attn.data());
      continue;
    }
    for (int64_t row : seq.rows) {
      std::vector<const float*> visible;
      if (selection != nullptr && !(*selection)[row].empty()) {
        for (int32_t p : (*selection)[row]) visible.push_back(rows[p]);
      } else {
        visible.assign(rows.begin(), rows.begin() + batch.positions[row] + 1);
      }
      AbsorbedToken(d, w.kv_b, &q[row * d.heads * d.qk()], visible, rope.softmax_scale,
                    &attn[row * d.heads * d.v]);
    }
  }
  Linear(attn.data(), tokens, w.o, out);
}

}  // namespace latent::model
