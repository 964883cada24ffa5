// The tool-call formats of the model families (tool_call_parser.h describes each).
#pragma once

#include <memory>

#include "server/tool_call_parser.h"

namespace latent::server {

std::unique_ptr<OutputParser> MakeDeepseekV3ToolParser();
std::unique_ptr<OutputParser> MakeDeepseekV31ToolParser();
std::unique_ptr<OutputParser> MakeDsmlToolParser();
std::unique_ptr<OutputParser> MakeKimiK2ToolParser();
std::unique_ptr<OutputParser> MakeGlm45ToolParser(ToolSchemas schemas);

}  // namespace latent::server
