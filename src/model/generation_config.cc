#include "model/generation_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace latent::model {

GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config) {
  GenerationConfig gen;
  gen.eos_token_ids = config.eos_token_ids;
  const auto path = std::filesystem::path(dir) / "generation_config.json";
  std::ifstream in(path);
  if (!in) return gen;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    Fail(path.string(), ": invalid JSON: ", e.what());
  }
  if (!json.is_object() || !json.contains("eos_token_id")) return gen;
  const auto& eos = json["eos_token_id"];
  if (eos.is_null()) return gen;
  gen.eos_token_ids.clear();
  if (eos.is_number_integer()) {
    gen.eos_token_ids.push_back(eos.get<int64_t>());
  } else if (eos.is_array()) {
    for (const auto& id : eos) {
      if (!id.is_number_integer()) Fail(path.string(), ": eos_token_id entries must be integers");
      gen.eos_token_ids.push_back(id.get<int64_t>());
    }
  } else {
    Fail(path.string(), ": eos_token_id must be an integer or a list of integers");
  }
  return gen;
}

}  // namespace latent::model
