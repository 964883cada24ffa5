// A Hugging Face checkpoint directory: model.safetensors, or shards listed in
// model.safetensors.index.json. Looks tensors up by name across shards, without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/tensor_view.h"
#include "weights/safetensors_file.h"

namespace latent::weights {

// Whether Open scans the floating-point tensors for NaN and infinity (finite_check.h). kAuto
// scans checkpoints of up to kAutoCheckBytes of floating-point data (a fraction of a second at
// memory bandwidth) and skips larger ones, whose full read would add minutes to start-up; the
// environment variable LATENT_CHECK_WEIGHTS=1 (or 0) forces the scan on (or off) for kAuto.
enum class WeightCheck { kAuto, kAlways, kNever };
inline constexpr uint64_t kAutoCheckBytes = uint64_t{4} << 30;

class Checkpoint {
 public:
  // Opens the checkpoint in `dir`; throws latent::Error naming the file and the problem
  // (no weights, a bad index, a missing shard, a tensor the index names but its shard lacks,
  // one name in two shards, a NaN or infinite weight when `check` scans).
  static Checkpoint Open(const std::string& dir, WeightCheck check = WeightCheck::kAuto);

  // Throws latent::Error naming the file, the tensor, the first bad element and the count when a
  // floating-point tensor holds NaN or infinity.
  void CheckFinite() const;

  const std::string& dir() const { return dir_; }
  bool Has(const std::string& name) const { return where_.count(name) != 0; }
  // Throws latent::Error naming the checkpoint when `name` is absent.
  TensorView Get(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  // The element types found, in DType order.
  std::set<DType> DTypes() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const SafetensorsFile*> where_;
};

}  // namespace latent::weights
