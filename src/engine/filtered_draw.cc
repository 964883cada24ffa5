#include "engine/filtered_draw.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/token_constraint.h"
#include "kernels/kernel_table.h"

namespace latent::engine {
namespace {

constexpr int64_t kBlock = 1024;     // ids per block of the draw's walk
constexpr int64_t kHeapTopK = 4096;  // top-k up to this scans with a bounded heap
constexpr int64_t kListMax = 4096;   // a kept set up to this size is listed
constexpr float kInf = std::numeric_limits<float>::infinity();

// Top-p's histogram: bins of the distance s (Row::Distance) by its float's exponent and top 6
// mantissa bits, 64 bins per octave from s = 2^-16 (below it: bin 0) to s = 128 (at or above
// it, weights e^-128 and less: the last bin). A larger s never lands in an earlier bin.
constexpr int kBinShift = 17;
constexpr uint32_t kBinLow = std::bit_cast<uint32_t>(0x1p-16f) >> kBinShift;
constexpr uint32_t kBinHigh = std::bit_cast<uint32_t>(128.0f) >> kBinShift;
constexpr int64_t kBins = kBinHigh - kBinLow + 1;
constexpr int64_t kLanes = 4;  // histograms: neighbouring tokens often share a bin
// Top-p tries the tokens within this distance of the best first (weights above e^-12 of the
// best's, about 6e-6).
constexpr float kPeakDistance = 12.0f;

// One row being drawn from.
struct Row {
  const float* x;  // [n] logits, disallowed tokens at -inf
  int64_t n;
  float max;       // the largest logit
  float inv_t;     // 1 / temperature
  const float* w;  // [n] weights exp((x - max) * inv_t), 0 at -inf

  // How far below the best token t is, in temperature units: its weight is about exp(-s). Both
  // steps round monotonically, so s never decreases along the order and any bound on s keeps a
  // prefix of it.
  float Distance(int64_t t) const { return (max - x[t]) * inv_t; }
  uint64_t Key(int64_t t) const { return OrderKey(x[t], static_cast<int32_t>(t)); }
  // The first token of the largest logit: the answer when nothing weighs anything.
  int32_t FirstBest() const { return static_cast<int32_t>(std::max_element(x, x + n) - x); }
};

uint16_t BinOf(float distance) {
  const uint32_t key = std::bit_cast<uint32_t>(distance) >> kBinShift;
  return static_cast<uint16_t>(std::clamp(key, kBinLow, kBinHigh) - kBinLow);
}

// Per-thread buffers: the draw runs for dozens of rows per step, side by side on the pool, and
// fresh vectors of the vocabulary's size would be mapped and zeroed again for every row.
struct Scratch {
  std::vector<float> masked;       // [n] logits with the disallowed tokens at -inf
  std::vector<float> w;            // [n] weights
  std::vector<double> block_mass;  // [blocks] weight of each kBlock ids (kept ones only, later)
  std::vector<uint64_t> kept;      // keys of the kept set, ascending, when listed
  std::vector<uint16_t> bins;      // [n] top-p's histogram bin of each token
  std::vector<double> mass;        // [kLanes, kBins]
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

int32_t IdOf(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

// The kept set: listed (Scratch::kept, ascending), or every token that Keeps() passes.
struct Kept {
  Row row;
  bool listed = false;
  // Top-p's cut through the whole row: tokens in bins before `bin`, and those of `bin` up to the
  // key `last` (when by_bins).
  bool by_bins = false;
  uint16_t bin = 0;
  uint64_t last = 0;
  float max_distance = kInf;  // min-p: the distance at most
  double cut_mass = -1;       // the kept mass top-p's cut found (by_bins; -1: not known)

  template <bool kMinP, bool kByBins>
  bool Keeps(const Scratch& s, int64_t t) const {
    if (row.w[t] == 0.0f || (kMinP && row.Distance(t) > max_distance)) return false;
    return !kByBins || s.bins[t] < bin || (s.bins[t] == bin && row.Key(t) <= last);
  }
  bool KeepsAll() const { return !by_bins && max_distance == kInf; }
  // f(keeps) with keeps(s, t) the Keeps for this set's filters, chosen once per row.
  template <class F>
  auto WithKeeps(F&& f) const {
    const bool min_p = max_distance != kInf;
    auto keeps = [this]<bool kMinP, bool kByBins>() {
      return [this](const Scratch& s, int64_t t) { return Keeps<kMinP, kByBins>(s, t); };
    };
    if (min_p && by_bins) return f(keeps.template operator()<true, true>());
    if (min_p) return f(keeps.template operator()<true, false>());
    if (by_bins) return f(keeps.template operator()<false, true>());
    return f(keeps.template operator()<false, false>());
  }
};

// keys := the k first tokens of the order (0 < k < n), ascending.
void FirstKeys(const Row& r, int64_t k, std::vector<uint64_t>& keys) {
  keys.clear();
  if (k > kHeapTopK) {
    keys.resize(r.n);
    for (int64_t t = 0; t < r.n; ++t) keys[t] = r.Key(t);
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end());
    keys.resize(k);
    std::sort(keys.begin(), keys.end());
    return;
  }
  // A max-heap of the k first so far. Ids only grow along the scan, so a token can enter only
  // with a logit above the heap's last one: one float compare per token. (Under DAZ, as on the
  // pool's threads, a subnormal logit is 0 to this compare and to OrderKey alike.)
  for (int64_t t = 0; t < k; ++t) keys.push_back(r.Key(t));
  std::make_heap(keys.begin(), keys.end());
  float floor = r.x[IdOf(keys.front())];
  for (int64_t t = k; t < r.n; ++t) {
    if (!(r.x[t] > floor)) continue;
    std::pop_heap(keys.begin(), keys.end());
    keys.back() = r.Key(t);
    std::push_heap(keys.begin(), keys.end());
    floor = r.x[IdOf(keys.front())];
  }
  std::sort(keys.begin(), keys.end());
}

// Cuts the listed (ascending) keys after the first whose running weight reaches `target`.
void KeepUntilMass(const Row& r, double target, std::vector<uint64_t>& keys) {
  double cumulative = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    cumulative += r.w[IdOf(keys[i])];
    if (cumulative >= target) {
      keys.resize(i + 1);
      return;
    }
  }
}

// keys := the keys of the tokens `in` admits, in id order; false (keys partial) when there are
// more than kListMax of them.
template <class In>
bool ListFew(const Row& r, In in, std::vector<uint64_t>& keys) {
  keys.clear();
  for (int64_t t = 0; t < r.n; ++t) {
    if (!in(t)) continue;
    if (static_cast<int64_t>(keys.size()) == kListMax) return false;
    keys.push_back(r.Key(t));
  }
  return true;
}

// Top-p over the whole row: the cut where the running mass, in the order, reaches top_p of the
// row's mass. A histogram of mass by distance finds the bin the cut falls in; only that bin's
// tokens are ranked. When the bins up to it hold at most kListMax tokens they become the kept
// list; otherwise the cut is k's bin and last key.
void TopMassCut(double top_p, Scratch& s, Kept& k) {
  const Row& r = k.row;
  double total = 0;  // the row's mass
  for (double m : s.block_mass) total += m;
  const double target = top_p * total;
  // The listed keys ranked, then cut where the running mass reaches the target: the kept list.
  auto keep_listed = [&] {
    std::sort(s.kept.begin(), s.kept.end());
    KeepUntilMass(r, target, s.kept);
    k.listed = true;
  };
  // A small vocabulary is ranked whole. In a peaked row (a trained model's, mostly) the few
  // tokens near the best usually hold top_p of the mass, and then only they are ranked.
  auto near_mass = [&] {
    double near = 0;
    for (uint64_t key : s.kept) near += r.w[IdOf(key)];
    return near;
  };
  if (ListFew(r, [](int64_t) { return true; }, s.kept) ||
      (ListFew(r, [&](int64_t t) { return r.Distance(t) <= kPeakDistance; }, s.kept) &&
       near_mass() >= target)) {
    keep_listed();
    return;
  }
  s.bins.resize(r.n);
  s.mass.assign(kLanes * kBins, 0.0);
  for (int64_t t = 0; t < r.n; ++t) {
    const uint16_t bin = BinOf(r.Distance(t));
    s.bins[t] = bin;
    s.mass[(t % kLanes) * kBins + bin] += r.w[t];
  }
  for (int64_t lane = 1; lane < kLanes; ++lane) {
    for (int64_t b = 0; b < kBins; ++b) s.mass[b] += s.mass[lane * kBins + b];
  }
  double before = 0;  // mass of the bins before `bin`
  int64_t bin = 0;
  while (bin < kBins - 1 && before + s.mass[bin] < target) before += s.mass[bin++];
  // The tokens up to the cut's bin, listed when they are few.
  if (ListFew(r, [&](int64_t t) { return s.bins[t] <= bin; }, s.kept)) {
    keep_listed();
    return;
  }
  // Many: only the cut's bin is ranked.
  s.kept.clear();
  for (int64_t t = 0; t < r.n; ++t) {
    if (s.bins[t] == bin) s.kept.push_back(r.Key(t));
  }
  std::sort(s.kept.begin(), s.kept.end());
  k.by_bins = true;
  k.bin = static_cast<uint16_t>(bin);
  k.last = s.kept.back();
  for (uint64_t key : s.kept) {
    before += r.w[IdOf(key)];
    if (before >= target) {
      k.last = key;
      break;
    }
  }
  k.cut_mass = before;
}

Kept FindKept(const std::vector<float>& logits, const uint32_t* allowed, const SamplingParams& p,
              Scratch& s) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const float* x = logits.data();
  if (allowed != nullptr) {
    s.masked.assign(logits.begin(), logits.end());
    for (int64_t t = 0; t < n; ++t) {
      if (!BitmaskAllows(allowed, static_cast<int32_t>(t))) s.masked[t] = -kInf;
    }
    x = s.masked.data();
  }
  s.w.resize(n);
  s.block_mass.resize((n + kBlock - 1) / kBlock);
  // 1/T stays a normal float: a temperature so small that it overflows acts as the largest
  // scale (the best tokens weigh 1, the others 0; inf would make the best one's 0 * inf NaN),
  // one so large that it flushes to 0 as the smallest (inf distances stay inf, not NaN).
  const float inv_t = std::clamp(1.0f / p.temperature, std::numeric_limits<float>::min(),
                                 std::numeric_limits<float>::max());
  // + 0: a max of -0 would give the +0 logits tied with it the distance -0, whose bits bin it
  // last.
  const float max =
      kernels::BestKernels().exp_weights(x, n, inv_t, kBlock, s.w.data(), s.block_mass.data()) +
      0.0f;
  Kept k{Row{x, n, max, inv_t, s.w.data()}};
  // Nothing allowed (every logit -inf): no filter has anything to rank; the draw falls back.
  if (max == -kInf) return k;

  if (p.top_k > 0 && p.top_k < n) {
    FirstKeys(k.row, p.top_k, s.kept);
    k.listed = true;
  }
  if (p.top_p < 1.0f) {
    // Top-p acts on what top-k left, renormalized (as transformers and vLLM apply them).
    if (k.listed) {
      double mass = 0;
      for (uint64_t key : s.kept) mass += k.row.w[IdOf(key)];
      KeepUntilMass(k.row, p.top_p * mass, s.kept);
    } else {
      TopMassCut(p.top_p, s, k);
    }
  }
  if (p.min_p > 0.0f) {
    // probability >= min_p * the best's  <=>  distance <= -ln(min_p)
    k.max_distance = static_cast<float>(-std::log(static_cast<double>(p.min_p)));
    if (k.listed) {
      size_t keep = 1;  // the best always stays
      while (keep < s.kept.size() && k.row.Distance(IdOf(s.kept[keep])) <= k.max_distance) ++keep;
      s.kept.resize(keep);
    }
  }
  return k;
}

// The draw over a listed kept set: u over its mass, walking it in id order.
int32_t DrawFromList(const Row& r, std::vector<uint64_t>& keys, double u) {
  if (keys.empty()) return r.FirstBest();
  for (uint64_t& key : keys) key = static_cast<uint64_t>(IdOf(key));  // ids, in id order below
  std::sort(keys.begin(), keys.end());
  double mass = 0;
  for (uint64_t id : keys) mass += r.w[id];
  const double target = u * mass;
  double cumulative = 0;
  int32_t last = static_cast<int32_t>(keys.front());
  for (uint64_t id : keys) {
    if (r.w[id] == 0.0f) continue;
    cumulative += r.w[id];
    last = static_cast<int32_t>(id);
    if (target < cumulative) break;
  }
  return last;
}

// The draw over every token k keeps: u over their mass, walking them in id order, a block at a
// time (block_mass: exp_weights' masses, which are the kept ones' when k keeps all).
template <class Keeps>
int32_t DrawKept(const Kept& k, Keeps keeps, Scratch& s, double u) {
  const Row& r = k.row;
  std::vector<double>& block_mass = s.block_mass;
  const int64_t blocks = static_cast<int64_t>(block_mass.size());
  auto kept_mass_of = [&](int64_t b) {
    double m = 0;
    for (int64_t t = b * kBlock; t < std::min(r.n, (b + 1) * kBlock); ++t) {
      if (keeps(s, t)) m += r.w[t];
    }
    return m;
  };
  // The kept mass. Top-p's cut knows it when no min-p bound follows: the walk then sums each
  // block only until the target's (half the row on average). Otherwise one pass sums them all
  // first (keeping all, exp_weights already did).
  const bool lazy = k.by_bins && k.cut_mass >= 0 && k.max_distance == kInf;
  double mass = 0;
  if (lazy) {
    mass = k.cut_mass;
  } else {
    if (!k.KeepsAll()) {
      for (int64_t b = 0; b < blocks; ++b) block_mass[b] = kept_mass_of(b);
    }
    for (double m : block_mass) mass += m;
  }
  const double target = u * mass;
  double cumulative = 0;
  int64_t b = 0;
  for (; b < blocks - 1; ++b) {
    const double m = lazy ? kept_mass_of(b) : block_mass[b];
    if (target < cumulative + m) break;
    cumulative += m;
  }
  // Walk on from block b (rounding may carry the walk past it). When it ends (u near 1) the last
  // kept token is the answer.
  int32_t last = -1;
  for (int64_t t = b * kBlock; t < r.n; ++t) {
    if (!keeps(s, t)) continue;
    cumulative += r.w[t];
    last = static_cast<int32_t>(t);
    if (target < cumulative) return last;
  }
  for (int64_t t = b * kBlock - 1; last < 0 && t >= 0; --t) {
    if (keeps(s, t)) last = static_cast<int32_t>(t);
  }
  // Nothing weighs anything (every token disallowed): the first best one.
  return last >= 0 ? last : r.FirstBest();
}

}  // namespace

int32_t DrawFiltered(const std::vector<float>& logits, const uint32_t* allowed,
                     const SamplingParams& p, double u) {
  Scratch& s = ThreadScratch();
  const Kept k = FindKept(logits, allowed, p, s);
  if (k.listed) return DrawFromList(k.row, s.kept, u);
  return k.WithKeeps([&](auto keeps) { return DrawKept(k, keeps, s, u); });
}

std::vector<int32_t> KeptTokens(const std::vector<float>& logits, const uint32_t* allowed,
                                const SamplingParams& p) {
  Scratch& s = ThreadScratch();
  const Kept k = FindKept(logits, allowed, p, s);
  std::vector<int32_t> ids;
  if (k.listed) {
    for (uint64_t key : s.kept) {
      if (k.row.w[IdOf(key)] > 0.0f) ids.push_back(IdOf(key));
    }
  } else {
    k.WithKeeps([&](auto keeps) {
      for (int64_t t = 0; t < k.row.n; ++t) {
        if (keeps(s, t)) ids.push_back(static_cast<int32_t>(t));
      }
    });
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace latent::engine
