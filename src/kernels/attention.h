// Scaled dot-product attention of one query token over L cached positions, per head.
// Keys and values are addressed by one pointer per position, so the same kernel reads rows in a
// paged cache in place (absorbed MLA: one shared key/value head, head stride 0) or materialised
// per-head keys and values (expanded MLA; attention_queries can take the shared rotary key apart
// from each head's k_nope: QueriesAttentionArgs::shared_keys).
//
// Rows in place: the key and value rows are in `rows`' format (kernels/row_format.h): f32, bf16
// or the fp8 row encoding (the paged cache's storage types). A bf16 element widens to f32
// exactly (its bits are an f32's high half), an fp8 element decodes to its code times its group's
// scale (the f32 product a gather computes), and every kernel widens or decodes as it loads, in
// registers, then sums in the same order as over f32 rows: its result over bf16 or fp8 rows
// equals, bit for bit, its result over the same rows converted to f32 (what a gather into an f32
// copy would feed it). Not so under bf16_products (below), whose kernels round the rows to bf16.
// Rows the kernels do not read in place (RowsReadInPlace) are converted to f32 by the caller
// first. fp8 rows are read as one shared head only (head strides 0: MLA's
// absorbed form) and only by `attention`; attention_queries takes f32 or bf16 rows (f32 only
// with shared_keys).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/row_format.h"
#include "tensor/dtype.h"

namespace latent::kernels {

struct AttentionArgs {
  const float* q = nullptr;       // [num_heads, qk_dim]
  int64_t num_heads = 0;
  int64_t qk_dim = 0;
  RowFormat rows;                       // format of every key and value row (row_format.h)
  const void* const* keys = nullptr;    // [L] -> key of head 0, qk_dim elements
  int64_t key_head_stride = 0;          // elements between heads' keys; 0: one shared head
  const void* const* values = nullptr;  // [L] -> value of head 0, v_dim elements
  int64_t value_head_stride = 0;
  int64_t v_dim = 0;
  int64_t length = 0;  // L
  float scale = 1.0f;  // Softmax scale applied to q.k.
  // [num_heads] learned attention-sink logits (gpt-oss, Hy4), or null: head h's softmax runs over
  // its scores plus one extra logit sinks[h] (not scaled) whose value row is zero, so the
  // denominator gains exp(sinks[h] - max) and the probabilities of the real positions sum to
  // less than one. The sink is exact in either MLA form: it only rescales each head's output.
  const float* sinks = nullptr;
  float* out = nullptr;     // [num_heads, v_dim]
  float* scratch = nullptr; // [L] scores (the reference kernel's; the AVX-512 one keeps its own)
  // bf16 compute (MLA's absorbed decode where kv_b computes in bf16): q and the probabilities
  // rounded to bf16 and multiplied with bf16 rows, f32 sums, where the CPU has AVX512_BF16 and the
  // rows are bf16 with one shared head: on AMX tiles (amx/attention_amx.cc, value dims of whole
  // 16-column tiles), else on vdpbf16ps (avx512/attention_bf16.cc). On AMX tiles fp8 rows too
  // (those amx::AmxTakesAttention takes): each element decoded (the f32 value above) and rounded
  // to bf16, then as bf16 rows. Ignored elsewhere (the reference, AVX2, f32 rows, the other fp8
  // rows, per-head rows): the f32 products, bit for bit. A token's result still depends on its
  // own query and rows only.
  bool bf16_products = false;
};

// Attention of several query tokens of one sequence (an expanded-form prefill chunk): query
// i attends positions [starts[i], lengths[i]) of the shared keys and values (from 0 without
// starts; a sliding window's queries start at their window's first position). Each query's output
// depends only on its own query, start, length and rows, never on the other queries of the call
// or the thread count, so a token's result does not depend on the chunk it arrives in. The fast
// kernel reads a block of keys and values once for many queries (not once per query, as
// `attention` would).
// attention_queries' kernels lay their online-softmax blocks (and bf16 position pairs) over the
// key indices from 0, so a query's bits depend on its start and length themselves, not only on
// the rows they span. A caller that wants a token's bits not to depend on where its call's keys
// begin (a sliding window's chunk) indexes them from a position that is a multiple of this.
inline constexpr int64_t kQueriesBlockPositions = 64;

struct QueriesAttentionArgs {
  AttentionArgs shared;           // keys, values, strides, dims, scale; q, out, length unused
  int64_t num_queries = 0;
  const float* q = nullptr;       // [num_queries, num_heads, qk_dim]
  const int64_t* lengths = nullptr;  // [num_queries], each <= the positions `keys` holds
  // MLA's expanded keys without a per-head copy of the rotary key: with shared_key_dims > 0 the
  // last shared_key_dims of each head's qk_dim key values (the rotary key, the same for every
  // head) are read from shared_keys[t] (f32), and keys[t] (+ the head stride) holds only the
  // first qk_dim - shared_key_dims. f32 rows only. The results equal, bit for bit, those over
  // whole key rows holding both: the kernels gather the two parts when they pack the keys.
  const float* const* shared_keys = nullptr;  // [positions] -> shared_key_dims values
  int64_t shared_key_dims = 0;
  // [num_queries] each query's first position (>= 0), or null: 0 for every query. A query with
  // starts[i] >= lengths[i] attends nothing (its output is 0). Positions before a query's start
  // never reach its sums, whatever they hold (an inf or NaN there included).
  const int64_t* starts = nullptr;
  float* out = nullptr;           // [num_queries, num_heads, v_dim]
  // bf16 compute (`--precision bf16`): q, keys, probabilities and values rounded to bf16 (round
  // to nearest even), their products summed in f32, as FlashAttention runs bf16 models. CPUs
  // with AMX run it on tiles (amx/attention_queries_amx.cc, value dims of whole 16-column
  // tiles), the others with AVX512_BF16 on vdpbf16ps (twice the f32 rate); the rest compute in
  // f32 and ignore it. Either way a query's result depends only on its own query, start, length
  // and rows.
  bool bf16_products = false;
};

// The softmax denominator of head h: `sum` of exp(score - max) over its positions, plus the
// sink's exp(sinks[h] - max) when `sinks` is given. exp may overflow to inf for a sink far above
// every score: the output is then 0, the limit.
inline float SinkDenominator(const float* sinks, int64_t h, float max_score, float sum) {
  return sinks == nullptr ? sum : sum + std::exp(sinks[h] - max_score);
}

// Whether a call's shared_keys are as the kernels take them: none, or f32 rows with at most
// qk_dim shared values (each attention_queries checks it).
inline bool SharedKeysTaken(const QueriesAttentionArgs& qa) {
  return qa.shared_key_dims == 0 ||
         (qa.shared_keys != nullptr && qa.shared.rows.dtype == DType::kF32 &&
          qa.shared_key_dims > 0 && qa.shared_key_dims <= qa.shared.qk_dim);
}

// For the attention_queries kernels: each of n queries' positions [first[i], rows[i]) of the
// block of `size` positions from t0 (counted from t0), from their lengths len[i] and starts
// start[i] (null: 0). Returns the largest rows[i] of a query that attends any (0: none does).
inline int64_t QueryBlockSpans(int64_t n, const int64_t* len, const int64_t* start, int64_t t0,
                               int64_t size, int64_t* first, int64_t* rows) {
  int64_t rows_max = 0;
  for (int64_t i = 0; i < n; ++i) {
    first[i] = start == nullptr ? 0 : std::clamp<int64_t>(start[i] - t0, 0, size);
    rows[i] = std::clamp<int64_t>(len[i] - t0, 0, size);
    if (rows[i] > first[i]) rows_max = std::max(rows_max, rows[i]);
  }
  return rows_max;
}

// Query i's first position (QueriesAttentionArgs::starts; 0 without).
inline int64_t QueryStart(const QueriesAttentionArgs& qa, int64_t i) {
  return qa.starts == nullptr ? 0 : qa.starts[i];
}

// For the attention_queries kernels: the first block of `block` positions any of queries
// [i0, i1) attends (the block of the earliest start of a query that attends anything; 0 when
// none does). The blocks before it are skipped.
inline int64_t FirstAttendedBlock(const QueriesAttentionArgs& qa, int64_t i0, int64_t i1,
                                  int64_t block) {
  int64_t earliest = INT64_MAX;
  for (int64_t i = i0; i < i1; ++i) {
    if (QueryStart(qa, i) < qa.lengths[i]) earliest = std::min(earliest, QueryStart(qa, i));
  }
  return earliest == INT64_MAX ? 0 : earliest / block;
}

// For the f32 packing of the attention_queries kernels: the qk_dim values of `head`'s key at
// position t (f32 rows) into dst[c * stride]: the head's own values, then with shared_keys the
// shared rotary key's.
inline void StridedKeyF32(const QueriesAttentionArgs& qa, int64_t t, int64_t head, float* dst,
                          int64_t stride) {
  const AttentionArgs& a = qa.shared;
  const int64_t dq = a.qk_dim, own = dq - qa.shared_key_dims;
  const float* key = static_cast<const float*>(a.keys[t]) + head * a.key_head_stride;
  for (int64_t c = 0; c < own; ++c) dst[c * stride] = key[c];
  for (int64_t c = own; c < dq; ++c) dst[c * stride] = qa.shared_keys[t][c - own];
}

// The scalar reference (KernelTable::attention of RefKernels()); use BestKernels().attention.
void AttentionRef(const AttentionArgs& args);
// One AttentionRef per query (KernelTable::attention_queries of RefKernels()).
void AttentionQueriesRef(const QueriesAttentionArgs& args);

}  // namespace latent::kernels
