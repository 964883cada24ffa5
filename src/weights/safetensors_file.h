// One safetensors file, memory-mapped and validated; tensors are zero-copy views into the map.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "tensor/tensor_view.h"
#include "weights/safetensors_header.h"

namespace latent::weights {

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws latent::Error naming the file and the problem.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool Has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws latent::Error when `name` is not in this file.
  TensorView View(const std::string& name) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in header_.entries
};

}  // namespace latent::weights
