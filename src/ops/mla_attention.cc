#include "ops/mla_attention.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "base/dump.h"
#include "base/error.h"
#include "base/profile.h"
#include "kernels/attention.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "ops/attended_rows.h"
#include "ops/attention_workspace.h"
#include "ops/norm.h"
#include "ops/output_gate.h"
#include "ops/position_scale.h"
#include "threads/thread_pool.h"

namespace latent::ops {
namespace {

using kernels::Linear;

// The tokens of one sequence in the batch (AttentionBatch's grouping).
struct SequenceTokens {
  int64_t begin = 0, end = 0;  // batch rows [begin, end), in position order
  int64_t context = 0;         // rows 0..context-1 are attended by the last token
};

SequenceTokens SequenceOf(const AttentionBatch& batch, int64_t s) {
  return {batch.seq_starts[s], batch.seq_starts[s + 1], batch.context_lens[s]};
}

// A.X-K2's fused projection: [q_a_norm | q_a_raw] [T, 2Q] through q_gate gives per head dqk query
// values then dv output gate logits; split into q [T, H, dqk] and gate [T, H, dv].
void QueryAndGate(const MlaDims& d, const kernels::WeightRef& q_gate, const float* q_a_norm,
                  const float* q_a_raw, int64_t tokens, float* q, float* gate) {
  std::vector<float> in(tokens * 2 * d.q_lora);  // [T, 2Q]
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy(q_a_norm + t * d.q_lora, q_a_norm + (t + 1) * d.q_lora, &in[t * 2 * d.q_lora]);
    std::copy(q_a_raw + t * d.q_lora, q_a_raw + (t + 1) * d.q_lora, &in[(t * 2 + 1) * d.q_lora]);
  }
  const int64_t per_head = d.qk() + d.v;
  std::vector<float> fused(tokens * d.heads * per_head);  // [T, H, dqk + dv]
  Linear(in.data(), tokens, q_gate, fused.data());
  for (int64_t i = 0; i < tokens * d.heads; ++i) {  // one (token, head) at a time
    const float* src = &fused[i * per_head];
    std::copy(src, src + d.qk(), q + i * d.qk());
    std::copy(src + d.qk(), src + per_head, gate + i * d.v);
  }
}

// Absorbed form, for a group of batch tokens of any sequences. W_UK is folded into the queries
// of the whole group at once (each head's W_UK is read once per group, not once per token):
// q_cat [n, H, C + dr] = [q_nope . W_UK[h] | q_pe] for the batch rows `group`.
// With w.uk_t (AttentionWeights), each head's fold is a linear over its rows of it; otherwise a
// transposed_linear over kv_b's key rows.
void AbsorbQueries(const MlaDims& d, const AttentionWeights& w, const float* q,
                   const std::vector<int64_t>& group, float* q_cat) {
  const auto& k = kernels::BestKernels();
  const int64_t n = static_cast<int64_t>(group.size());
  const int64_t head_rows = d.nope + d.v;
  // The loader cuts uk_t to this layer's shape (model/deepseek_weights.cc, AddKeyFolds).
  LATENT_CHECK(!w.uk_t || (w.uk_t->k == d.nope && w.uk_t->n == d.heads * d.latent));
  threads::ParallelFor(d.heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> q_nope(n * d.nope), q_lat(n * d.latent);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const float* src = q + (group[i] * d.heads + h) * d.qk();
        std::copy(src, src + d.nope, &q_nope[i * d.nope]);
      }
      if (w.uk_t) {
        Linear(q_nope.data(), n, w.uk_t->Rows(h * d.latent, d.latent), q_lat.data());
      } else {
        k.transposed_linear(q_nope.data(), n, w.kv_b.Rows(h * head_rows, d.nope), q_lat.data());
      }
      for (int64_t i = 0; i < n; ++i) {
        const float* src = q + (group[i] * d.heads + h) * d.qk();
        float* dst = q_cat + (i * d.heads + h) * d.row();
        std::copy(&q_lat[i * d.latent], &q_lat[(i + 1) * d.latent], dst);
        std::copy(src + d.nope, src + d.qk(), dst + d.latent);
      }
    }
  });
}

// The union of the selections of batch rows group[i0, i1), ascending, into `wanted`. Where they
// cover a good share of the context (a prefill run of 64 tokens, whose sort would order 64 x
// index_topk positions), by marks over the context, which also leave each position's index in
// `wanted` in `index_of` ([context], -1 where not selected): returns true. Where they are sparse
// (a few verify tokens at a long context, where marks would walk all of it), by a sort: returns
// false, and an index is found by a binary search of `wanted`.
bool SelectionUnion(const DsaSelection& selection, const std::vector<int64_t>& group, int64_t i0,
                    int64_t i1, int64_t context, std::vector<int32_t>& wanted,
                    std::vector<int32_t>& index_of) {
  int64_t picks = 0;
  for (int64_t i = i0; i < i1; ++i) picks += static_cast<int64_t>(selection[group[i]].size());
  wanted.clear();
  if (picks * 8 < context) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int32_t p : selection[group[i]]) {
        LATENT_CHECK(p >= 0 && p < context);
        wanted.push_back(p);
      }
    }
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    return false;
  }
  index_of.assign(context, -1);
  for (int64_t i = i0; i < i1; ++i) {
    for (int32_t p : selection[group[i]]) {
      LATENT_CHECK(p >= 0 && p < context);
      index_of[p] = 0;
    }
  }
  for (int32_t p = 0; p < context; ++p) {
    if (index_of[p] < 0) continue;
    index_of[p] = static_cast<int32_t>(wanted.size());
    wanted.push_back(p);
  }
  return true;
}

// One token: attention over the latent rows (in `format`, read in place) with one shared head.
// q_cat [H, C + dr] -> out_lat [H, C]; `scores` is scratch ([rows]). bf16_products: the layer
// computes in bf16 (kv_b's bf16_activations), so the kernel may multiply bf16 q, probabilities
// and rows.
void AttendLatent(const MlaDims& d, const float* q_cat, const std::vector<const void*>& rows,
                  const kernels::RowFormat& format, float scale, const float* sinks,
                  bool bf16_products, std::vector<float>& scores, float* out_lat) {
  scores.resize(rows.size());
  kernels::AttentionArgs args;
  args.q = q_cat;
  args.num_heads = d.heads;
  args.qk_dim = d.row();
  args.rows = format;
  args.keys = rows.data();
  args.key_head_stride = 0;
  args.values = rows.data();  // The value is the latent part of the same row.
  args.value_head_stride = 0;
  args.v_dim = d.latent;
  args.length = static_cast<int64_t>(rows.size());
  args.scale = scale;
  args.sinks = sinks;  // Exact here too: a sink only rescales each head's latent output.
  args.out = out_lat;
  args.scratch = scores.data();
  args.bf16_products = bf16_products;
  kernels::BestKernels().attention(args);
}

// attn[group[i], h] = out_lat[i, h] . W_UV[h]^T, for the whole group at once.
void ProjectValues(const MlaDims& d, const kernels::WeightRef& kv_b, const float* out_lat,
                   const std::vector<int64_t>& group, float* attn) {
  const int64_t n = static_cast<int64_t>(group.size());
  const int64_t head_rows = d.nope + d.v;
  threads::ParallelFor(d.heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> lat(n * d.latent), o(n * d.v);
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const float* src = out_lat + (i * d.heads + h) * d.latent;
        std::copy(src, src + d.latent, &lat[i * d.latent]);
      }
      Linear(lat.data(), n, kv_b.Rows(h * head_rows + d.nope, d.v), o.data());
      for (int64_t i = 0; i < n; ++i) {
        std::copy(&o[i * d.v], &o[(i + 1) * d.v], attn + (group[i] * d.heads + h) * d.v);
      }
    }
  });
}

// The first position a token at `position` attends to: (position - window, position] under a
// sliding window, else 0.
int64_t WindowStart(int64_t position, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, position - window + 1) : 0;
}

// Expanded: rebuild k_nope and v of the sequence's tokens at positions [first, context) (`rows`,
// in order, read in place) through kv_b_proj, then ordinary attention for each of its batch
// tokens: over its causal prefix, the positions DSA selected for it, or its sliding window
// (`window` > 0; `first` is then the window start of the chunk's first token, 0 otherwise).
void ExpandedSequence(const MlaDims& d, const kernels::WeightRef& kv_b, const SequenceTokens& seq,
                      const AttendedRows& rows, int64_t first, int64_t window,
                      const AttentionBatch& batch, const DsaSelection* selection, const float* q,
                      float scale, const float* sinks, float* attn_out, AttentionWorkspace& ws) {
  const int64_t n = seq.context - first;
  LATENT_CHECK(window > 0 || first == 0);
  LATENT_CHECK(window == 0 || selection == nullptr);  // a window layer attends its window only
  LATENT_CHECK(rows.size() == n);
  const int64_t head_rows = d.nope + d.v;
  // The step-sized buffers come from the workspace: fresh vectors of these sizes (megabytes at
  // long prompts) would be mapped, page-faulted and zeroed again at every layer of every step.
  float* latents = ws.expanded.latents.Get(n * d.latent);  // [n, C]: kv_b_proj's input
  threads::ParallelRows(n, d.latent, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rows.ToF32(t, 0, d.latent, &latents[t * d.latent]);
  });
  float* kv = ws.expanded.kv.Get(n * d.heads * head_rows);  // [n, H, dn + dv]
  Linear(latents, n, kv_b, kv);
  float* rope = ws.expanded.rope.Get(n * d.rope);  // [n, dr] the shared rotary keys
  threads::ParallelRows(n, d.rope, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rows.ToF32(t, d.latent, d.row(), &rope[t * d.rope]);
  });
  // The kernels' key index 0 is position `base`, a multiple of kQueriesBlockPositions: a window
  // token's bits then do not depend on where its chunk's window starts (how the prompt was
  // chunked). Positions [base, first) lie before every query's window (masked, never read into
  // a sum); they point at a zero row, their rows may be gone from the cache.
  const int64_t base = first / kernels::kQueriesBlockPositions * kernels::kQueriesBlockPositions;
  const int64_t pad = first - base;
  std::vector<float> zero_row(pad > 0 ? d.heads * std::max(d.qk(), head_rows) : 0, 0.0f);
  // Each position's k_nope of every head, in kv_b's output [H, dn + dv] (the keys' rotary part
  // comes from `rope`, QueriesAttentionArgs::shared_keys), its values, and its rotary key.
  std::vector<const void*> nope_ptrs(pad + n, zero_row.data());
  std::vector<const void*> value_ptrs(pad + n, zero_row.data());
  std::vector<const float*> rope_ptrs(pad + n, zero_row.data());
  for (int64_t t = 0; t < n; ++t) {
    nope_ptrs[pad + t] = &kv[t * d.heads * head_rows];
    value_ptrs[pad + t] = &kv[t * d.heads * head_rows + d.nope];
    rope_ptrs[pad + t] = &rope[t * d.rope];
  }
  kernels::AttentionArgs shared;
  shared.num_heads = d.heads;
  shared.qk_dim = d.qk();
  shared.keys = nope_ptrs.data();
  shared.key_head_stride = head_rows;
  shared.values = value_ptrs.data();
  shared.value_head_stride = head_rows;
  shared.v_dim = d.v;
  shared.scale = scale;
  shared.sinks = sinks;
  // Tokens DSA picked positions for attend to those, one at a time; the others attend their
  // causal prefix (up to and including themselves) or their sliding window, all in one call
  // that reads each block of keys and values once for many queries.
  std::vector<int64_t> causal, picked_rows;
  for (int64_t row = seq.begin; row < seq.end; ++row) {
    const bool picked = selection != nullptr && !(*selection)[row].empty();
    (picked ? picked_rows : causal).push_back(row);
  }
  const auto& k = kernels::BestKernels();
  if (!causal.empty()) {
    const int64_t nq = static_cast<int64_t>(causal.size());
    const int64_t q_floats = d.heads * d.qk(), out_floats = d.heads * d.v;  // per row
    // Positions relative to `base`: (position - window, position] under a sliding window, else
    // [0, position].
    std::vector<int64_t> lengths(nq), starts(window > 0 ? nq : 0);
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t position = batch.positions[causal[i]];
      lengths[i] = position + 1 - base;
      if (window > 0) starts[i] = WindowStart(position, window) - base;
    }
    // The rows are ascending: with none picked out by DSA they are one range, read and written
    // in place; otherwise gathered into the workspace first.
    const bool in_place = causal.back() - causal.front() + 1 == nq;
    const float* q_rows = q + causal.front() * q_floats;  // [nq, H, dn + dr]
    float* out_rows = in_place ? attn_out + causal.front() * out_floats
                               : ws.expanded.out_rows.Get(nq * out_floats);  // [nq, H, dv]
    if (!in_place) {
      float* gathered = ws.expanded.q_rows.Get(nq * q_floats);
      threads::ParallelRows(nq, q_floats, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const float* src = q + causal[i] * q_floats;
          std::copy(src, src + q_floats, &gathered[i * q_floats]);
        }
      });
      q_rows = gathered;
    }
    kernels::QueriesAttentionArgs qa;
    qa.shared = shared;
    qa.num_queries = nq;
    qa.q = q_rows;
    qa.lengths = lengths.data();
    qa.starts = window > 0 ? starts.data() : nullptr;
    qa.shared_keys = rope_ptrs.data();
    qa.shared_key_dims = d.rope;
    qa.out = out_rows;
    // bf16 products where the layer's kv_b runs bf16 compute (`--precision bf16`, the default
    // for bf16 and fp8 checkpoints); f32 under `--precision f32` and for int8 weights.
    qa.bf16_products = kv_b.bf16_activations;
    k.attention_queries(qa);
    if (!in_place) {
      threads::ParallelRows(nq, out_floats, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          std::copy(&out_rows[i * out_floats], &out_rows[(i + 1) * out_floats],
                    attn_out + causal[i] * out_floats);
        }
      });
    }
  }
  if (picked_rows.empty()) return;
  // `attention` takes whole key rows: [n, H, dn + dr], k_nope and the shared rotary key (no
  // window here, so no padding: index t is position t).
  float* keys = ws.expanded.keys.Get(n * d.heads * d.qk());
  threads::ParallelRows(n, d.heads * d.qk(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t h = 0; h < d.heads; ++h) {
        const float* src = &kv[(t * d.heads + h) * head_rows];
        float* dst = &keys[(t * d.heads + h) * d.qk()];
        std::copy(src, src + d.nope, dst);
        std::copy(&rope[t * d.rope], &rope[(t + 1) * d.rope], dst + d.nope);
      }
    }
  });
  shared.key_head_stride = d.qk();
  threads::ParallelFor(static_cast<int64_t>(picked_rows.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(n);
    std::vector<const void*> picked_keys, picked_values;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = picked_rows[i];
      picked_keys.clear();
      picked_values.clear();
      for (int32_t p : (*selection)[row]) {
        picked_keys.push_back(&keys[p * d.heads * d.qk()]);
        picked_values.push_back(value_ptrs[p]);
      }
      kernels::AttentionArgs args = shared;
      args.q = q + row * d.heads * d.qk();
      args.keys = picked_keys.data();
      args.values = picked_values.data();
      args.length = static_cast<int64_t>(picked_keys.size());
      args.out = attn_out + row * d.heads * d.v;
      args.scratch = scores.data();
      k.attention(args);
    }
  });
}

}  // namespace

bool PreferExpanded(const MlaDims& d, int64_t chunk_tokens) {
  // Per attended token and head, expanded pays C*(dn+dv) once for the whole chunk; per chunk
  // token and attended token, absorbed pays (2C + dr) against expanded's (dqk + dv).
  const int64_t absorbed_extra = 2 * d.latent + d.rope - d.qk() - d.v;
  return chunk_tokens * absorbed_extra > d.latent * (d.nope + d.v);
}

void MlaAttentionForward(const MlaDims& d, const AttentionWeights& w, const ops::Rope& rope,
                         int64_t layer, const AttentionBatch& batch, const float* x,
                         int64_t hidden, AttentionForm form,
                         const DsaLayer* dsa, float* out, const float* query_scale,
                         int latent_row, const MlaLayerOptions* options,
                         AttentionWorkspace* workspace) {
  const auto& k = kernels::BestKernels();
  AttentionWorkspace own_workspace;  // for a call without one: allocated as it is used
  AttentionWorkspace& ws = workspace != nullptr ? *workspace : own_workspace;
  ws.Reserve(1);
  const int64_t tokens = batch.num_tokens();
  // KV sharing: a layer reading another layer's rows computes and writes none of its own.
  const bool own_latent =
      options == nullptr || options->latent_layer < 0 || options->latent_layer == layer;
  const int64_t latent_layer = own_latent ? layer : options->latent_layer;
  const int64_t window = options != nullptr ? options->window : 0;
  LATENT_CHECK(window == 0 || dsa == nullptr);  // a layer attends its window or what DSA picked

  // Queries [T, H, dn + dr].
  std::optional<profile::Scope> scope;
  scope.emplace(profile::Op::kAttnProj);
  const int64_t q_size = tokens * d.heads * d.qk();
  float* q = ws.step.q.Get(q_size);  // [T, H, dn + dr]
  std::vector<float> q_a;  // [T, Q] q_a_layernorm(q_a_proj(x)); the DSA indexer reads it too.
  std::vector<float> gate;  // [T, H, dv] output gate logits (A.X-K2's fused q_gate), else empty
  if (w.q_proj) {
    Linear(x, tokens, *w.q_proj, q);
  } else {
    q_a.resize(tokens * d.q_lora);
    Linear(x, tokens, *w.q_a, q_a.data());
    std::vector<float> q_a_raw;  // [T, Q] before the norm: the fused q_gate reads both
    if (w.q_gate) q_a_raw = q_a;
    ops::RmsNorm(q_a.data(), tokens, d.q_lora, w.q_a_norm, d.norm_eps, q_a.data());
    if (d.q_a_scale != 1.0f) {
      for (float& v : q_a) v *= d.q_a_scale;  // dots3_note: before q_b and the indexer
    }
    if (w.q_gate) {
      gate.resize(tokens * d.heads * d.v);
      QueryAndGate(d, *w.q_gate, q_a.data(), q_a_raw.data(), tokens, q, gate.data());
    } else {
      Linear(q_a.data(), tokens, *w.q_b, q);
    }
    dump::Tensor("q_a", layer, q_a.data(), tokens, d.q_lora);
  }
  if (d.q_scale != 1.0f) {
    // Before rope, as transformers scales q_pass and q_rot.
    for (int64_t i = 0; i < q_size; ++i) q[i] *= d.q_scale;
  }
  dump::Tensor("q", layer, q, tokens, d.heads * d.qk());

  // Latent rows [T, C + dr]: normalised c_kv, then the rotated shared key; written to the cache.
  const int64_t half = d.rope / 2;
  std::vector<float> cos(tokens * half), sin(tokens * half);  // [T, dr / 2]
  if (d.rope > 0) {
    // A cos and a sin per pair: weighed as 8 items per rotary value.
    threads::ParallelRows(tokens, d.rope * 8, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        rope.CosSin(batch.positions[t], batch.RotaryLength(t), &cos[t * half], &sin[t * half]);
    });
  }
  std::vector<float> kv_a;
  if (own_latent) {
    kv_a.resize(tokens * d.row());
    Linear(x, tokens, w.kv_a, kv_a.data());
    if (w.k_rope_norm.data != nullptr && d.rope > 0) {
      // dots3_note: RMSNorm of the shared rotary key, before it is rotated.
      std::vector<float> k_rot(tokens * d.rope);  // [T, dr]
      for (int64_t t = 0; t < tokens; ++t)
        std::copy(&kv_a[t * d.row() + d.latent], &kv_a[(t + 1) * d.row()], &k_rot[t * d.rope]);
      ops::RmsNorm(k_rot.data(), tokens, d.rope, w.k_rope_norm, d.norm_eps, k_rot.data());
      for (int64_t t = 0; t < tokens; ++t)
        std::copy(&k_rot[t * d.rope], &k_rot[(t + 1) * d.rope], &kv_a[t * d.row() + d.latent]);
    }
    kernels::NormRopeArgs norm_rope;
    norm_rope.tokens = tokens;
    norm_rope.kv = kv_a.data();
    norm_rope.kv_stride = d.row();
    norm_rope.latent = d.latent;
    norm_rope.norm_weight = w.kv_a_norm.data;
    norm_rope.norm_dtype = w.kv_a_norm.dtype;
    norm_rope.eps = d.norm_eps;
    norm_rope.q = q;
    norm_rope.heads = d.heads;
    norm_rope.q_stride = d.qk();
    norm_rope.q_offset = d.nope;
    norm_rope.rope = d.rope;
    norm_rope.interleaved = rope.interleaved;
    norm_rope.cos = cos.data();
    norm_rope.sin = sin.data();
    // Tokens are independent: each share of them goes through the kernel on its own.
    threads::ParallelRows(tokens, d.row() + d.heads * d.rope, [&](int64_t t0, int64_t t1) {
      kernels::NormRopeArgs part = norm_rope;
      part.tokens = t1 - t0;
      part.kv += t0 * part.kv_stride;
      part.q += t0 * part.heads * part.q_stride;
      part.cos += t0 * half;
      part.sin += t0 * half;
      k.norm_rope(part);
    });
  } else if (d.rope > 0) {
    // The owner's rotary keys are rotated already: only the queries turn.
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < d.heads; ++h) {
        rope.Apply(&q[(t * d.heads + h) * d.qk() + d.nope], &cos[t * half], &sin[t * half]);
      }
    }
  }
  if (query_scale != nullptr) {
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = &q[t * d.heads * d.qk()];
      for (int64_t i = 0; i < d.heads * d.qk(); ++i) row[i] *= query_scale[t];
    }
  }
  if (options != nullptr && options->head_query_scale != nullptr) {
    ops::ScaleHeads(q, tokens, d.heads, d.qk(), options->head_query_scale);
  }
  if (own_latent && d.latent_scale != 1.0f) {
    // After kv_a_layernorm, before caching; the rotary key keeps its scale.
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < d.latent; ++i) kv_a[t * d.row() + i] *= d.latent_scale;
  }
  const cache::PagedRows& cache = *batch.rows;
  if (own_latent) {
    dump::Columns("kv_latent", layer, kv_a.data(), tokens, d.row(), 0, d.latent);
    dump::Columns("k_pe", layer, kv_a.data(), tokens, d.row(), d.latent, d.rope);
  }
  if (dump::Wants("q_pe")) {
    std::vector<float> q_pe(tokens * d.heads * d.rope);  // [T, H, dr], rotated
    for (int64_t i = 0; i < tokens * d.heads; ++i)
      std::copy(&q[i * d.qk() + d.nope], &q[(i + 1) * d.qk()], &q_pe[i * d.rope]);
    dump::Tensor("q_pe", layer, q_pe.data(), tokens, d.heads * d.rope);
  }
  if (own_latent) {
    for (int64_t t = 0; t < tokens; ++t) {
      cache.WriteRow(batch.RowTable(batch.seq_slots[t], layer, latent_row), layer, latent_row, batch.positions[t],
                     &kv_a[t * d.row()]);
    }
  }

  const DsaSelection* selection = nullptr;
  scope.reset();
  if (dsa != nullptr) {
    LATENT_PROFILE_SCOPE(kDsaIndexer);
    if (dsa->indexer != nullptr) {
      RunDsaIndexer(dsa->dims, *dsa->indexer, dsa->rope, layer, dsa->index_row, batch, x, hidden,
                    q_a.empty() ? nullptr : q_a.data(), d.q_lora, *dsa->selection, &ws);
    }
    selection = dsa->selection;
  }

  // Attention per sequence, over its cached rows (or the ones DSA selected).
  scope.emplace(profile::Op::kAttnCore);
  LATENT_CHECK(w.sinks.empty() || static_cast<int64_t>(w.sinks.size()) == d.heads);
  const float* sinks = w.sinks.empty() ? nullptr : w.sinks.data();  // [H]
  float* attn = ws.step.attn.Get(tokens * d.heads * d.v);  // [T, H, dv], every row written
  std::vector<int64_t> absorbed;  // batch rows in the absorbed form, sequence by sequence
  for (int64_t slot = 0; slot < batch.num_sequences(); ++slot) {
    const SequenceTokens chunk = SequenceOf(batch, slot);
    // The sequence's tokens below `expanded_below` run expanded, the rest absorbed: a chunk of a
    // sequence recomputed after a preemption may hold some of each.
    // The bound of this layer's kind: a layer that attends a DSA selection may switch to the
    // absorbed form earlier than one that attends its whole prefix or window.
    const int64_t expanded_below =
        form == AttentionForm::kExpanded   ? std::numeric_limits<int64_t>::max()
        : form == AttentionForm::kAbsorbed ? 0
                                           : batch.expanded_below[slot].For(dsa != nullptr);
    SequenceTokens seq = chunk;
    seq.end = seq.begin;
    while (seq.end < chunk.end && batch.positions[seq.end] < expanded_below) ++seq.end;
    for (int64_t row = seq.end; row < chunk.end; ++row) absorbed.push_back(row);
    if (seq.end == seq.begin) continue;
    seq.context = batch.positions[seq.end - 1] + 1;
    // Under a sliding window only positions [first, context) are read: the rows before it may
    // have been dropped.
    const int64_t first = WindowStart(batch.positions[seq.begin], window);
    AttendedRows& rows = ws.Lane(0).rows;  // [context - first] -> each position's row, in place
    rows.Range(cache, batch.RowTable(slot, latent_layer, latent_row), latent_layer, latent_row,
               first, seq.context - first);
    ExpandedSequence(d, w.kv_b, seq, rows, first, window, batch, selection, q,
                     rope.softmax_scale, sinks, attn, ws);
  }
  // Absorbed tokens in groups: the W_UK and W_UV products run over a whole group, the attention
  // runs for the group's sequences in parallel (each reads its rows in place).
  constexpr size_t kAbsorbedGroup = 64;
  for (size_t g0 = 0; g0 < absorbed.size(); g0 += kAbsorbedGroup) {
    const size_t g1 = std::min(absorbed.size(), g0 + kAbsorbedGroup);
    const std::vector<int64_t> group(absorbed.begin() + g0, absorbed.begin() + g1);
    const int64_t n = static_cast<int64_t>(group.size());
    float* q_cat = ws.step.q_cat.Get(n * d.heads * d.row());       // [n, H, C + dr]
    float* out_lat = ws.step.out_lat.Get(n * d.heads * d.latent);  // [n, H, C]
    scope.reset();
    scope.emplace(profile::Op::kAttnAbsorb);
    AbsorbQueries(d, w, q, group, q_cat);
    scope.reset();
    scope.emplace(profile::Op::kAttnCore);
    std::vector<int64_t> starts;  // where each sequence's run of tokens in the group starts
    for (int64_t i = 0; i < n; ++i) {
      if (i == 0 || batch.seq_slots[group[i]] != batch.seq_slots[group[i - 1]]) starts.push_back(i);
    }
    starts.push_back(n);
    ForEachInLanes(ws, static_cast<int64_t>(starts.size()) - 1, [&](int64_t lane, int64_t s) {
      const int32_t slot = batch.seq_slots[group[starts[s]]];
      // Positions up to the run's last token's: a group of a long chunk reads no further (its
      // sequence's context reaches the end of the chunk).
      const int64_t context = batch.positions[group[starts[s + 1] - 1]] + 1;
      // A sliding window reads positions from the window start of the run's first token: the
      // rows before it may have been dropped.
      const int64_t first = WindowStart(batch.positions[group[starts[s]]], window);
      // When DSA selected for every token of this run, only the selected rows are read (at
      // long context a small share of them); otherwise rows first..context-1.
      bool all_selected = selection != nullptr && first == 0;
      for (int64_t i = starts[s]; all_selected && i < starts[s + 1]; ++i)
        all_selected = !(*selection)[group[i]].empty();
      AttentionLane& memory = ws.Lane(lane);
      AttendedRows& rows = memory.rows;  // the row of each position read, in place
      const auto table = batch.RowTable(slot, latent_layer, latent_row);
      // One token's selection in ascending order (a decode's, the indexer's order) is read as
      // it is: no marks over a long context for each sequence of a decode step.
      const bool alone = starts[s + 1] - starts[s] == 1;
      const std::vector<int32_t>* picked_alone =
          all_selected && alone ? &(*selection)[group[starts[s]]] : nullptr;
      if (picked_alone != nullptr &&
          std::adjacent_find(picked_alone->begin(), picked_alone->end(), std::greater_equal<>()) !=
              picked_alone->end()) {
        picked_alone = nullptr;
      }
      bool marked = false;  // SelectionUnion's index_of holds each position's index in `wanted`
      if (picked_alone != nullptr) {
        rows.Positions(cache, table, latent_layer, latent_row, *picked_alone);
      } else if (all_selected) {
        marked = SelectionUnion(*selection, group, starts[s], starts[s + 1], context,
                                memory.wanted, memory.index_of);
        rows.Positions(cache, table, latent_layer, latent_row, memory.wanted);
      } else {
        rows.Range(cache, table, latent_layer, latent_row, first, context - first);
      }
      std::vector<const void*>& visible = memory.visible;
      for (int64_t i = starts[s]; i < starts[s + 1]; ++i) {
        const int64_t row = group[i];
        visible.clear();
        const bool picks = selection != nullptr && !(*selection)[row].empty();
        if (picked_alone != nullptr) {
          visible.assign(rows.data(), rows.data() + rows.size());
        } else if (all_selected && marked) {
          for (int32_t p : (*selection)[row]) visible.push_back(rows[memory.index_of[p]]);
        } else if (all_selected) {
          const std::vector<int32_t>& wanted = memory.wanted;
          for (int32_t p : (*selection)[row]) {
            const auto at = std::lower_bound(wanted.begin(), wanted.end(), p) - wanted.begin();
            visible.push_back(rows[at]);
          }
        } else if (picks) {  // beside tokens that attend all their positions
          for (int32_t p : (*selection)[row]) {
            LATENT_CHECK(p >= first && p < context);
            visible.push_back(rows[p - first]);
          }
        } else {
          for (int64_t p = WindowStart(batch.positions[row], window); p <= batch.positions[row]; ++p)
            visible.push_back(rows[p - first]);
        }
        AttendLatent(d, &q_cat[i * d.heads * d.row()], visible, rows.format(), rope.softmax_scale,
                     sinks, w.kv_b.bf16_activations, memory.attention_scores,
                     &out_lat[i * d.heads * d.latent]);
      }
    });
    scope.reset();
    scope.emplace(profile::Op::kAttnAbsorb);
    ProjectValues(d, w.kv_b, out_lat, group, attn);
    scope.reset();
    scope.emplace(profile::Op::kAttnCore);
  }
  scope.reset();
  scope.emplace(profile::Op::kAttnProj);
  if (!gate.empty()) ops::ApplyOutputGate({d.heads, d.v, d.v}, gate.data(), tokens, attn);
  if (w.gate_proj) {
    // Hy4: gate logits from the layer input, per channel or per head.
    const int64_t width = w.gate_proj->n / d.heads;
    LATENT_CHECK(width * d.heads == w.gate_proj->n);
    std::vector<float> logits(tokens * w.gate_proj->n);  // [T, H, width]
    Linear(x, tokens, *w.gate_proj, logits.data());
    ops::ApplyOutputGate({d.heads, d.v, width}, logits.data(), tokens, attn);
  }
  Linear(attn, tokens, w.o, out);
}

}  // namespace latent::ops
