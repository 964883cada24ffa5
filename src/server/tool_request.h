// Tools in: the `tools` and `tool_choice` fields of /v1/chat/completions (and /tokenize),
// validated (every rejection an ApiError naming the field), and the tool-call fields of the
// conversation (assistant `tool_calls`, tool messages' `tool_call_id`) checked and shaped for the
// chat template. Pure functions, fuzzed through ParseGenerationRequest.
#pragma once

#include <string>

#include "server/openai_schema.h"
#include "server/tool_choice.h"

namespace latent::server {

// `tools`: absent, null or [] give null; else a list of {"type": "function", "function": {"name",
// "description"?, "parameters"? (an object), "strict"?}} with distinct names, returned as given
// (`ordered`, key order kept for the template's tojson).
OrderedJson ParseTools(const Json& body, const OrderedJson& ordered);

// `tool_choice` against the parsed tools: absent means "auto" with tools and "none" without;
// "required" and a named function need tools, and the name must be one of them.
ToolChoice ParseToolChoice(const Json& body, const OrderedJson& tools);

// Checks messages[index]'s tool fields: an assistant's tool_calls (a list of {"id"?, "type"?:
// "function", "function": {"name", "arguments": JSON text or object}}), a tool message's
// tool_call_id (a string).
void ValidateToolFields(const Json& message, size_t index);

// Assistant turns with tool calls as the chat template reads them:
// - The arguments: OpenAI sends them as JSON text, which templates that print them (DeepSeek,
//   Kimi) want; templates that iterate over them (GLM-4.5) need an object. `as_objects` (the
//   template Render picks for this request reads objects: ChatTemplate::
//   tool_call_arguments_as_objects, set by ProbeToolTemplate, server/tool_template.h): JSON text
//   is parsed into an object (a 400 naming the field when it is not a JSON object or nests deeper
//   than kMaxJsonDepth; "" gives {}); otherwise objects are written as JSON text (json.dumps).
// - A null (or absent) content: OpenAI clients send null beside tool calls, and transformers
//   drops null keys before rendering, on which DeepSeek's and Kimi's templates fail ('dict
//   object' has no attribute 'content'). `content_none` (the template Render picks for this
//   request keeps none, ChatTemplate::tool_call_content_none: DeepSeek V3 writes the calls only
//   then): an assistant turn with a non-empty tool_calls list keeps it null; every other null
//   becomes "", what the other templates mean (server/tool_template.h).
void ShapeToolCallTurns(OrderedJson& messages, bool as_objects, bool content_none);

}  // namespace latent::server
