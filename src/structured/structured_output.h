// Structured output for one model: grammars (JSON schemas, regular expressions, EBNF) compiled by
// XGrammar against the model's vocabulary (GrammarVocabulary), each compiled once and cached by its
// text, and turned into
// the engine's per-request TokenConstraintFactory (a grammar matcher per sample, whose token
// bitmask the sampler applies before each draw).
//
// The JSON produced is compact (no whitespace between tokens: a weak model cannot loop on
// whitespace) and strict (no properties or items beyond the schema's).
//
// Thread-safe: requests compile from any worker thread. Each compile runs on a thread of its own
// while the caller waits for it: XGrammar cannot be interrupted, and Abandon() lets the callers
// stop waiting (a server shutting down).
//
// What XGrammar is given is bounded first (json_schema_size.h, output_spec.h's kMaxGrammarBytes
// and the structural tag's limits): its compile time grows faster than its input (25,000
// properties took minutes).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/token_constraint.h"
#include <nlohmann/json.hpp>

#include "structured/grammar_vocabulary.h"
#include "structured/output_spec.h"

namespace latent::structured {

// Thrown to a caller waiting for a compile when StructuredOutput::Abandon is called; what() is
// Abandon's reason.
class CompileAbandoned : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StructuredOutput {
 public:
  // Builds XGrammar's view of the vocabulary (the expensive part is per model, not per request).
  explicit StructuredOutput(const GrammarVocabulary& vocabulary, size_t max_cached_grammars = 256);
  ~StructuredOutput();
  StructuredOutput(const StructuredOutput&) = delete;
  StructuredOutput& operator=(const StructuredOutput&) = delete;

  // response_format {"type": "json_object"}: any JSON object.
  std::shared_ptr<const engine::TokenConstraintFactory> JsonObject();
  // response_format {"type": "json_schema"}: text fitting `schema`. Throws latent::Error naming
  // the problem for an invalid schema, one past the limits of json_schema_size.h or one using a
  // feature the grammar cannot enforce (json_schema_check.h).
  std::shared_ptr<const engine::TokenConstraintFactory> JsonSchema(const nlohmann::ordered_json& schema);

  // An XGrammar structural tag (its JSON format: e.g. {"type": "structural_tag", "format":
  // {"type": "triggered_tags", ...}}: structural_tag.h). Throws latent::Error naming the problem
  // for an invalid tag ("the structural tag cannot be compiled: ...").
  std::shared_ptr<const engine::TokenConstraintFactory> StructuralTag(const std::string& structural_tag_json);
  // Output matching the regular expression `pattern` (XGrammar's regex: the whole output), of at
  // most kMaxGrammarBytes.
  std::shared_ptr<const engine::TokenConstraintFactory> Regex(const std::string& pattern);
  // Output in the language of an EBNF grammar (XGrammar's EBNF, from rule `root`), of at most
  // kMaxGrammarBytes.
  std::shared_ptr<const engine::TokenConstraintFactory> Grammar(const std::string& ebnf);
  // Whichever of the above `spec` asks for (choice: Grammar(ChoiceGrammar)); null when it asks for
  // nothing. A structural tag's JSON schemas are checked as JsonSchema's are, and bounded in all
  // (structural_tag.h). Throws latent::Error as they do.
  std::shared_ptr<const engine::TokenConstraintFactory> Constraint(const OutputSpec& spec);

  // From now on every call that would compile throws CompileAbandoned(reason) instead, and so do
  // those waiting for a compile now: their compiles run on to their end, unwaited for (the process
  // may exit under them: base/detached_threads.h). Grammars already compiled are still given.
  void Abandon(const std::string& reason);

  int64_t vocab_size() const;
  // Compiled grammars held in the cache (for tests).
  size_t cached_grammars() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// XGrammar's error message `what` as a caller can use it: without the "[hh:mm:ss] file:line: " its
// errors start with (the time and the build's source paths mean nothing to a client) and without
// trailing whitespace.
std::string XGrammarErrorText(std::string_view what);

// The model's StructuredOutput, built on first use: a server that never sees response_format does
// not pay for the vocabulary (about a second for 129k tokens).
class LazyStructuredOutput {
 public:
  // `tokenizer` (may be null: Get() then throws) must outlive this object.
  LazyStructuredOutput(const tokenizer::Tokenizer* tokenizer, int64_t vocab_size,
                       std::vector<int32_t> stop_token_ids)
      : tokenizer_(tokenizer), vocab_size_(vocab_size), stop_token_ids_(std::move(stop_token_ids)) {}
  // Throws latent::Error when the model has no tokenizer or no EOS id (and again on the next call).
  StructuredOutput& Get();
  // StructuredOutput::Abandon, now or once it is built (it waits while Get builds it: about a
  // second).
  void Abandon(const std::string& reason);

 private:
  const tokenizer::Tokenizer* tokenizer_;
  int64_t vocab_size_;
  std::vector<int32_t> stop_token_ids_;
  std::mutex mutex_;
  std::unique_ptr<StructuredOutput> output_;
  std::optional<std::string> abandoned_;
};

}  // namespace latent::structured
