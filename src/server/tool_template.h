// How a chat template reads an assistant turn with tool calls, found once per template (at server
// start-up, or when request lines first need the template) by rendering probe conversations:
// - The arguments. OpenAI clients send them as JSON text; DeepSeek's templates concatenate the
//   text into the prompt (an object would fail), Kimi K2's print text as is and objects through
//   tojson, GLM-4.5's iterate over an object's items (text would come out as a single
//   "raw_arguments" entry). The probe call is rendered with its arguments as an object and as
//   JSON text. A template that shows the call only from an object (an items loop fails on text,
//   however it quotes the keys: `{'{{ k }}': ...}`, `<parameter name="{{ k }}">`) gets objects,
//   and so does one that shows both but took the object apart (GLM-4.5, whose fallback prints
//   text whole); one that printed the object whole (tojson, or Python's repr, which
//   `{{ arguments }}` prints for a dict), fails on it or loses the call gets JSON text, as
//   transformers would from an OpenAI client.
// - A null content beside the calls (what OpenAI clients send). transformers drops null keys,
//   on which DeepSeek's and Kimi's templates fail; "" is what most mean (DeepSeek V3.1 renders ""
//   and none alike, GLM-4.5 writes "None" for none, Qwen3 and Kimi K2 fail on none:
//   `'</think>' in message.content`). DeepSeek V3's template writes the calls only under
//   `message['content'] is none`: with "" the model would see tool outputs without the call. So
//   content stays none exactly where the call shows in the rendering with none and not with "".
// A tokenizer with several named templates gets both answers per template Render can pick
// ("tool_use" probed with tools, "default" without), stored in the ChatTemplate and applied by the
// template a request uses: ShapeForTemplate (ShapeToolCallTurns) shapes each request's messages.
#pragma once

#include <string>
#include <vector>

#include "server/openai_schema.h"
#include "tokenizer/chat_template/chat_template.h"

namespace latent::server {

// The probes' answers, by template name (for the start-up log).
struct ToolTemplateShape {
  // The templates that read arguments as objects (the others get JSON text).
  std::vector<std::string> arguments_object_templates;
  // The templates whose tool-call turns keep a null content as none (the others get "").
  std::vector<std::string> content_none_templates;
  // The templates probed: those Render can pick.
  std::vector<std::string> templates;
};

// The answers for the start-up log: "objects" or "JSON text", then " and a null content beside
// them as ", "none" or "\"\"", each naming the templates it holds for when the templates probed
// differ ("objects in template 'tool_use', JSON text in the others").
std::string ToolTemplateShapeText(const ToolTemplateShape& shape);

// Probes each template of `chat_template` Render can pick and sets its
// set_tool_call_content_none and set_tool_call_arguments_as_objects.
ToolTemplateShape ProbeToolTemplate(tokenizer::ChatTemplate& chat_template);

// The two probes alone, of the template Render picks for a request with (without) tools.
// TemplateReadsArgumentsAsObject renders the tool-call turn's content as that template's
// tool_call_content_none says.
bool TemplateWantsToolCallContentNone(const tokenizer::ChatTemplate& chat_template,
                                      bool with_tools = true);
bool TemplateReadsArgumentsAsObject(const tokenizer::ChatTemplate& chat_template,
                                    bool with_tools = true);

// ShapeToolCallTurns as the template Render picks for a request with (without) tools reads
// tool-call turns (its two probed settings).
void ShapeForTemplate(const tokenizer::ChatTemplate& chat_template, bool with_tools,
                      OrderedJson& messages);

}  // namespace latent::server
