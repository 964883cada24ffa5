#include "weights/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/error.h"
#include "base/input_file.h"
#include "weights/finite_check.h"

namespace latent::weights {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool Exists(const fs::path& path) { return PathExists("model", path.string()); }

Json ReadJsonFile(const fs::path& path) {
  const std::optional<std::string> text = ReadModelFile("model", path.string(), kMaxModelJsonBytes);
  if (!text) Fail(path.string(), ": cannot open: no such file");  // removed since it was found
  try {
    return Json::parse(*text);
  } catch (const Json::exception& e) {
    Fail(path.string(), ": invalid JSON: ", e.what());
  }
}

// Reads the index's weight_map: tensor name -> shard file name.
std::map<std::string, std::string> ReadWeightMap(const fs::path& index_path) {
  Json index = ReadJsonFile(index_path);
  const std::string where = index_path.string();
  if (!index.is_object()) Fail(where, ": not a JSON object, but ", index.type_name());
  if (!index.contains("weight_map")) Fail(where, ": missing object 'weight_map'");
  if (!index["weight_map"].is_object()) {
    Fail(where, ": 'weight_map' must be an object (tensor name -> shard file), got ",
         index["weight_map"].type_name());
  }
  std::map<std::string, std::string> weight_map;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    if (!it->is_string()) Fail(where, ": weight_map entry '", it.key(), "' is not a file name");
    std::string shard = it->get<std::string>();
    // A shard is a file beside the index; never follow a path out of the directory.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      Fail(where, ": weight_map entry '", it.key(), "' names an invalid shard file '", shard, "'");
    }
    weight_map.emplace(it.key(), std::move(shard));
  }
  if (weight_map.empty()) Fail(where, ": weight_map is empty");
  return weight_map;
}

}  // namespace

bool Checkpoint::Present(const std::string& dir) {
  const fs::path root(dir);
  if (Exists(root / kIndexFile) || Exists(root / kSingleFile)) return true;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(root, error)) {
    if (entry.path().extension() == ".safetensors") return true;
  }
  return false;
}

Checkpoint Checkpoint::Open(const std::string& dir) {
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  const fs::path root(dir);
  if (!IsDirectory("model", dir)) Fail(dir, ": not a directory");

  auto add_file = [&](const std::string& name) -> SafetensorsFile* {
    ckpt.files_.push_back(std::make_unique<SafetensorsFile>((root / name).string()));
    return ckpt.files_.back().get();
  };
  auto claim = [&](const std::string& name, const SafetensorsFile* file) {
    auto [it, inserted] = ckpt.where_.emplace(name, file);
    if (!inserted) {
      Fail(dir, ": duplicate tensor name '", name, "' in ", it->second->path(), " and ",
           file->path());
    }
  };

  if (Exists(root / kIndexFile)) {
    const auto weight_map = ReadWeightMap(root / kIndexFile);
    std::map<std::string, SafetensorsFile*> shards;
    for (const auto& [name, shard] : weight_map) {
      if (!shards.count(shard)) {
        if (!Exists(root / shard)) {
          Fail((root / kIndexFile).string(), ": shard '", shard, "' (holding '", name,
               "') does not exist");
        }
        shards[shard] = add_file(shard);
      }
    }
    for (const auto& [name, shard] : weight_map) {
      if (!shards[shard]->Has(name)) {
        Fail((root / kIndexFile).string(), ": tensor '", name, "' is named in the index but missing from shard ",
             shards[shard]->path());
      }
    }
    for (const auto& [shard, file] : shards)
      for (const auto& e : file->entries()) claim(e.name, file);
  } else if (Exists(root / kSingleFile)) {
    SafetensorsFile* file = add_file(kSingleFile);
    for (const auto& e : file->entries()) claim(e.name, file);
  } else {
    Fail(dir, ": no ", kSingleFile, " or ", kIndexFile, " found");
  }
  if (ShouldCheckWeights(ckpt)) CheckFinite(ckpt);
  return ckpt;
}

TensorView Checkpoint::Get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) Fail(dir_, ": checkpoint has no tensor '", name, "'");
  auto stored = stored_name_.find(name);
  return it->second->View(stored != stored_name_.end() ? stored->second : name);
}

void Checkpoint::Rename(const std::function<std::string(const std::string&)>& rename) {
  std::unordered_map<std::string, const SafetensorsFile*> where;
  std::unordered_map<std::string, std::string> stored_name;
  for (const auto& [name, file] : where_) {
    const std::string renamed = rename(name);
    if (renamed.empty()) continue;
    if (!where.emplace(renamed, file).second) {
      Fail(dir_, ": two tensors are both named '", renamed, "'");
    }
    auto stored = stored_name_.find(name);
    stored_name.emplace(renamed, stored != stored_name_.end() ? stored->second : name);
  }
  where_ = std::move(where);
  stored_name_ = std::move(stored_name);
  // An alias stands for its tensor under that tensor's new name (both kept, or the alias dropped).
  std::unordered_map<std::string, std::string> origin;
  for (const auto& [alias, name] : origin_) {
    const std::string renamed_alias = rename(alias), renamed = rename(name);
    if (!renamed_alias.empty() && !renamed.empty()) origin.emplace(renamed_alias, renamed);
  }
  origin_ = std::move(origin);
}

void Checkpoint::Alias(const std::string& alias, const std::string& name) {
  auto it = where_.find(name);
  LATENT_CHECK(it != where_.end() && where_.count(alias) == 0);
  const SafetensorsFile* file = it->second;
  auto stored = stored_name_.find(name);
  stored_name_.emplace(alias, stored != stored_name_.end() ? stored->second : name);
  where_.emplace(alias, file);
  origin_.emplace(alias, Origin(name));
}

const std::string& Checkpoint::Origin(const std::string& name) const {
  auto it = origin_.find(name);
  return it != origin_.end() ? it->second : name;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, file] : where_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::set<DType> Checkpoint::DTypes() const {
  std::set<DType> dtypes;
  for (const auto& file : files_)
    for (const auto& e : file->entries()) dtypes.insert(e.dtype);
  return dtypes;
}

}  // namespace latent::weights
