#include "model/generation_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "model/config_reader.h"

namespace latent::model {

bool GenerationConfig::IsExtraEos(int64_t token) const {
  return token != primary_eos_id &&
         std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config) {
  GenerationConfig gen;
  gen.eos_token_ids = config.eos_token_ids;
  if (!config.eos_token_ids.empty()) gen.primary_eos_id = config.eos_token_ids.front();
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
  gen.eos_token_ids = ParseEosTokenIds(eos, path.string(), config.vocab_size);
  return gen;
}

void SetTokenizerEos(GenerationConfig& generation, std::optional<int32_t> tokenizer_eos) {
  if (tokenizer_eos) generation.primary_eos_id = *tokenizer_eos;
}

}  // namespace latent::model
