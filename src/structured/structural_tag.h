// vLLM's structural tags: output constrained only between trigger strings (tool calls in a
// model's markup, `<function=f>{"a": 1}</function>`), free text elsewhere. Both forms vLLM takes
// become XGrammar's structural tag JSON here, without XGrammar: StructuredOutput compiles it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace latent::structured {

// The most structures (tags) and the most triggers one structural tag may have, in all: real tool
// lists are tens (their schemas are bounded apart: kMaxStructuralTagSchemas).
inline constexpr size_t kMaxStructuralTagItems = 1024;
// The most format objects (every object of the tag's format, nested at any depth, outside
// schemas) one structural tag may have: XGrammar compiled a "sequence" of 10k const_strings in
// 10 s and half a GiB, of 20k in 32 s and 1.4 GiB (the square of its length), an "or" of 100k in
// 29 s, each holding a server worker; 4096 took 1.5 s. About twice what kMaxStructuralTagItems
// tags with a content each need (a legacy tag at that cap has 2049).
inline constexpr size_t kMaxStructuralTagFormats = 4 * kMaxStructuralTagItems;
// The most different JSON schemas one structural tag may have (of legacy structures, json_schema
// and qwen_xml_parameter formats; the same schema twice counts once, as XGrammar compiles it
// once), the most values (json_schema_size.h) they may have in all, and the most optional
// properties one of them may have. XGrammar compiles each schema on its own, with rules of its
// own and whitespace between tokens: far slower than one plain schema of the same size. Here a
// tag of 64 different schemas of 8 string properties (7 optional) compiled in 1.6 s, of 1,024 of
// 4 in 38 s; one schema of 1,000 required string properties in 0.9 s (a plain schema: 0.1 s), of
// 250 optional ones in 0.7 s, 500 in 2.8 s, 1,000 in 18 s.
inline constexpr size_t kMaxStructuralTagSchemas = 64;
inline constexpr size_t kMaxStructuralTagSchemaValues = 2000;
inline constexpr size_t kMaxStructuralTagOptionalProperties = 250;

// `value` as XGrammar's structural tag, {"type": "structural_tag", "format": {...}}. vLLM's two
// forms (an optional "type" must be "structural_tag"):
// - legacy: {"structures": [{"begin", "schema", "end"}, ...], "triggers": [...]}, a
//   "triggered_tags" format: the text is free until a trigger, then one of the structures whose
//   begin starts with it (the rest of its begin, JSON fitting its schema, its end), then free
//   again. Every trigger must start some begin and every begin exactly one trigger (XGrammar
//   refuses a trigger no begin has only with a failed internal check); a schema is an object.
//   The JSON may have one whitespace character between tokens, no more: XGrammar's structural
//   tags cannot make it compact, and unbounded whitespace lets a weak model loop on it.
// - {"format": {...}}: XGrammar's format, as given. Only what XGrammar refuses without naming it
//   is refused here (a "triggered_tags" trigger that starts none of its tags' begins, typed so or
//   with no type where XGrammar would infer it), more than kMaxStructuralTagItems tags or
//   triggers and more than kMaxStructuralTagFormats formats; XGrammar judges the rest when it
//   compiles.
// Either form's schemas are bounded by kMaxStructuralTagSchemas and the limits beside it.
// As vLLM, the legacy form is taken whenever "structures" is there, else the format; other
// members are ignored.
// `field` names the value in errors ("response_format", "structured_outputs.structural_tag").
// Throws latent::Error naming the member at fault.
nlohmann::ordered_json ParseStructuralTag(const nlohmann::ordered_json& value,
                                          std::string_view field);

// Calls `visit(schema, where)` for each schema in `tag` (one ParseStructuralTag returned) that
// XGrammar may compile: of "json_schema" and "qwen_xml_parameter" formats and of formats with no
// "type" (XGrammar may infer json_schema); `where` names its place ("format.tags[0].content").
void ForEachStructuralTagSchema(
    const nlohmann::ordered_json& tag,
    const std::function<void(const nlohmann::ordered_json&, const std::string&)>& visit);

// A token's id from its text, as XGrammar finds it in the vocabulary; nothing when there is none.
using TokenIdOf = std::function<std::optional<int32_t>(const std::string&)>;

// Throws latent::Error naming a "token_triggered_tags" trigger token in `tag` that is no tag's
// begin token (XGrammar refuses it only with a failed internal check). Token texts are resolved
// with `id_of`; one that does not resolve is left to XGrammar, which names it.
void CheckStructuralTagTriggerTokens(const nlohmann::ordered_json& tag, const TokenIdOf& id_of);

}  // namespace latent::structured
