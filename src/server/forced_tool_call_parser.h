// The output of a chat request whose tool_choice forces a call ("required" or a named function):
// the grammar (structured::ToolCallSchema) has already made the model write JSON, not its
// family's markup, so this parser reads that JSON into tool calls, as vLLM does for forced calls.
// Both stream:
// - named function: the whole output is that function's arguments object; it streams as one
//   call's arguments, the call's id and name going out with the first piece;
// - "required": the output is an array of {"name", "parameters"}, read as it comes: each element
//   is one call, its id and name going out once the name is whole and the parameters have begun,
//   then the parameters piece by piece as its arguments.
// The arguments are spaced as Python's json.dumps spaces them ({"a": 1}, as the markup parsers'
// arguments are; the grammar's JSON is compact). Only the spacing: numbers and strings stay as
// the model wrote them (1E5, "\u00e9"), since a streamed piece cannot be taken back and the
// pieces must join into the non-streamed arguments.
// A call is complete (ToolCallDelta::closed) once its JSON closed: its arguments object (named),
// its element's object ("required"). An output cut short (max_tokens, a stop string) keeps the
// calls it has, the last one with the arguments so far and not complete, as a markup call cut
// short is; text before any call began (`[{"name": "f"`) is neither content nor a call, and
// Finish then says a call was under way (ParsedDelta::unfinished_call). An element that repeats
// "name" or "parameters" is malformed (arguments `{..}{..}` would not be JSON). An
// output with no text for this parser (one that ended inside its reasoning) has no call. Text
// that is not such JSON (no grammar allows it) is content from where it stops fitting (all of
// it while no call went out).
#pragma once

#include <memory>
#include <string>

#include "server/output_parser.h"
#include "server/tool_choice.h"

namespace latent::server {

std::unique_ptr<OutputParser> MakeForcedToolCallParser(const ToolChoice& choice);

}  // namespace latent::server
