#include "weights/safetensors_file.h"

#include "base/error.h"

namespace latent::weights {

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(path), header_(ParseSafetensorsHeader(file_.data(), file_.size(), path)) {
  for (size_t i = 0; i < header_.entries.size(); ++i) index_.emplace(header_.entries[i].name, i);
}

TensorView SafetensorsFile::View(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) Fail(path(), ": no tensor named '", name, "'");
  const SafetensorsEntry& e = header_.entries[it->second];
  return TensorView{file_.data() + e.begin, e.dtype, e.shape};
}

}  // namespace latent::weights
