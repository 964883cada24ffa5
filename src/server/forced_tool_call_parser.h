// The output of a chat request whose tool_choice forces a call ("required" or a named function):
// the grammar (structured::ToolCallSchema) has already made the model write JSON, not its
// family's markup, so this parser reads that JSON into tool calls, as vLLM does for forced calls.
// - named function: the whole output is that function's arguments object; it streams as one
//   call's arguments, the call's id and name going out with the first piece;
// - "required": the output is an array of {"name", "parameters"}; it is parsed once complete
//   (Finish), each element one call with `parameters` as its arguments.
// An output that does not parse (cut by max_tokens) stays content; a named call cut short keeps
// the arguments it has, as a markup call cut by max_tokens does. An output with no text for
// this parser (one that ended inside its reasoning) has no call.
#pragma once

#include <memory>
#include <string>

#include "server/output_parser.h"
#include "server/tool_choice.h"

namespace latent::server {

std::unique_ptr<OutputParser> MakeForcedToolCallParser(const ToolChoice& choice);

}  // namespace latent::server
