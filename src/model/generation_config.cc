#include "model/generation_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/error.h"
#include "base/input_file.h"
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
  s.Check(path);
  return s;
}

// `value` of field `key` as a 32-bit float, as the fronts keep it: refused where that makes it
// infinite or flushes a non-zero value to 0.
void CheckFloat(const std::string& path, const char* key, double value) {
  const float f = static_cast<float>(value);
  if (std::isinf(f) || (value != 0 && f == 0)) {
    Fail(path, ": ", key, " is ", value, ", outside the range of a 32-bit float");
  }
}

// The file at `path` parsed; nullopt when there is none to read.
std::optional<nlohmann::json> ReadFile(const std::filesystem::path& path) {
  const std::optional<std::string> text = ReadModelFile("model", path.string(), kMaxModelJsonBytes);
  if (!text) return std::nullopt;
  try {
    return nlohmann::json::parse(*text);
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

void SamplingDefaults::Check(const std::string& path) {
  if (temperature && !(*temperature >= 0)) {
    Fail(path, ": temperature must be >= 0, got ", *temperature);
  }
  if (top_p && !(*top_p > 0 && *top_p <= 1)) Fail(path, ": top_p must be in (0, 1], got ", *top_p);
  if (min_p && !(*min_p >= 0 && *min_p <= 1)) Fail(path, ": min_p must be in [0, 1], got ", *min_p);
  if (repetition_penalty && !(*repetition_penalty >= 0.01 && *repetition_penalty <= 100)) {
    Fail(path, ": repetition_penalty must be in [0.01, 100], got ", *repetition_penalty);
  }
  const std::pair<const char*, const std::optional<double>&> floats[] = {
      {"temperature", temperature},
      {"top_p", top_p},
      {"min_p", min_p},
      {"repetition_penalty", repetition_penalty}};
  for (const auto& [key, value] : floats) {
    if (value) CheckFloat(path, key, *value);
  }
  if (top_k) {
    if (*top_k < -1) Fail(path, ": top_k must be -1 (off), 0 (off) or positive, got ", *top_k);
    // -1 is vLLM's spelling of off. The rule of engine::TopKFromRequest, which the server and
    // request lines share (this layer is below the engine's headers).
    top_k = std::clamp<int64_t>(*top_k, 0, std::numeric_limits<int32_t>::max());
  }
  if (max_new_tokens && *max_new_tokens < 1) {
    Fail(path, ": max_new_tokens must be at least 1, got ", *max_new_tokens);
  }
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
