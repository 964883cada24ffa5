#include "model/generation_config.h"

#include <algorithm>
#include <cmath>
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

namespace {

// The number `key` of generation_config.json, when set (not absent or null).
std::optional<double> Number(const nlohmann::json& json, const char* key, const std::string& path) {
  if (!json.contains(key) || json[key].is_null()) return std::nullopt;
  const nlohmann::json& v = json[key];
  if (!v.is_number()) Fail(path, ": ", key, " must be a number, got ", v.dump());
  return v.get<double>();
}

// The integer `key` (16.0 counts, as Python writes some), when set.
std::optional<int64_t> Integer(const nlohmann::json& json, const char* key,
                               const std::string& path) {
  const std::optional<double> v = Number(json, key, path);
  if (!v) return std::nullopt;
  if (json[key].is_number_integer() && !json[key].is_number_unsigned()) {
    return json[key].get<int64_t>();
  }
  if (*v != std::floor(*v)) Fail(path, ": ", key, " must be an integer, got ", json[key].dump());
  if (!(std::abs(*v) < 9.0e18)) Fail(path, ": ", key, " is out of range: ", json[key].dump());
  return static_cast<int64_t>(*v);
}

SamplingDefaults ReadSamplingDefaults(const nlohmann::json& json, const std::string& path) {
  SamplingDefaults s;
  s.temperature = Number(json, "temperature", path);
  s.top_p = Number(json, "top_p", path);
  s.top_k = Integer(json, "top_k", path);
  s.min_p = Number(json, "min_p", path);
  s.repetition_penalty = Number(json, "repetition_penalty", path);
  s.max_new_tokens = Integer(json, "max_new_tokens", path);
  return s;
}

// The file at `path` parsed; nullopt when there is none to read.
std::optional<nlohmann::json> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    Fail(path.string(), ": invalid JSON: ", e.what());
  }
}

}  // namespace

nlohmann::json SamplingDefaults::AsFields() const {
  nlohmann::json fields = nlohmann::json::object();
  if (temperature) fields["temperature"] = *temperature;
  if (top_p) fields["top_p"] = *top_p;
  if (top_k) fields["top_k"] = *top_k;
  if (min_p) fields["min_p"] = *min_p;
  if (repetition_penalty) fields["repetition_penalty"] = *repetition_penalty;
  if (max_new_tokens) fields["max_tokens"] = *max_new_tokens;
  return fields;
}

SamplingDefaults LoadSamplingDefaults(const std::string& dir) {
  const auto path = std::filesystem::path(dir) / "generation_config.json";
  const std::optional<nlohmann::json> json = ReadFile(path);
  return json && json->is_object() ? ReadSamplingDefaults(*json, path.string())
                                   : SamplingDefaults{};
}

GenerationConfig LoadGenerationConfig(const std::string& dir, const ModelConfig& config) {
  GenerationConfig gen;
  const auto path = std::filesystem::path(dir) / "generation_config.json";
  const std::optional<nlohmann::json> file = ReadFile(path);
  if (!file) {
    gen.eos_token_ids = config.eos_token_ids;
    return gen;
  }
  const nlohmann::json& json = *file;
  // The file replaces config.json's ids even when it names none: vLLM reads only the file's
  // fields then, and stops on the tokenizer's EOS alone.
  if (!json.is_object()) return gen;
  gen.sampling = ReadSamplingDefaults(json, path.string());
  if (!json.contains("eos_token_id")) return gen;
  const auto& eos = json["eos_token_id"];
  if (eos.is_null()) return gen;
  gen.eos_token_ids = ParseEosTokenIds(eos, path.string(), config.vocab_size);
  return gen;
}

void SetTokenizerEos(GenerationConfig& generation, std::optional<int32_t> tokenizer_eos) {
  generation.primary_eos_id = tokenizer_eos;
}

}  // namespace latent::model
