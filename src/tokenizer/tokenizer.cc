#include "tokenizer/tokenizer.h"

#include <cstddef>
#include <filesystem>
#include <optional>

#include "base/error.h"
#include "base/error_context.h"
#include "base/input_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tiktoken_tokenizer.h"
#include "tokenizer/transformers_class.h"
#include "tokenizer/unicode.h"

namespace latent::tokenizer {

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::optional<int32_t> bos, eos;

  // The string an id decodes from: an added token first, then the model's vocabulary.
  const std::string* TokenString(int32_t id) const {
    const std::string* s = added.IdToToken(id);
    return s != nullptr ? s : model->IdToToken(id);
  }

  // Encodes one stretch of raw text that contains no raw-matched added token.
  void EncodeText(std::string_view raw, bool at_origin, std::vector<int32_t>& ids) const;
};

namespace {

// tokenizer.json and tiktoken.model hold the vocabulary and merges: tens of MiB for the largest
// vocabularies, so their bound is above the one on the small JSON files.
constexpr size_t kMaxVocabBytes = size_t{1} << 30;

// The file at `path`, or nullopt when there is none; an error when it is not a regular file.
std::optional<std::string> ReadIfPresent(const std::filesystem::path& path, size_t max_bytes) {
  return ReadModelFile("tokenizer", path.string(), max_bytes);
}

Json ParseJson(std::string_view text, std::string_view name) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    Fail("tokenizer: ", name, " is not valid JSON: ", e.what());
  }
}

// bos_token/eos_token in tokenizer_config.json: a string or an AddedToken object.
std::optional<std::string> ConfigToken(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

bool ConfigFlag(const Json& config, const char* key) {
  auto it = config.find(key);
  return it != config.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

bool Tokenizer::DirHasTokenizer(const std::string& dir) {
  const std::filesystem::path root(dir);
  return PathExists("tokenizer", (root / "tokenizer.json").string()) ||
         PathExists("tokenizer", (root / "tiktoken.model").string());
}

void Tokenizer::CheckNamedDir(const std::string& dir) {
  if (!IsDirectory("tokenizer directory", dir)) {
    Fail("tokenizer directory ", dir, ": not a directory");
  }
  if (!DirHasTokenizer(dir)) {
    Fail("tokenizer directory ", dir, ": no tokenizer.json or tiktoken.model in it");
  }
}

Tokenizer Tokenizer::FromDir(const std::string& dir) {
  const std::filesystem::path root(dir);
  const auto tokenizer_path = root / "tokenizer.json";
  const auto config_path = root / "tokenizer_config.json";
  const std::optional<std::string> tokenizer = ReadIfPresent(tokenizer_path, kMaxVocabBytes);
  const std::optional<std::string> config = ReadIfPresent(config_path, kMaxModelJsonBytes);
  if (!tokenizer) {
    const auto tiktoken_path = root / "tiktoken.model";
    const std::optional<std::string> tiktoken = ReadIfPresent(tiktoken_path, kMaxVocabBytes);
    if (!tiktoken) {
      Fail("tokenizer: ", tokenizer_path.string(),
           " not found, nor tiktoken.model (latent reads Hugging Face tokenizer.json tokenizers "
           "and Kimi's tiktoken.model with tokenizer_config.json)");
    }
    if (!config) {
      Fail("tokenizer: ", config_path.string(),
           " not found (tiktoken.model needs it: its added_tokens_decoder names the special "
           "tokens)");
    }
    try {
      return FromTiktoken(*tiktoken, *config, tiktoken_path.string());
    } catch (const Error& e) {
      FailLike(e, e.what(), " (in ", dir, ")");
    }
  }
  try {
    return FromJson(*tokenizer, config.value_or(std::string()));
  } catch (const Error& e) {
    FailLike(e, e.what(), " (in ", dir, ")");
  }
}

Tokenizer Tokenizer::FromJson(std::string_view tokenizer_json, std::string_view config_json) {
  Json j = ParseJson(tokenizer_json, "tokenizer.json");
  if (!j.is_object()) Fail("tokenizer: tokenizer.json must hold an object");
  Json config = Json::object();
  if (!config_json.empty()) {
    config = ParseJson(config_json, "tokenizer_config.json");
    if (!config.is_object()) Fail("tokenizer: tokenizer_config.json must hold an object");
  }
  ApplyTransformersClass(j, config, tokenizer_json);
  auto impl = std::make_unique<Impl>();
  try {
    if (!j.contains("model")) Fail("tokenizer.json: no \"model\"");
    impl->model = BpeModel::FromJson(j["model"]);
    impl->normalizer = MakeNormalizer(j.value("normalizer", Json()));
    impl->pre_tokenizer = MakePreTokenizer(j.value("pre_tokenizer", Json()));
    impl->post_processor = MakePostProcessor(j.value("post_processor", Json()));
    impl->decoder = MakeDecoder(j.value("decoder", Json()));
    impl->added.Build(j.value("added_tokens", Json()), *impl->model, impl->normalizer.get());
  } catch (const Json::exception& e) {
    Fail("tokenizer.json: malformed: ", e.what());
  }

  Tokenizer tok(std::move(impl));
  if (auto bos = ConfigToken(config, "bos_token")) tok.impl_->bos = tok.TokenToId(*bos);
  if (auto eos = ConfigToken(config, "eos_token")) tok.impl_->eos = tok.TokenToId(*eos);
  if (tok.impl_->post_processor == nullptr) {
    std::vector<int32_t> prefix, suffix;
    if (ConfigFlag(config, "add_bos_token") && tok.impl_->bos) prefix.push_back(*tok.impl_->bos);
    if (ConfigFlag(config, "add_eos_token") && tok.impl_->eos) suffix.push_back(*tok.impl_->eos);
    if (!prefix.empty() || !suffix.empty()) {
      tok.impl_->post_processor = MakeAffixProcessor(std::move(prefix), std::move(suffix));
    }
  }
  return tok;
}

Tokenizer Tokenizer::FromTiktoken(std::string_view tiktoken_model, std::string_view config_json,
                                  std::string_view model_name) {
  TiktokenParts parts = LoadTiktokenParts(tiktoken_model, config_json, model_name);
  auto impl = std::make_unique<Impl>();
  impl->model = std::move(parts.model);
  impl->pre_tokenizer = std::move(parts.pre_tokenizer);
  impl->decoder = std::move(parts.decoder);
  impl->added.BuildWithIds(std::move(parts.special_tokens));
  Tokenizer tok(std::move(impl));
  tok.impl_->bos = tok.TokenToId(parts.bos_token);
  tok.impl_->eos = tok.TokenToId(parts.eos_token);
  return tok;
}

void Tokenizer::Impl::EncodeText(std::string_view raw, bool at_origin,
                                 std::vector<int32_t>& ids) const {
  std::string normalized(raw);
  if (normalizer) normalizer->Normalize(normalized);
  if (normalized.empty()) return;
  std::vector<TextSegment> segments;
  added.Split(normalized, true, segments);
  std::vector<PreToken> pieces;
  for (const TextSegment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    if (seg.begin >= seg.end) continue;
    pieces.clear();
    pieces.push_back(
        {normalized.substr(seg.begin, seg.end - seg.begin), at_origin && seg.begin == 0});
    if (pre_tokenizer) pre_tokenizer->PreTokenize(pieces);
    for (const PreToken& piece : pieces) model->Tokenize(piece.text, ids);
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string sanitized;
  if (!SanitizeUtf8(text, sanitized)) text = sanitized;
  std::vector<int32_t> ids;
  std::vector<TextSegment> segments;
  impl_->added.Split(text, false, segments);
  for (const TextSegment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else if (seg.begin < seg.end) {
      impl_->EncodeText(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, ids);
    }
  }
  if (impl_->post_processor) {
    ids = impl_->post_processor->Process(std::move(ids), add_special_tokens);
  }
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = impl_->TokenString(id);
    if (token == nullptr) continue;
    if (skip_special_tokens && impl_->added.IsSpecialContent(*token)) continue;
    tokens.push_back(*token);
  }
  std::string text;
  if (impl_->decoder) {
    impl_->decoder->DecodeChain(tokens);
    for (const std::string& t : tokens) text += t;
  } else {
    // HF joins the raw token strings with spaces when there is no decoder.
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto id = impl_->added.TokenToId(token)) return id;
  return impl_->model->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  const std::string* token = impl_->TokenString(id);
  if (token == nullptr) return std::nullopt;
  return *token;
}

std::optional<std::string> Tokenizer::TokenBytes(int32_t id) const {
  const std::string* token = impl_->TokenString(id);
  if (token == nullptr || impl_->added.IsSpecialContent(*token)) return std::nullopt;
  if (!impl_->decoder) return *token;
  // A decoder may treat the first token of a text apart (Metaspace drops its leading space,
  // Strip trims the start), so the token's bytes are what it adds after itself: the decoding of
  // [id, id] less that of [id].
  const auto decode = [&](size_t count) {
    std::vector<std::string> tokens(count, *token);
    impl_->decoder->DecodeChainBytes(tokens);
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
  };
  const std::string once = decode(1);
  const std::string twice = decode(2);
  if (twice.size() >= once.size() && twice.compare(0, once.size(), once) == 0) {
    return twice.substr(once.size());
  }
  return once;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const std::string* token = impl_->TokenString(id);
  return token != nullptr && impl_->added.IsSpecialContent(*token);
}

size_t Tokenizer::VocabSize() const {
  size_t size = impl_->model->vocab_size();
  for (const auto& [id, token] : impl_->added.by_id()) {
    if (!impl_->model->TokenToId(token.content)) ++size;
  }
  return size;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }

bool Tokenizer::IsByteFallbackToken(int32_t id) const {
  if (!impl_->decoder || !impl_->decoder->HasByteFallback()) return false;
  const std::string* token = impl_->TokenString(id);
  return token != nullptr && ParseByteFallbackToken(*token).has_value();
}

}  // namespace latent::tokenizer
