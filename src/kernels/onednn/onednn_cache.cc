#include "kernels/onednn/onednn_cache.h"

#include <algorithm>
#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "kernels/onednn/onednn_linear.h"  // CacheCounts

namespace latent::kernels::onednn {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct ShapeKey {
  int64_t m, n, k;
  bool operator==(const ShapeKey&) const = default;
};

struct WeightKey {
  const void* data;
  int64_t n, k;
  uint64_t sample;
  bool operator==(const WeightKey&) const = default;
};

inline uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

struct ShapeHash {
  size_t operator()(const ShapeKey& s) const {
    return Mix(Mix(static_cast<uint64_t>(s.m), s.n), s.k);
  }
};

struct WeightHash {
  size_t operator()(const WeightKey& w) const {
    return Mix(Mix(Mix(reinterpret_cast<uintptr_t>(w.data), w.n), w.k), w.sample);
  }
};

// 17 eight-byte words spread evenly over the matrix (the last one ends at its last byte): cheap
// next to any GEMM worth sending to oneDNN, and enough to tell two different weights apart.
uint64_t SampleBytes(const void* data, int64_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = static_cast<uint64_t>(bytes);
  if (bytes <= 0) return h;
  constexpr int kSamples = 16;
  const int64_t span = std::max<int64_t>(0, bytes - 8);
  for (int i = 0; i <= kSamples; ++i) {
    const int64_t at = span * i / kSamples;
    uint64_t v = 0;
    std::memcpy(&v, p + at, static_cast<size_t>(std::min<int64_t>(8, bytes - at)));
    h = Mix(h, v);
  }
  return h;
}

struct Packed {
  dnnl::memory::desc desc;
  dnnl::memory memory;
};

// Entries are never removed, so references handed out stay valid (unordered_map nodes and list
// elements do not move). Creation runs outside the lock; a racing duplicate is dropped.
struct Caches {
  std::mutex mu;
  std::unordered_map<ShapeKey, Matmul, ShapeHash> matmuls;
  std::unordered_map<WeightKey, std::list<Packed>, WeightHash> weights;
};

Caches& TheCaches() {
  static Caches* caches = new Caches;  // never destroyed: pool threads may outlive main's statics
  return *caches;
}

Matmul MakeMatmul(const ShapeKey& s) {
  const dnnl::memory::desc src({s.m, s.k}, dt::bf16, tag::ab);
  const dnnl::memory::desc weights({s.k, s.n}, dt::bf16, tag::any);
  const dnnl::memory::desc dst({s.m, s.n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  // Our scratchpad, per executing thread: several threads run one primitive at once.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), attr, CpuEngine());
  Matmul mm;
  mm.primitive = dnnl::matmul(pd);
  mm.src = pd.src_desc();
  mm.weights = pd.weights_desc();
  mm.dst = pd.dst_desc();
  mm.scratchpad = pd.scratchpad_desc();
  mm.scratchpad_bytes = mm.scratchpad.get_size();
  return mm;
}

dnnl::memory Pack(const WeightRef& w, const dnnl::memory::desc& desc) {
  // W [n, k] row-major is the matmul's B [k, n] with k the fastest dimension: tag ba.
  const dnnl::memory::desc plain({w.k, w.n}, dt::bf16, tag::ba);
  dnnl::memory from(plain, CpuEngine(), const_cast<void*>(w.data));  // only read
  dnnl::memory to(desc, CpuEngine());
  dnnl::stream stream(CpuEngine());
  dnnl::reorder(from, to).execute(stream, from, to);
  stream.wait();
  return to;
}

}  // namespace

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

const Matmul& GetMatmul(int64_t m, int64_t n, int64_t k) {
  Caches& c = TheCaches();
  const ShapeKey key{m, n, k};
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.matmuls.find(key); it != c.matmuls.end()) return it->second;
  }
  Matmul made = MakeMatmul(key);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.matmuls.emplace(key, std::move(made)).first->second;
}

const dnnl::memory& GetPackedWeights(const WeightRef& w, const dnnl::memory::desc& desc) {
  Caches& c = TheCaches();
  const WeightKey key{w.data, w.n, w.k, SampleBytes(w.data, w.n * w.k * 2)};
  const auto find = [&]() -> const dnnl::memory* {
    auto it = c.weights.find(key);
    if (it == c.weights.end()) return nullptr;
    for (const Packed& p : it->second) {
      if (p.desc == desc) return &p.memory;
    }
    return nullptr;
  };
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (const dnnl::memory* hit = find()) return *hit;
  }
  dnnl::memory packed = Pack(w, desc);  // outside the lock: lm_head takes a while
  std::lock_guard<std::mutex> lock(c.mu);
  if (const dnnl::memory* hit = find()) return *hit;
  std::list<Packed>& list = c.weights[key];
  list.push_back({desc, std::move(packed)});
  return list.back().memory;
}

CacheCounts CachedEntries() {
  Caches& c = TheCaches();
  std::lock_guard<std::mutex> lock(c.mu);
  CacheCounts counts;
  counts.matmuls = c.matmuls.size();
  for (const auto& [key, list] : c.weights) counts.weights += list.size();
  return counts;
}

}  // namespace latent::kernels::onednn
