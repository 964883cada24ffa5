#include "engine/debug_replay.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/input_file.h"
#include "engine/logprobs.h"

namespace latent::engine {

std::vector<int32_t> LoadDebugReplay(const std::string& path, int64_t vocab) {
  std::ifstream in = OpenInputFile("--debug-replay", path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    Fail("--debug-replay ", path, ": not valid JSON (", e.what(), ")");
  }
  if (json.is_object()) {
    if (!json.contains("ids")) Fail("--debug-replay ", path, ": the object has no \"ids\" list");
    json = json["ids"];
  }
  if (!json.is_array()) {
    Fail("--debug-replay ", path, ": expected a list of token ids or {\"ids\": [...]}");
  }
  if (json.empty()) Fail("--debug-replay ", path, ": the list of token ids is empty");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& id = json[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab) {
      Fail("--debug-replay ", path, ": entry ", i, " (", id.dump(),
           ") is not a token id in [0, ", vocab, ")");
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

SampledToken ReplayNext(const std::vector<int32_t>& ids, const float* logits, int64_t vocab,
                        const Sequence& seq, const SamplingParams& params) {
  SampledToken out;
  out.token = ids[static_cast<size_t>(seq.num_generated())];
  if (params.top_logprobs >= 0) {
    const float log_z = LogPartition(logits, vocab);
    out.logprob = logits[out.token] - log_z;
    TopLogprobs(logits, vocab, params.top_logprobs, log_z, out.top_logprobs);
  }
  return out;
}

}  // namespace latent::engine
