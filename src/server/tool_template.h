// How a chat template reads tool-call arguments. OpenAI clients send an assistant turn's
// tool-call arguments as JSON text; templates differ in what they expect there: DeepSeek's
// concatenate the text into the prompt (an object would fail), Kimi K2's print text as is and
// objects through tojson, GLM-4.5's iterate over an object's items (text would come out as a
// single "raw_arguments" entry). The server finds out once, at start-up, by rendering a probe
// conversation with the arguments as an object: a template that shows the argument's key without
// its JSON quotes took the object apart, so arguments reach it as objects
// (ShapeToolCallTurns); every other template gets JSON text, as transformers would from an
// OpenAI client.
#pragma once

#include "tokenizer/chat_template/chat_template.h"

namespace latent::server {

bool TemplateReadsArgumentsAsObject(const tokenizer::ChatTemplate& chat_template);

}  // namespace latent::server
