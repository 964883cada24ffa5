// Kernel benchmark (not a test): weight-streaming GB/s of linear for decode-sized M over at least
// 2 GiB of distinct weight matrices (so every call reads DRAM, as successive layers do), and
// decode attention time over 576-wide shared latent rows (absorbed MLA). Prints one JSON object.
//
//   build/bench/kernels/latent_kernel_bench [--gib 2] [--reps 3] [--threads 1,2] [--m 1,4,16]
//       [--dtypes bf16,fp8,f32,i8,w8a8] [--n 4096] [--k 4096] [--contexts 4096,16384] [--heads 16]
//       [--prefill 512,2048]
//       [--kernels best|ref|avx512|bf16dot|avx512-packed|amx|onednn|avx2|avx2-packed]
//       [--attention-rows f32|bf16] [--prefill-calls both|queries] [--window W]
//
// --dtypes bf16c: bf16 weights under bf16 compute (WeightRef::bf16_activations, `--precision
// bf16`: activations rounded to bf16), which the AVX-512 table runs on vdpbf16ps and the AMX table
// on TDPBF16PS (each weight repacked first, as the loader does; the packing is not timed).
// --dtypes fp8c: fp8 weights (128 x 128 block scales) under bf16 compute, which the packed and AMX
// tables run on vdpbf16ps over their packed codes (avx512/linear_fp8_packed.cc).
// --kernels picks a table (absent on this CPU or build: exits with status 3).
// Defaults are the set: bf16/fp8/f32 4096x4096 at M = 1, 4, 16 on 1 and 2 threads,
// attention at 4k and 16k positions with 16 heads. With --n 64 --gib 0.0001 the weights stay in
// cache (compute ceiling of the kernels). "gflops" counts 2 * M flops per weight;
// "prefill_attention": causal attention of a P-token chunk over per-head expanded keys (192) and
// values (128), as the expanded form runs it: one `attention` call per query against one
// `attention_queries` call for all of them (other bits: the two sum in other orders).
// --prefill-calls queries times the second alone (the first takes seconds a run from 4k tokens).
// --window W: each token attends its last W positions (a sliding-window layer:
// QueriesAttentionArgs::starts), not its prefix.
// --attention-rows bf16: the decode attention over bf16 rows with bf16 products (the engine's
// default for a bf16 checkpoint), the DSA indexer's scores of one query (64 heads of 128) over as
// many bf16 keys ("index_scores"), and the prefill attention with bf16 products; "gflops" counts
// 2 flops per multiply-add.
// "caller_cpu_ms" is the calling thread's CPU time (steadier than wall time on a busy machine);
// "caller_cpu_gflops" the linear flops over it (the kernel's own rate with --threads 1).
// The JSON records /proc/loadavg at start and end: a busy machine halves the 2-thread figures.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/index_scores.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"
#include "tensor/dtype.h"
#include "threads/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;
using latent::DType;
using latent::kernels::KernelTable;
using latent::kernels::WeightRef;

std::vector<int64_t> ParseInts(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::atoll(item.c_str()));
  return v;
}

std::vector<std::string> ParseStrings(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(item);
  return v;
}

struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

// Anonymous memory with transparent huge pages (what a loader copying weights would use).
uint8_t* AllocHuge(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

// Normal (never denormal) values of modest size for each dtype.
void FillWeights(uint8_t* p, size_t bytes, DType dtype) {
  Rng rng;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t r = rng.Next();
    uint64_t v = 0;
    switch (dtype) {
      case DType::kF32:
        for (int h = 0; h < 2; ++h) {
          const uint32_t bits = static_cast<uint32_t>(r >> (32 * h));
          const uint32_t f = (bits & 0x807fffffu) | ((118u + (bits >> 23) % 8) << 23);
          v |= static_cast<uint64_t>(f) << (32 * h);
        }
        break;
      case DType::kBF16:
      case DType::kF16:
        for (int h = 0; h < 4; ++h) {
          const uint32_t bits = static_cast<uint16_t>(r >> (16 * h));
          const uint32_t f = dtype == DType::kBF16
                                 ? (bits & 0x807fu) | ((118u + (bits >> 7) % 8) << 7)
                                 : (bits & 0x83ffu) | ((8u + (bits >> 10) % 8) << 10);
          v |= static_cast<uint64_t>(f) << (16 * h);
        }
        break;
      default:  // fp8: any byte but NaN (i8: any byte but the few NaN-looking ones, no matter)
        for (int h = 0; h < 8; ++h) {
          uint64_t b = (r >> (8 * h)) & 0xff;
          if ((b & 0x7f) == 0x7f) b &= 0xfe;
          v |= b << (8 * h);
        }
        break;
    }
    std::memcpy(p + i, &v, 8);
  }
}

// CPU time of this thread: with one thread, steadier than wall time on a shared machine.
double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string LoadAvg() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line;
}

struct Options {
  double gib = 2.0;
  int reps = 3;
  std::vector<int64_t> threads = {1, 2};
  std::vector<int64_t> ms = {1, 4, 16};
  std::vector<std::string> dtypes = {"bf16", "fp8", "f32"};
  int64_t n = 4096, k = 4096;
  std::vector<int64_t> contexts = {4096, 16384};
  std::vector<int64_t> prefills = {512};
  int64_t heads = 16;
  std::string attention_rows = "f32";
  std::string prefill_calls = "both";  // both | queries
  int64_t window = 0;                  // prefill attention's sliding window; 0: causal
  std::string kernels = "best";
  // --file PATH --offset BYTES: one [n, k] matrix read in place from a mapped file (a checkpoint's
  // lm_head, say), as the engine reads its weights, instead of anonymous huge pages.
  std::string file;
  int64_t offset = 0;
};

DType DTypeOf(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16" || name == "bf16c") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  if (name == "fp8" || name == "fp8c") return DType::kF8E4M3;
  if (name == "i8" || name == "w8a8") return DType::kI8;  // --quantize int8/w8a8: row scales
  std::fprintf(stderr, "unknown dtype %s\n", name.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  latent::threads::FlushDenormals();
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--gib")
      o.gib = std::atof(value.c_str());
    else if (flag == "--reps")
      o.reps = std::atoi(value.c_str());
    else if (flag == "--threads")
      o.threads = ParseInts(value);
    else if (flag == "--m")
      o.ms = ParseInts(value);
    else if (flag == "--dtypes")
      o.dtypes = ParseStrings(value);
    else if (flag == "--n")
      o.n = std::atoll(value.c_str());
    else if (flag == "--k")
      o.k = std::atoll(value.c_str());
    else if (flag == "--contexts")
      o.contexts = ParseInts(value);
    else if (flag == "--prefill")
      o.prefills = ParseInts(value);
    else if (flag == "--heads")
      o.heads = std::atoll(value.c_str());
    else if (flag == "--kernels")
      o.kernels = value;
    else if (flag == "--attention-rows")
      o.attention_rows = value;
    else if (flag == "--prefill-calls")
      o.prefill_calls = value;
    else if (flag == "--window")
      o.window = std::atoll(value.c_str());
    else if (flag == "--file")
      o.file = value;
    else if (flag == "--offset")
      o.offset = std::atoll(value.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (o.prefill_calls != "both" && o.prefill_calls != "queries") {
    std::fprintf(stderr, "--prefill-calls %s: both or queries\n", o.prefill_calls.c_str());
    return 2;
  }
  const KernelTable* table = o.kernels == "ref"       ? &latent::kernels::RefKernels()
                             : o.kernels == "avx512"  ? latent::kernels::Avx512Kernels()
                             : o.kernels == "bf16dot" ? latent::kernels::Bf16DotKernels()
                             : o.kernels == "avx512-packed" ? latent::kernels::Bf16PackedKernels()
                             : o.kernels == "amx"     ? latent::kernels::AmxKernels()
                             : o.kernels == "avx2"    ? latent::kernels::Avx2Kernels()
                             : o.kernels == "avx2-packed" ? latent::kernels::Avx2PackedKernels()
                             : o.kernels == "onednn"  ? latent::kernels::OnednnKernels()
                                                      : &latent::kernels::BestKernels();
  if (table == nullptr) {
    std::fprintf(stderr, "--kernels %s: not on this CPU or in this build\n", o.kernels.c_str());
    return 3;
  }
  const KernelTable& kt = *table;
  std::printf("{\"kernels\": \"%s\", \"loadavg_start\": \"%s\", \"n\": %lld, \"k\": %lld,\n",
              o.kernels == "best" ? latent::kernels::BestKernelsName() : o.kernels.c_str(),
              LoadAvg().c_str(),
              static_cast<long long>(o.n), static_cast<long long>(o.k));
  std::printf(" \"linear\": [");
  bool first = true;
  for (const std::string& name : o.dtypes) {
    const DType dtype = DTypeOf(name);
    const size_t matrix_bytes = static_cast<size_t>(o.n * o.k) * latent::DTypeSize(dtype);
    int64_t count = std::max<int64_t>(
        2, static_cast<int64_t>(o.gib * (1ull << 30) / static_cast<double>(matrix_bytes) + 0.999));
    // Matrices start 32 bytes past a page: checkpoint tensors are not 64-byte aligned.
    const size_t stride = (matrix_bytes + 4096 + 32 + 4095) / 4096 * 4096;
    uint8_t* base = nullptr;
    size_t mapped = 0;
    if (!o.file.empty()) {
      count = 1;
      const int fd = open(o.file.c_str(), O_RDONLY);
      struct stat st;
      if (fd < 0 || fstat(fd, &st) != 0 ||
          static_cast<size_t>(o.offset) + matrix_bytes > static_cast<size_t>(st.st_size)) {
        std::fprintf(stderr, "cannot map %s: [%lld, +%zu)\n", o.file.c_str(),
                     static_cast<long long>(o.offset), matrix_bytes);
        return 1;
      }
      mapped = st.st_size;
      base = static_cast<uint8_t*>(mmap(nullptr, mapped, PROT_READ, MAP_PRIVATE, fd, 0));
      close(fd);
    } else {
      base = AllocHuge(stride * count);
    }
    std::vector<WeightRef> ws(count);
    const int64_t block = 128;
    const int64_t scale_count = ((o.n + block - 1) / block) * ((o.k + block - 1) / block);
    std::vector<float> scales(std::max(scale_count, o.n), 0.01f);
    std::vector<int32_t> row_sums(o.n, 0);  // w8a8: any values time the same
    for (int64_t i = 0; i < count; ++i) {
      uint8_t* p = base + i * stride + 32;
      if (mapped != 0) {
        p = base + o.offset;
      } else {
        FillWeights(p, matrix_bytes, dtype);
      }
      ws[i].data = p;
      ws[i].dtype = dtype;
      ws[i].n = o.n;
      ws[i].k = o.k;
      if (dtype == DType::kF8E4M3) {
        ws[i].scale = scales.data();
        ws[i].scale_dtype = DType::kF32;
        ws[i].block_n = block;
        ws[i].block_k = block;
      } else if (dtype == DType::kI8) {
        ws[i].scale = scales.data();
        ws[i].scale_dtype = DType::kF32;
        ws[i].block_n = 1;
        ws[i].block_k = o.k;
        if (name == "w8a8") ws[i].row_sums = row_sums.data();
      }
      ws[i].bf16_activations = name == "bf16c" || name == "fp8c";
    }
    // As the loader does: the table's own layout where it has one (AMX tiles), one copy each.
    std::vector<std::unique_ptr<uint8_t[]>> packed;
    for (WeightRef& w : ws) packed.push_back(latent::kernels::PackForLinear(kt, w));
    const int64_t max_m = *std::max_element(o.ms.begin(), o.ms.end());
    std::vector<float> x(max_m * o.k), y(max_m * o.n), scratch(o.k);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t t : o.threads) {
      latent::threads::SetNumThreads(static_cast<int>(t));
      for (int64_t m : o.ms) {
        for (int64_t i = 0; i < std::min<int64_t>(count, 4); ++i) {
          kt.linear(x.data(), m, ws[i], y.data(), scratch.data());  // warm-up
        }
        std::vector<double> gbs, cpu_gflops;
        for (int r = 0; r < o.reps; ++r) {
          const auto start = Clock::now();
          const double cpu_start = ThreadCpuMs();
          for (int64_t i = 0; i < count; ++i)
            kt.linear(x.data(), m, ws[i], y.data(), scratch.data());
          const double s = std::chrono::duration<double>(Clock::now() - start).count();
          gbs.push_back(static_cast<double>(matrix_bytes) * count / s / 1e9);
          cpu_gflops.push_back(2.0 * m * o.n * o.k * count / (ThreadCpuMs() - cpu_start) * 1e-6);
        }
        std::printf(
            "%s\n  {\"dtype\": \"%s\", \"m\": %lld, \"threads\": %lld, \"gb_per_s\": %.2f, "
            "\"best_gb_per_s\": %.2f, "
            "\"gflops\": %.1f, \"caller_cpu_gflops\": %.1f, \"matrices\": %lld, \"gib\": %.2f}",
            first ? "" : ",", name.c_str(), static_cast<long long>(m), static_cast<long long>(t),
            Median(gbs), *std::max_element(gbs.begin(), gbs.end()), Median(gbs) / latent::DTypeSize(dtype) * 2.0 * m,
            Median(cpu_gflops),
            static_cast<long long>(count),
            static_cast<double>(matrix_bytes) * count / (1ull << 30));
        std::fflush(stdout);
        first = false;
      }
    }
    munmap(base, mapped != 0 ? mapped : stride * count);
  }
  std::printf("\n ],\n \"attention\": [");
  first = true;
  const int64_t qk = 576, dv = 512;
  const bool bf16_rows = o.attention_rows == "bf16";
  if (!bf16_rows && o.attention_rows != "f32") {
    std::fprintf(stderr, "--attention-rows %s: f32 or bf16\n", o.attention_rows.c_str());
    return 2;
  }
  // Times fn as the median of at least 5 calls after one warm-up, per thread count, and prints
  // one JSON line per thread count (fields: what `describe` prints, then ms and gflops).
  const auto time_calls = [&](const std::function<void()>& fn, const std::string& describe,
                              double flops) {
    for (int64_t t : o.threads) {
      latent::threads::SetNumThreads(static_cast<int>(t));
      fn();
      std::vector<double> ms, cpu_ms;
      for (int r = 0; r < std::max(5, o.reps); ++r) {
        const auto start = Clock::now();
        const double cpu_start = ThreadCpuMs();
        fn();
        cpu_ms.push_back(ThreadCpuMs() - cpu_start);
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      }
      std::printf("%s\n  {%s, \"threads\": %lld, \"ms\": %.3f, \"caller_cpu_ms\": %.3f, "
                  "\"gflops\": %.1f}",
                  first ? "" : ",", describe.c_str(), static_cast<long long>(t), Median(ms),
                  Median(cpu_ms), flops / Median(ms) / 1e6);
      std::fflush(stdout);
      first = false;
    }
  };
  for (int64_t length : o.contexts) {
    // rows [length, qk] in f32 or bf16 (the same values), q [heads, qk].
    std::vector<float> rows(length * qk), q(o.heads * qk), out(o.heads * dv), scratch(length);
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = static_cast<float>((i * 40503u) % 2001) * 1e-3f - 1.0f;
    std::vector<uint16_t> rows_bf16(bf16_rows ? rows.size() : 0);
    for (size_t i = 0; i < rows_bf16.size(); ++i) rows_bf16[i] = latent::F32ToBF16(rows[i]);
    std::vector<const void*> ptrs(length);
    for (int64_t t = 0; t < length; ++t) {
      ptrs[t] = bf16_rows ? static_cast<const void*>(&rows_bf16[t * qk]) : &rows[t * qk];
    }
    latent::kernels::AttentionArgs a;
    a.q = q.data();
    a.num_heads = o.heads;
    a.qk_dim = qk;
    a.rows = bf16_rows ? DType::kBF16 : DType::kF32;
    a.bf16_products = bf16_rows;
    a.keys = ptrs.data();
    a.key_head_stride = 0;
    a.values = ptrs.data();
    a.value_head_stride = 0;
    a.v_dim = dv;
    a.length = length;
    a.scale = 0.04f;
    a.out = out.data();
    a.scratch = scratch.data();
    char describe[160];
    std::snprintf(describe, sizeof describe,
                  "\"context\": %lld, \"heads\": %lld, \"row\": %lld, \"rows\": \"%s\"",
                  static_cast<long long>(length), static_cast<long long>(o.heads),
                  static_cast<long long>(qk), o.attention_rows.c_str());
    time_calls([&] { kt.attention(a); }, describe,
               2.0 * static_cast<double>(length * o.heads * (qk + dv)));
    if (!bf16_rows) continue;
    // The DSA indexer's scores over the first qk / 128 * 128 elements of the same rows as keys.
    constexpr int64_t kIndexHeads = 64, kIndexDim = 128;
    std::vector<float> iq(kIndexHeads * kIndexDim), iw(kIndexHeads, 0.125f), scores(length);
    for (size_t i = 0; i < iq.size(); ++i) iq[i] = q[i % q.size()];
    latent::kernels::IndexScoreArgs s;
    s.q = iq.data();
    s.w = iw.data();
    s.heads = kIndexHeads;
    s.dim = kIndexDim;
    s.scale = 1.0f / std::sqrt(static_cast<float>(kIndexDim));
    s.keys = ptrs.data();
    s.rows = DType::kBF16;
    s.n = length;
    s.scores = scores.data();
    s.bf16_products = true;
    std::snprintf(describe, sizeof describe,
                  "\"index_scores\": %lld, \"heads\": %lld, \"dim\": %lld",
                  static_cast<long long>(length), static_cast<long long>(kIndexHeads),
                  static_cast<long long>(kIndexDim));
    // The engine splits one query's keys across the threads in chunks of 2048 (ops/dsa_indexer.cc).
    time_calls(
        [&] {
          latent::threads::ParallelFor(length, 2048, [&](int64_t j0, int64_t j1) {
            latent::kernels::IndexScoreArgs part = s;
            part.keys = s.keys + j0;
            part.n = j1 - j0;
            part.scores = s.scores + j0;
            kt.index_scores(part);
          });
        },
        describe, 2.0 * static_cast<double>(length * kIndexHeads * kIndexDim));
  }
  std::printf("\n ],\n \"prefill_attention\": [");
  first = true;
  for (int64_t p : o.prefills) {
    const int64_t dq = 192, dvh = 128, kv_stride = 256;  // V2/V3 head dims
    std::vector<float> keys(p * o.heads * dq), kv(p * o.heads * kv_stride);
    std::vector<float> q(p * o.heads * dq), out(p * o.heads * dvh), scratch(p);
    for (size_t i = 0; i < keys.size(); ++i)
      keys[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
    for (size_t i = 0; i < kv.size(); ++i)
      kv[i] = static_cast<float>((i * 40503u) % 2001) * 1e-3f - 1.0f;
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = static_cast<float>((i * 69069u) % 2001) * 1e-3f - 1.0f;
    std::vector<const void*> key_ptrs(p), value_ptrs(p);
    std::vector<int64_t> lengths(p), starts(p);
    double attended = 0;  // (query, position) pairs
    for (int64_t t = 0; t < p; ++t) {
      key_ptrs[t] = &keys[t * o.heads * dq];
      value_ptrs[t] = &kv[t * o.heads * kv_stride + dq - 64];
      lengths[t] = t + 1;
      starts[t] = o.window > 0 ? std::max<int64_t>(0, t + 1 - o.window) : 0;
      attended += static_cast<double>(lengths[t] - starts[t]);
    }
    latent::kernels::QueriesAttentionArgs qa;
    qa.shared.num_heads = o.heads;
    qa.shared.qk_dim = dq;
    qa.shared.keys = key_ptrs.data();
    qa.shared.key_head_stride = dq;
    qa.shared.values = value_ptrs.data();
    qa.shared.value_head_stride = kv_stride;
    qa.shared.v_dim = dvh;
    qa.shared.scale = 0.07f;
    qa.num_queries = p;
    qa.q = q.data();
    qa.lengths = lengths.data();
    qa.starts = o.window > 0 ? starts.data() : nullptr;
    qa.out = out.data();
    qa.bf16_products = bf16_rows;  // --attention-rows bf16: bf16 compute, as the engine's default
    const auto per_query = [&] {
      for (int64_t i = 0; i < p; ++i) {
        latent::kernels::AttentionArgs a = qa.shared;
        a.q = &q[i * o.heads * dq];
        a.keys = key_ptrs.data() + starts[i];
        a.values = value_ptrs.data() + starts[i];
        a.length = i + 1 - starts[i];
        a.out = &out[i * o.heads * dvh];
        a.scratch = scratch.data();
        kt.attention(a);
      }
    };
    const auto all_queries = [&] { kt.attention_queries(qa); };
    // q.k and p.v flops over the attended positions (the causal triangle, or its window band).
    const double flops = 2.0 * o.heads * (dq + dvh) * attended;
    for (int64_t t : o.threads) {
      latent::threads::SetNumThreads(static_cast<int>(t));
      for (int way = o.prefill_calls == "queries" ? 1 : 0; way < 2; ++way) {
        const auto run = [&] { way == 0 ? per_query() : all_queries(); };
        run();
        std::vector<double> ms;
        for (int r = 0; r < std::max(3, o.reps); ++r) {
          const auto start = Clock::now();
          run();
          ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        }
        // FNV-1a of the output's bytes: equal across calls, thread counts and kernel versions
        // that compute the same values.
        uint64_t hash = 1469598103934665603ull;
        for (size_t i = 0; i < out.size() * sizeof(float); ++i) {
          hash = (hash ^ reinterpret_cast<const uint8_t*>(out.data())[i]) * 1099511628211ull;
        }
        std::printf(
            "%s\n  {\"tokens\": %lld, \"window\": %lld, \"heads\": %lld, \"threads\": %lld, "
            "\"call\": \"%s\", "
            "\"bf16_products\": %s, \"ms\": %.3f, \"gflops\": %.1f, \"out_hash\": \"%016llx\"}",
            first ? "" : ",", static_cast<long long>(p), static_cast<long long>(o.window),
            static_cast<long long>(o.heads),
            static_cast<long long>(t), way == 0 ? "attention per query" : "attention_queries",
            bf16_rows ? "true" : "false", Median(ms), flops / Median(ms) * 1e-6,
            static_cast<unsigned long long>(hash));
        std::fflush(stdout);
        first = false;
      }
    }
  }
  std::printf("\n ],\n \"loadavg_end\": \"%s\"}\n", LoadAvg().c_str());
  return 0;
}
