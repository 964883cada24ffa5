#include "structured/structured_output.h"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <xgrammar/xgrammar.h>

#include "base/detached_threads.h"
#include "base/error.h"
#include "base/error_context.h"
#include "structured/json_schema_check.h"
#include "structured/json_schema_size.h"
#include "structured/structural_tag.h"

namespace latent::structured {
namespace {

class GrammarConstraint final : public engine::TokenConstraint {
 public:
  GrammarConstraint(const xgrammar::CompiledGrammar& grammar, int64_t vocab_size)
      : matcher_(grammar), words_(engine::BitmaskWords(vocab_size)) {}

  void FillNextTokenBitmask(uint32_t* bitmask) override {
    // A [words] int32 CPU tensor over the caller's buffer: XGrammar writes the bits in place.
    int64_t shape[1] = {words_};
    DLTensor tensor{};
    tensor.data = bitmask;
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 1;
    tensor.dtype = DLDataType{kDLInt, 32, 1};
    tensor.shape = shape;
    tensor.strides = nullptr;
    tensor.byte_offset = 0;
    matcher_.FillNextTokenBitmask(&tensor);
  }
  bool Accept(int32_t token) override { return matcher_.AcceptToken(token); }
  bool IsTerminated() const override { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  int64_t words_;
};

class GrammarConstraintFactory final : public engine::TokenConstraintFactory {
 public:
  GrammarConstraintFactory(xgrammar::CompiledGrammar grammar, int64_t vocab_size)
      : grammar_(std::move(grammar)), vocab_size_(vocab_size) {}
  std::unique_ptr<engine::TokenConstraint> Start() const override {
    return std::make_unique<GrammarConstraint>(grammar_, vocab_size_);
  }

 private:
  xgrammar::CompiledGrammar grammar_;
  int64_t vocab_size_;
};

// What compiles a grammar, given the compiler (on the compile's own thread: it must own what it
// reads).
using CompileFn = std::function<xgrammar::CompiledGrammar(xgrammar::GrammarCompiler&)>;

// The state the callers waiting for compiles share with the compiles' threads, which may outlive
// the StructuredOutput (Abandon).
struct CompileWaits {
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<std::string> abandoned;  // Abandon's reason.
};

// One compile's outcome, written by its thread under CompileWaits::mutex.
struct CompileJob {
  bool done = false;
  std::optional<xgrammar::CompiledGrammar> grammar;
  std::exception_ptr error;
};

// Refuses `text` (of `what`) past kMaxGrammarBytes.
void CheckGrammarBytes(const std::string& text, const char* what) {
  if (text.size() > kMaxGrammarBytes) {
    Fail(what, " is too long: ", text.size(), " bytes, more than the ", kMaxGrammarBytes,
         " allowed");
  }
}

xgrammar::TokenizerInfo MakeTokenizerInfo(const GrammarVocabulary& v) {
  std::vector<std::string> encoded(v.token_bytes.size());
  // RAW: the strings are the tokens' bytes already; "" marks a token no grammar produces.
  for (size_t i = 0; i < encoded.size(); ++i) encoded[i] = v.token_bytes[i].value_or("");
  return xgrammar::TokenizerInfo(encoded, xgrammar::VocabType::RAW, static_cast<int>(encoded.size()),
                                 v.stop_token_ids, /*add_prefix_space=*/false);
}

}  // namespace

std::string XGrammarErrorText(std::string_view what) {
  // XGrammar's errors read "[hh:mm:ss] /path/to/file.cc:94: message\n".
  const auto digit = [&](size_t i) { return i < what.size() && what[i] >= '0' && what[i] <= '9'; };
  if (what.size() > 11 && what[0] == '[' && digit(1) && digit(2) && what[3] == ':' && digit(4) &&
      digit(5) && what[6] == ':' && digit(7) && digit(8) && what.substr(9, 2) == "] ") {
    // The path ends at the first ":<line>: " (a path may hold colons, a line number not).
    for (size_t colon = what.find(':', 11); colon != std::string_view::npos;
         colon = what.find(':', colon + 1)) {
      size_t end = colon + 1;
      while (digit(end)) ++end;
      if (end > colon + 1 && what.substr(end, 2) == ": ") {
        what.remove_prefix(end + 2);
        break;
      }
    }
  }
  // Its checks read "Check failed: (<the C++ condition>) is false: message": the condition is
  // XGrammar's code, not the caller's input, so only the message is kept.
  for (const std::string_view check : {"Check failed: (", "Internal check failed: ("}) {
    if (what.substr(0, check.size()) != check) continue;
    const size_t is_false = what.find(") is false:");
    if (is_false == std::string_view::npos) break;
    what.remove_prefix(is_false + std::string_view(") is false:").size());
    while (!what.empty() && what.front() == ' ') what.remove_prefix(1);
    break;
  }
  while (!what.empty() && std::string_view(" \t\r\n").find(what.back()) != std::string_view::npos) {
    what.remove_suffix(1);
  }
  if (what.empty()) return "XGrammar refused it without saying why";
  return std::string(what);
}

struct StructuredOutput::Impl {
  Impl(const GrammarVocabulary& v, size_t max_cached)
      : vocab_size(static_cast<int64_t>(v.token_bytes.size())),
        tokenizer_info(MakeTokenizerInfo(v)),
        // One compile thread per grammar (requests compile side by side); XGrammar's own cache
        // off: ours below holds the constraint factories by schema text.
        compiler(std::make_shared<xgrammar::GrammarCompiler>(tokenizer_info, /*max_threads=*/1,
                                                             /*cache_enabled=*/false)),
        waits(std::make_shared<CompileWaits>()),
        max_cached(max_cached) {}

  // Compiles (or finds) the grammar for `key` with `compile`, keeping at most max_cached.
  // `what` names the grammar in the error when it does not compile ("the regex") or admits no
  // output.
  std::shared_ptr<const engine::TokenConstraintFactory> Cached(const std::string& key,
                                                               CompileFn compile,
                                                               const char* what = "the grammar") {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = cache.find(key);
      if (it != cache.end()) return Checked(it->second);
    }
    Entry entry;
    try {
      entry.factory =
          std::make_shared<GrammarConstraintFactory>(CompileOffThread(std::move(compile)),
                                                     vocab_size);
    } catch (const Error&) {
      throw;
    } catch (const CompileAbandoned&) {
      throw;
    } catch (const std::exception& e) {
      Fail(what, " cannot be compiled: ", XGrammarErrorText(e.what()));
    }
    // A grammar whose language is empty (root ::= root), or whose every string starts with bytes
    // no token has, compiles; refused now, the request gets the error instead of a failure at its
    // first draw. Cached as such: the verdict is the grammar's, and compiling again costs as much.
    if (!AdmitsOutput(*entry.factory)) entry.error = StrCat(what, " admits no output");
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.emplace(key, entry).second) {
      order.push_back(key);
      while (order.size() > max_cached) {
        cache.erase(order.front());
        order.pop_front();
      }
    }
    return Checked(entry);
  }

  // Runs `compile` on a thread of its own and waits for it, or for Abandon(): XGrammar cannot be
  // interrupted. Rethrows what the compile threw.
  xgrammar::CompiledGrammar CompileOffThread(CompileFn compile) {
    auto job = std::make_shared<CompileJob>();
    {
      std::lock_guard<std::mutex> lock(waits->mutex);
      if (waits->abandoned) throw CompileAbandoned(*waits->abandoned);
    }
    RunDetached([job, waits = waits, compiler = compiler, compile = std::move(compile)] {
      std::optional<xgrammar::CompiledGrammar> grammar;
      std::exception_ptr error;
      try {
        grammar = compile(*compiler);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(waits->mutex);
      job->grammar = std::move(grammar);
      job->error = error;
      job->done = true;
      waits->changed.notify_all();
    });
    std::unique_lock<std::mutex> lock(waits->mutex);
    waits->changed.wait(lock, [&] { return job->done || waits->abandoned; });
    if (!job->done) throw CompileAbandoned(*waits->abandoned);
    if (job->error) std::rethrow_exception(job->error);
    return std::move(*job->grammar);
  }

  // Whether a sample could draw a first token: one is allowed, or the grammar is complete already.
  bool AdmitsOutput(const engine::TokenConstraintFactory& factory) const {
    const std::unique_ptr<engine::TokenConstraint> matcher = factory.Start();
    std::vector<uint32_t> mask(engine::BitmaskWords(vocab_size), 0);
    matcher->FillNextTokenBitmask(mask.data());
    return matcher->IsTerminated() ||
           std::any_of(mask.begin(), mask.end(), [](uint32_t word) { return word != 0; });
  }

  // A compiled grammar, and the error it is refused with (empty when it is not).
  struct Entry {
    std::shared_ptr<const engine::TokenConstraintFactory> factory;
    std::string error;
  };

  static std::shared_ptr<const engine::TokenConstraintFactory> Checked(const Entry& entry) {
    if (!entry.error.empty()) Fail(entry.error);
    return entry.factory;
  }

  static CompileFn CompileSchema(std::string text) {
    return [text = std::move(text)](xgrammar::GrammarCompiler& compiler) {
      return compiler.CompileJSONSchema(
          text, /*any_whitespace=*/false, /*indent=*/std::nullopt,
          /*separators=*/std::make_pair(std::string(","), std::string(":")),
          /*strict_mode=*/true);
    };
  }

  // The id of the token whose text is `text`, the first as XGrammar resolves a token's text.
  std::optional<int32_t> TokenId(const std::string& text) {
    std::call_once(token_ids_built, [&] {
      const std::vector<std::string>& vocab = tokenizer_info.GetDecodedVocab();
      for (size_t i = 0; i < vocab.size(); ++i) {
        token_ids.emplace(vocab[i], static_cast<int32_t>(i));  // Keeps the first.
      }
    });
    const auto it = token_ids.find(text);
    if (it == token_ids.end()) return std::nullopt;
    return it->second;
  }

  int64_t vocab_size;
  xgrammar::TokenizerInfo tokenizer_info;
  // Shared with the compiles' threads, which may outlive this object.
  std::shared_ptr<xgrammar::GrammarCompiler> compiler;
  std::shared_ptr<CompileWaits> waits;
  // Token texts' ids, built the first time a structural tag names a token by its text.
  std::once_flag token_ids_built;
  std::unordered_map<std::string, int32_t> token_ids;
  size_t max_cached;
  std::mutex mutex;
  std::map<std::string, Entry> cache;
  std::deque<std::string> order;  // Insertion order, oldest first.
};

StructuredOutput::StructuredOutput(const GrammarVocabulary& vocabulary, size_t max_cached_grammars)
    : impl_(std::make_unique<Impl>(vocabulary, max_cached_grammars)) {}

StructuredOutput::~StructuredOutput() = default;

std::shared_ptr<const engine::TokenConstraintFactory> StructuredOutput::JsonObject() {
  return impl_->Cached("json_object", Impl::CompileSchema(R"({"type":"object"})"));
}

std::shared_ptr<const engine::TokenConstraintFactory> StructuredOutput::JsonSchema(const nlohmann::ordered_json& schema) {
  CheckJsonSchemaSize(MeasureJsonSchema(schema), "the JSON schema", kMaxJsonSchemaValues,
                      kMaxJsonSchemaOptionalProperties);
  CheckJsonSchemaSupported(schema);
  const std::string text = schema.dump();
  return impl_->Cached("json_schema:" + text, Impl::CompileSchema(text));
}

std::shared_ptr<const engine::TokenConstraintFactory> StructuredOutput::StructuralTag(
    const std::string& structural_tag_json) {
  return impl_->Cached(
      "structural_tag:" + structural_tag_json,
      [structural_tag_json](xgrammar::GrammarCompiler& compiler) {
        return compiler.CompileStructuralTag(structural_tag_json);
      },
      "the structural tag");
}

std::shared_ptr<const engine::TokenConstraintFactory> StructuredOutput::Regex(
    const std::string& pattern) {
  CheckGrammarBytes(pattern, "the regex");
  return impl_->Cached(
      "regex:" + pattern,
      [pattern](xgrammar::GrammarCompiler& compiler) { return compiler.CompileRegex(pattern); },
      "the regex");
}

std::shared_ptr<const engine::TokenConstraintFactory> StructuredOutput::Grammar(
    const std::string& ebnf) {
  CheckGrammarBytes(ebnf, "the grammar");
  return impl_->Cached("ebnf:" + ebnf, [ebnf](xgrammar::GrammarCompiler& compiler) {
    return compiler.CompileGrammar(ebnf, /*root_rule_name=*/"root");
  });
}

void StructuredOutput::Abandon(const std::string& reason) {
  std::lock_guard<std::mutex> lock(impl_->waits->mutex);
  impl_->waits->abandoned = reason;
  impl_->waits->changed.notify_all();
}

std::shared_ptr<const engine::TokenConstraintFactory> StructuredOutput::Constraint(
    const OutputSpec& spec) {
  switch (spec.kind) {
    case OutputSpec::Kind::kNone:
      return nullptr;
    case OutputSpec::Kind::kJsonObject:
      return JsonObject();
    case OutputSpec::Kind::kJsonSchema:
      return JsonSchema(spec.schema);
    case OutputSpec::Kind::kRegex:
      return Regex(spec.text);
    case OutputSpec::Kind::kChoice: {
      const std::string grammar = ChoiceGrammar(spec.choices);
      CheckGrammarBytes(grammar, "the choice's grammar (root ::= \"a\" | \"b\" ...)");
      return Grammar(grammar);
    }
    case OutputSpec::Kind::kGrammar:
      return Grammar(spec.text);
    case OutputSpec::Kind::kStructuralTag:
      // XGrammar compiles a tag's schemas as loosely as response_format's (json_schema_check.h).
      // (ParseStructuralTag bounded their size.)
      ForEachStructuralTagSchema(spec.schema, [](const nlohmann::ordered_json& schema,
                                                 const std::string& where) {
        try {
          CheckJsonSchemaSupported(schema);
        } catch (const Error& e) {
          FailLike(e, "the structural tag's schema at ", where, ": ", e.what());
        }
      });
      CheckStructuralTagTriggerTokens(
          spec.schema, [&](const std::string& text) { return impl_->TokenId(text); });
      return StructuralTag(spec.schema.dump());
  }
  return nullptr;
}

StructuredOutput& LazyStructuredOutput::Get() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!output_) {
    if (tokenizer_ == nullptr) Fail("structured output needs the model's tokenizer, and this model has none");
    output_ = std::make_unique<StructuredOutput>(BuildGrammarVocabulary(*tokenizer_, vocab_size_, stop_token_ids_));
    if (abandoned_) output_->Abandon(*abandoned_);
  }
  return *output_;
}

void LazyStructuredOutput::Abandon(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  abandoned_ = reason;
  if (output_) output_->Abandon(reason);
}

int64_t StructuredOutput::vocab_size() const { return impl_->vocab_size; }

size_t StructuredOutput::cached_grammars() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->cache.size();
}

}  // namespace latent::structured
