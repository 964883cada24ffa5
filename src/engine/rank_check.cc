#include "engine/rank_check.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "build_numerics.h"
#include "kernels/kernel_table.h"
#include "model/deepseek_weights.h"
#include "source_state.h"

namespace latent::engine {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConfig = "config.json";
// Data samples per safetensors file, of kSampleBytes each, spread evenly over its data: two
// checkpoints of the same shapes (another seed, a fine-tune of every tensor) likely differ in
// some sample; one that changed a few tensors (the attention alone) may pass unseen.
constexpr int kSamples = 9;
constexpr int64_t kSampleBytes = 4096;
// A header longer than this is not read (the load names the file as malformed).
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 28;

// FNV-1a, 64 bits: a fingerprint, not a defence against a crafted collision.
class Hash {
 public:
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 1099511628211ull;
  }
  std::string Hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h_));
    return text;
  }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

// Only a regular file is opened: a FIFO would block the open, /dev/zero never end. The load
// that follows names what is wrong with anything else (ReadModelFile, MappedFile).
bool IsRegularFile(const fs::path& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

// A hash of the whole file, "" when it cannot be read.
std::string FileHash(const fs::path& path) {
  if (!IsRegularFile(path)) return "";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  Hash hash;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) hash.Add(buffer, in.gcount());
  return hash.Hex();
}

// "SIZE bytes, header HASH, data HASH": the header (tensor names, dtypes, shapes, offsets) and
// kSamples samples of the data; "unreadable" when it cannot be opened.
std::string SafetensorsItem(const fs::path& path) {
  if (!IsRegularFile(path)) return "unreadable";
  std::ifstream in(path, std::ios::binary);
  std::error_code error;
  const uintmax_t size = fs::file_size(path, error);
  if (!in || error) return "unreadable";
  Hash header, data;
  uint64_t header_bytes = 0;
  uint64_t data_begin = size;
  if (size >= 8 && in.read(reinterpret_cast<char*>(&header_bytes), 8)) {
    header.Add(&header_bytes, 8);  // little-endian on every x86-64 rank
    if (header_bytes <= std::min<uint64_t>(size - 8, kMaxHeaderBytes)) {
      std::string text(header_bytes, '\0');
      in.read(text.data(), static_cast<std::streamsize>(header_bytes));
      header.Add(text.data(), static_cast<size_t>(in.gcount()));
      data_begin = 8 + header_bytes;
    }
  }
  const uint64_t data_bytes = size - data_begin;
  const uint64_t sample = std::min<uint64_t>(kSampleBytes, data_bytes);
  std::string buffer(sample, '\0');
  for (int k = 0; k < kSamples && sample > 0; ++k) {
    const uint64_t at = data_begin + (data_bytes - sample) * k / (kSamples - 1);
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buffer.data(), static_cast<std::streamsize>(sample));
    data.Add(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return StrCat(size, " bytes, header ", header.Hex(), ", data ", data.Hex());
}

bool IsSafetensors(const std::string& what) {
  return what.size() > 12 && what.ends_with(".safetensors");
}

// The part of SafetensorsItem's value at `index` (0 size, 1 header, 2 data).
std::string Part(const std::string& value, int index) {
  size_t begin = 0;
  for (int i = 0; i < index; ++i) {
    begin = value.find(", ", begin);
    if (begin == std::string::npos) return "";
    begin += 2;
  }
  const size_t end = value.find(", ", begin);
  return value.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::string Describe(const std::string& what, const std::string& rank0, const std::string& mine,
                     int rank) {
  if (what == kConfig || what.ends_with(".json")) return what + " differs";
  if (IsSafetensors(what)) {
    if (Part(mine, 0) != Part(rank0, 0)) {
      return StrCat(what, ": ", Part(mine, 0), " on rank ", rank, ", ", Part(rank0, 0),
                    " on rank 0");
    }
    if (Part(mine, 1) != Part(rank0, 1)) {
      return what + ": its header differs (tensor names, dtypes, shapes or offsets)";
    }
    return what + ": its data differs (other weights of the same shapes)";
  }
  return StrCat(what, " ", mine.empty() ? "(unset)" : mine, " on rank ", rank, ", ",
                rank0.empty() ? "(unset)" : rank0, " on rank 0");
}

std::string Clean(std::string text) {
  std::replace(text.begin(), text.end(), '\t', ' ');
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string Serialize(const RankItems& items) {
  std::string text;
  for (const auto& [what, value] : items) text += Clean(what) + "\t" + Clean(value) + "\n";
  return text;
}

RankItems Parse(const std::string& text) {
  RankItems items;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) items.emplace_back(line.substr(0, tab), line.substr(tab + 1));
    at = end + 1;
  }
  return items;
}

const std::string* Find(const RankItems& items, const std::string& what) {
  for (const auto& [w, value] : items) {
    if (w == what) return &value;
  }
  return nullptr;
}

}  // namespace

std::string SourceState() {
  const std::string changes = LATENT_SOURCE_CHANGES;
  return changes.empty() ? LATENT_SOURCE_COMMIT
                         : StrCat(LATENT_SOURCE_COMMIT, " with uncommitted changes ", changes);
}

RankItems ItemsBeforeLoading(const std::string& dir, const model::LoadOptions& options) {
  RankItems items = {
      {"latent source", SourceState()},
      {"compiler", LATENT_COMPILER},
      {"build type", LATENT_BUILD_TYPE},
      {"compiler flags", LATENT_COMPILE_FLAGS},
      {"--quantize", model::WeightQuantizationName(options.quantize)},
      {"kernels", kernels::BestKernelsName()},
      // Not implied by the kernels' name: the AVX-512 tables multiply bf16 with vdpbf16ps where
      // the CPU has AVX512_BF16, in f32 FMAs elsewhere, which round differently.
      {"bf16 products", kernels::BestBf16ProductsName()},
      {"LATENT_KEY_FOLD", model::KeyFoldTransposed() ? "transposed" : ""},
      {kConfig, FileHash(fs::path(dir) / kConfig)},
  };
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors.index.json" || IsSafetensors(name)) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& name : files) {
    const fs::path path = fs::path(dir) / name;
    items.emplace_back(name, IsSafetensors(name) ? SafetensorsItem(path) : FileHash(path));
  }
  return items;
}

std::string DescribeDifferences(const RankItems& rank0, const RankItems& mine, int rank) {
  std::vector<std::string> found;
  for (const auto& [what, value] : rank0) {
    const std::string* other = Find(mine, what);
    if (other == nullptr) {
      found.push_back(StrCat(what, ": on rank 0 only"));
    } else if (*other != value) {
      found.push_back(Describe(what, value, *other, rank));
    }
  }
  for (const auto& [what, value] : mine) {
    if (Find(rank0, what) == nullptr) found.push_back(StrCat(what, ": on rank ", rank, " only"));
  }
  constexpr size_t kShown = 3;
  std::string text;
  for (size_t i = 0; i < std::min(found.size(), kShown); ++i) {
    text += (i ? "; " : "") + found[i];
  }
  if (found.size() > kShown) text += StrCat("; and ", found.size() - kShown, " more");
  return text;
}

void CheckRanksAgree(parallel::Communicator& comm, const RankItems& mine) {
  const int ranks = comm.size();
  const std::vector<std::string> texts =
      parallel::AllGatherStrings(comm, Serialize(mine), /*wait_forever=*/true);
  std::vector<RankItems> items(ranks);
  for (int r = 0; r < ranks; ++r) {
    items[r] = Parse(texts[r]);
    // Unreadable: that rank's load fails next and names the file; not judged here.
    if (const std::string* config = Find(items[r], kConfig); config && config->empty()) return;
  }
  std::string differences;
  int differing = 0;
  for (int r = 1; r < ranks; ++r) {
    const std::string d = DescribeDifferences(items[0], items[r], r);
    if (d.empty()) continue;
    if (++differing <= 3) differences += StrCat(differing > 1 ? "; " : "", "rank ", r, ": ", d);
  }
  if (differing == 0) return;
  if (differing > 3) differences += StrCat("; and ", differing - 3, " more ranks");
  if (comm.rank() == 0) {
    parallel::AbortWorld(
        StrCat("the ranks would not compute the same model: ", differences, ". Start every rank "
               "with the same latent build, checkpoint, --quantize and --precision, on CPUs "
               "given the same kernels (docs/scale-out.md)"),
        2);
  }
  // Rank 0 ends the job; should its abort not reach this rank, it ends itself.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  parallel::AbortWorld("rank 0 found the ranks to differ but the job did not end", 2);
}

}  // namespace latent::engine
