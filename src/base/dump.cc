#include "base/dump.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace latent::dump {
namespace {

struct Names {
  bool all = false;
  std::vector<std::string> names;
};

const Names& Wanted() {
  static const Names wanted = [] {
    Names out;
    const char* env = std::getenv("LATENT_DUMP");
    if (env == nullptr) return out;
    std::string list(env);
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      std::string name = list.substr(start, end - start);
      if (name == "all") out.all = true;
      if (!name.empty()) out.names.push_back(name);
      start = end + 1;
    }
    return out;
  }();
  return wanted;
}

}  // namespace

bool Wants(std::string_view name) {
  const Names& wanted = Wanted();
  if (wanted.all) return true;
  for (const std::string& n : wanted.names) {
    if (n == name) return true;
  }
  return false;
}

void Columns(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t stride,
             int64_t col0, int64_t cols) {
  if (!Wants(name)) return;
  static std::mutex mutex;  // Lines stay whole if two forward passes dump at once.
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "LATENT_DUMP %.*s layer=%lld shape=%lldx%lld", static_cast<int>(name.size()),
               name.data(), static_cast<long long>(layer), static_cast<long long>(rows),
               static_cast<long long>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) std::fprintf(stderr, " %.9g", data[r * stride + col0 + c]);
  }
  std::fputc('\n', stderr);
}

void Tensor(std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
  Columns(name, layer, data, rows, cols, 0, cols);
}

}  // namespace latent::dump
