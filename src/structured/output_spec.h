// What a request constrains its output to, in one form for every front end: vLLM's
// `structured_outputs` object (json, regex, choice, grammar, json_object, structural_tag), given to
// the server and in request lines (`latent generate`, the Python module), and OpenAI's
// `response_format` (json_object, json_schema, and vLLM's structural_tag), given to the server.
// StructuredOutput::Constraint compiles it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace latent::structured {

// The most bytes a regex or an EBNF grammar (a Lark one as converted, a choice's as
// ChoiceGrammar writes it; a structural tag's regexes and grammars in all) may have: XGrammar
// compiled an EBNF chain of 1,000 optional rules (32 KB) in 1.5 s, of 2,000 (70 KB) in 16 s.
inline constexpr size_t kMaxGrammarBytes = 32 << 10;

struct OutputSpec {
  enum class Kind : uint8_t {
    kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar, kStructuralTag
  };
  Kind kind = Kind::kNone;
  nlohmann::ordered_json schema;     // kJsonSchema: its keys in the request's order (they order
                                     // the generated object's properties). kStructuralTag:
                                     // XGrammar's structural tag (structural_tag.h).
  std::string text;                  // kRegex: the pattern; kGrammar: the EBNF grammar (a Lark
                                     // one converted: structured/lark_grammar.h).
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them.

  bool active() const { return kind != Kind::kNone; }
};

// vLLM's structured_outputs: an object with exactly one of "json" (a JSON schema, as an object or
// as its text), "regex" (a pattern the whole output matches), "choice" (a non-empty list of
// strings), "grammar" (XGrammar's EBNF from rule `root`, or Lark), "json_object": true or
// "structural_tag" (a structural tag as JSON text, as vLLM takes it, or as an object: either form
// of ParseStructuralTag); null values count as absent. The booleans "disable_any_whitespace",
// "disable_additional_properties" and "disable_fallback" are accepted and change nothing: latent's
// JSON is always compact and never has properties beyond the schema's, and there is no other
// backend to fall back to. A schema given as text (and a structural tag's) may nest kMaxJsonDepth
// levels. Throws latent::Error naming the key at fault (messages start "structured_outputs"; they
// quote at most a few hundred characters of the value).
OutputSpec ParseStructuredOutputs(const nlohmann::ordered_json& value);

// `text` as an XGrammar EBNF string literal standing for exactly itself: quotes and backslashes
// escaped, control characters as \u00XX.
std::string EbnfStringLiteral(std::string_view text);

// The EBNF grammar whose language is `choices`: root ::= "a" | "b", every literal escaped (quotes,
// backslashes and control characters) so that any string stands for itself.
std::string ChoiceGrammar(const std::vector<std::string>& choices);

}  // namespace latent::structured
