// A Hugging Face checkpoint directory: model.safetensors, or shards listed in
// model.safetensors.index.json. Looks tensors up by name across shards, without copying.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/tensor_view.h"
#include "weights/safetensors_file.h"

namespace latent::weights {

class Checkpoint {
 public:
  // Opens the checkpoint in `dir`; throws latent::Error naming the file and the problem
  // (no weights, a bad index, a missing shard, a tensor the index names but its shard lacks,
  // one name in two shards).
  static Checkpoint Open(const std::string& dir);
  // Whether `dir` holds weights at all: model.safetensors, the index or any *.safetensors file
  // (Open then reads them, or names what is wrong). False: config.json alone (`latent info`
  // then describes the model from its config).
  static bool Present(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool Has(const std::string& name) const { return where_.count(name) != 0; }
  // Throws latent::Error naming the checkpoint when `name` is absent.
  TensorView Get(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  // The element types found, in DType order.
  std::set<DType> DTypes() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Keeps only the tensors `rename` gives a (non-empty) name, under that name: the text model of a
  // vision-language checkpoint (language_model.model.* as model.*), without its vision tower.
  void Rename(const std::function<std::string(const std::string&)>& rename);
  // Makes `alias` a second name of the held tensor `name` (`alias` must not be held): a tied
  // checkpoint's embedding when only its LM head is stored (OpenCheckpoint).
  void Alias(const std::string& alias, const std::string& name);
  // The held name `name` stands for: the tensor an alias was made of, else `name` itself. Errors
  // about a tensor's values name what the checkpoint stores (lm_head.weight, not the embedding).
  const std::string& Origin(const std::string& name) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const SafetensorsFile*> where_;
  std::unordered_map<std::string, std::string> stored_name_;  // After Rename: name -> name in file
  std::unordered_map<std::string, std::string> origin_;  // Alias: alias -> the name it stands for
};

}  // namespace latent::weights
