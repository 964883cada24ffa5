// vLLM's structural tags: output constrained only between trigger strings (tool calls in a
// model's markup, `<function=f>{"a": 1}</function>`), free text elsewhere. Both forms vLLM takes
// become XGrammar's structural tag JSON here, without XGrammar: StructuredOutput compiles it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace latent::structured {

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
//   is refused here (a "triggered_tags" trigger that starts none of its tags' begins); XGrammar
//   judges the rest when it compiles.
// `field` names the value in errors ("response_format", "structured_outputs.structural_tag").
// Throws latent::Error naming the member at fault.
nlohmann::ordered_json ParseStructuralTag(const nlohmann::ordered_json& value,
                                          std::string_view field);

// Calls `visit(schema, where)` for the schema of each "json_schema" format in `tag` (one
// ParseStructuralTag returned), `where` naming its place ("format.tags[0].content").
void ForEachStructuralTagSchema(
    const nlohmann::ordered_json& tag,
    const std::function<void(const nlohmann::ordered_json&, const std::string&)>& visit);

}  // namespace latent::structured
