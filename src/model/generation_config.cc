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

std::vector<int32_t> GenerationConfig::EndIds(int64_t vocab_size) const {
  std::vector<int32_t> ids;
  auto add = [&](int64_t id) {
    if (id < 0 || id >= vocab_size) return;
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(static_cast<int32_t>(id));
  };
  for (int64_t id : eos_token_ids) add(id);
  if (primary_eos_id) add(*primary_eos_id);
  return ids;
}

GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config) {
  GenerationConfig gen;
  const auto path = std::filesystem::path(dir) / "generation_config.json";
  std::ifstream in(path);
  if (!in) {
    gen.eos_token_ids = config.eos_token_ids;
    return gen;
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    Fail(path.string(), ": invalid JSON: ", e.what());
  }
  // The file replaces config.json's ids even when it names none: vLLM reads only the file's
  // fields then, and stops on the tokenizer's EOS alone.
  if (!json.is_object() || !json.contains("eos_token_id")) return gen;
  const auto& eos = json["eos_token_id"];
  if (eos.is_null()) return gen;
  gen.eos_token_ids = ParseEosTokenIds(eos, path.string(), config.vocab_size);
  return gen;
}

void SetTokenizerEos(GenerationConfig& generation, std::optional<int32_t> tokenizer_eos) {
  generation.primary_eos_id = tokenizer_eos;
}

}  // namespace latent::model
