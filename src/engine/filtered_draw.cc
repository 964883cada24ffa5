#include "engine/filtered_draw.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>

#include "engine/token_constraint.h"

namespace latent::engine {
namespace {

// The filters' order: a before b when a is more likely, or as likely with a smaller id. A strict
// total order over distinct tokens, so every selection below cuts the same sets as a sort would.
struct MoreLikely {
  const double* probs;
  bool operator()(int32_t a, int32_t b) const {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  }
};

int32_t MedianOfThree(int32_t a, int32_t b, int32_t c, const MoreLikely& before) {
  if (before(b, a)) std::swap(a, b);
  if (before(c, b)) std::swap(b, c);
  if (before(b, a)) std::swap(a, b);
  return b;
}

// TopMassCount's answer over ids[lo, n) given that ids[0, lo) are in the set with mass `above`:
// a quickselect that tracks the mass above its pivot.
int64_t SelectTopMass(int32_t* ids, int64_t lo, int64_t n, const double* probs, double above,
                      double target) {
  const MoreLikely before{probs};
  int64_t hi = n;  // ids[lo, hi): undecided; ids[hi, n): out
  constexpr int64_t kSortBelow = 32;  // undecided ones left: sort and walk them
  while (hi - lo > kSortBelow) {
    const int32_t pivot = MedianOfThree(ids[lo], ids[lo + (hi - lo) / 2], ids[hi - 1], before);
    int32_t* mid = std::partition(ids + lo, ids + hi, [&](int32_t t) { return before(t, pivot); });
    std::iter_swap(mid, std::find(mid, ids + hi, pivot));
    const int64_t at = mid - ids;  // the pivot's place in the order
    double upper = 0;              // mass of the undecided ones before the pivot
    for (int64_t i = lo; i < at; ++i) upper += probs[ids[i]];
    if (above + upper >= target) {  // the set ends before the pivot
      hi = at;
      continue;
    }
    above += upper + probs[pivot];
    if (above >= target) return at + 1;  // ... with the pivot
    lo = at + 1;                          // ... after it
  }
  std::sort(ids + lo, ids + hi, before);
  for (int64_t i = lo; i < hi; ++i) {
    above += probs[ids[i]];
    if (above >= target) return i + 1;
  }
  return hi;
}

// Buckets of probability for TopMassCount's first pass: 1/256 of an octave each below the best
// token's, from the double's exponent and top 8 mantissa bits (equal probabilities share a
// bucket, and a more likely token never lands in a later one); 16 octaves, the rest in the last.
constexpr int kBucketShift = 44;
constexpr int64_t kBuckets = 16 * 256;

int64_t BucketOf(double prob, uint64_t best_key) {
  const uint64_t key = std::bit_cast<uint64_t>(prob) >> kBucketShift;
  return static_cast<int64_t>(std::min<uint64_t>(best_key - key, kBuckets - 1));
}

}  // namespace

int64_t TopMassCount(int32_t* ids, int64_t n, const double* probs, double target) {
  if (n <= 0) return 0;
  // One pass puts the mass in buckets; the bucket where the running mass reaches the target is
  // the only one whose tokens need ranking against each other.
  double best = 0;
  for (int64_t i = 0; i < n; ++i) best = std::max(best, probs[ids[i]]);
  const uint64_t best_key = std::bit_cast<uint64_t>(best) >> kBucketShift;
  // [kLanes, kBuckets]: a histogram per lane, as consecutive tokens often share a bucket and one
  // histogram would chain every add through the same memory slot.
  constexpr int64_t kLanes = 4;
  std::vector<double> lanes(kLanes * kBuckets, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    lanes[(i % kLanes) * kBuckets + BucketOf(probs[ids[i]], best_key)] += probs[ids[i]];
  }
  std::vector<double> mass(kBuckets, 0.0);  // [kBuckets]
  for (int64_t lane = 0; lane < kLanes; ++lane) {
    for (int64_t b = 0; b < kBuckets; ++b) mass[b] += lanes[lane * kBuckets + b];
  }
  double above = 0;  // mass of the buckets before `cut`
  int64_t cut = 0;
  while (cut < kBuckets - 1 && above + mass[cut] < target) above += mass[cut++];
  // ids: the buckets before `cut` (in the set), then `cut`'s (ranked next), then the rest (out).
  auto bucket = [&](int32_t t) { return BucketOf(probs[t], best_key); };
  int32_t* in_end = std::partition(ids, ids + n, [&](int32_t t) { return bucket(t) < cut; });
  int32_t* cut_end = std::partition(in_end, ids + n, [&](int32_t t) { return bucket(t) == cut; });
  return SelectTopMass(ids, in_end - ids, cut_end - ids, probs, above, target);
}

int32_t DrawFiltered(const std::vector<float>& logits, const uint32_t* allowed,
                     const SamplingParams& p, double u) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  // Weights at this temperature, the probabilities up to their sum (disallowed tokens are -inf:
  // 0). The filters and the draw scale their targets instead of dividing every weight.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(vocab);  // [vocab]
  constexpr int64_t kLanes = 8;        // partial sums: no chain of dependent adds over the row
  double partial[kLanes] = {};
  for (int64_t i = 0; i < vocab; ++i) {
    partial[i % kLanes] += weights[i] = std::exp((logits[i] - max_logit) / p.temperature);
  }
  double sum = 0;
  for (double x : partial) sum += x;
  std::vector<int32_t> ids;  // the candidates, then the kept set first
  ids.reserve(vocab);
  for (int32_t t = 0; t < vocab; ++t) {
    if (allowed == nullptr || BitmaskAllows(allowed, t)) ids.push_back(t);
  }
  const int64_t candidates = static_cast<int64_t>(ids.size());
  const MoreLikely before{weights.data()};
  int64_t keep = candidates;  // ids[0, keep): the kept set, in no particular order
  if (p.top_k > 0 && p.top_k < keep) {
    std::nth_element(ids.begin(), ids.begin() + (p.top_k - 1), ids.end(), before);
    keep = p.top_k;
  }
  if (p.top_p < 1.0f) {
    // Top-p acts on what top-k left, renormalized (as transformers and vLLM apply them).
    double mass = sum;
    if (keep < candidates) {
      mass = 0;
      for (int64_t i = 0; i < keep; ++i) mass += weights[ids[i]];
    }
    keep = TopMassCount(ids.data(), keep, weights.data(), p.top_p * mass);
  }
  if (p.min_p > 0.0f) {
    const auto best = std::min_element(ids.begin(), ids.begin() + keep, before);
    std::iter_swap(ids.begin(), best);
    const double floor = p.min_p * weights[ids[0]];
    keep = std::partition(ids.begin() + 1, ids.begin() + keep,
                          [&](int32_t t) { return weights[t] >= floor; }) - ids.begin();
  }
  // The draw: u over the kept mass, walking the kept tokens in id order.
  std::vector<uint8_t> kept(vocab, 0);  // [vocab]
  double kept_mass = 0;
  int32_t last = ids[0];
  for (int64_t i = 0; i < keep; ++i) {
    kept[ids[i]] = 1;
    kept_mass += weights[ids[i]];
    last = std::max(last, ids[i]);
  }
  const double target = u * kept_mass;
  double cumulative = 0;
  for (int32_t t = 0; t < vocab; ++t) {
    if (!kept[t]) continue;
    cumulative += weights[t];
    if (target < cumulative) return t;
  }
  return last;
}

}  // namespace latent::engine
