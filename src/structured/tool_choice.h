// Structured output for tool_choice "required" or a named function (issue 20): the JSON schema a
// forced call must fit, built from the request's `tools`. The tool-call parser wraps it in its
// family's markup (StructuredOutput::StructuralTag, or the schema alone when the chat template
// already opened the call).
#pragma once

#include <nlohmann/json.hpp>

namespace latent::structured {

// `tools`: the request's tools array ([{"type": "function", "function": {"name", "parameters"}}]).
// `tool_choice`: "required", or {"type": "function", "function": {"name": NAME}}.
// - named function: that function's `parameters` schema (the arguments object; {"type":
//   "object"} when it has none);
// - "required": an array of at least one call, each {"name": one of the functions' names,
//   "parameters": that function's arguments}, as vLLM forces it:
//   {"type": "array", "minItems": 1, "items": {"anyOf": [{"type": "object", "properties":
//   {"name": {"const": NAME}, "parameters": PARAMETERS},
//   "required": ["name", "parameters"]}, ...]}}, with each function's definitions moved to the
//   root's $defs (prefixed "f<i>_") and its references rewritten to match.
// Throws latent::Error naming the problem ("tool_choice names function 'x', which is not in
// tools"; "tool_choice 'required' needs at least one tool"; malformed tools or choice).
nlohmann::ordered_json ToolCallSchema(const nlohmann::ordered_json& tools,
                                      const nlohmann::ordered_json& tool_choice);

}  // namespace latent::structured
