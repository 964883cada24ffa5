// `latent render-chat --tokenizer DIR --request FILE.json`: prints the prompt the tokenizer's chat
// template makes of a conversation, byte for byte as transformers' apply_chat_template(...,
// tokenize=False) renders it. `--model DIR` is accepted for --tokenizer.
//
// A request is a JSON object: "messages" (required), "tools", "documents",
// "add_generation_prompt" (default false; null: the default), "continue_final_message" (default
// false: end the prompt inside the final message, as transformers does), and template variables
// under "chat_template_kwargs" (as in OpenAI-compatible servers; an add_generation_prompt there
// wins, as in vLLM) or as any other top-level key (enable_thinking, ...). A request may nest
// tokenizer::kMaxChatJsonDepth levels deep; an integer past the 64-bit range is refused by place.
// `--requests FILE.jsonl` renders one request per line and prints one JSON line per request: the
// prompt as a JSON string, or {"error": "FILE:LINE: ..."}; it exits 2 (bad input) if any failed.
#include <cerrno>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "base/error_context.h"
#include "base/input_file.h"
#include "cli/commands.h"
#include "tokenizer/chat_template/chat_template.h"

namespace latent::cli {
namespace {

struct RenderChatOptions {
  std::string tokenizer_dir;
  std::string model_dir;
  std::string request_file;
  std::string requests_file;
};

std::string ReadAll(std::string_view flag, const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path == "-") {
    CheckStandardInput(flag, path);
  } else {
    file = OpenInputFile(flag, path, std::ios::binary);
    in = &file;
  }
  // istream::read, which records a failed read (CheckReadToEnd): an ostream's << rdbuf() and
  // istreambuf_iterator end as at the end of the input, or throw past the stream.
  std::string text;
  char chunk[1 << 16];
  errno = 0;  // so that a read that fails names its own reason
  while (in->read(chunk, sizeof(chunk)) || in->gcount() > 0) text.append(chunk, in->gcount());
  CheckReadToEnd(*in, flag, path);
  return text;
}

// A JSON object set member by member, a key set again keeping its place, in time linear in the
// members: ordered_json finds a key by a linear scan, so 50,000 template kwargs took seconds.
class ObjectBuilder {
 public:
  void Set(const std::string& key, const nlohmann::ordered_json& value) {
    auto& members = object_.get_ref<nlohmann::ordered_json::object_t&>();
    const auto [at, added] = places_.emplace(key, members.size());
    if (added) {
      members.emplace_back(key, value);
    } else {
      members.begin()[at->second].second = value;  // ordered_map hides the vector's []
    }
  }
  nlohmann::ordered_json Take() { return std::move(object_); }

 private:
  nlohmann::ordered_json object_ = nlohmann::ordered_json::object();
  std::unordered_map<std::string, size_t> places_;
};

tokenizer::ChatRequest ParseRequest(const nlohmann::ordered_json& j) {
  if (!j.is_object()) Fail("chat request: must be a JSON object");
  if (!j.contains("messages")) Fail("chat request: no \"messages\"");
  tokenizer::ChatRequest request;
  ObjectBuilder kwargs;
  for (const auto& [key, value] : j.items()) {
    if (key == "messages") {
      request.messages = value;
    } else if (key == "tools") {
      request.tools = value;
    } else if (key == "documents") {
      request.documents = value;
    } else if (key == "add_generation_prompt") {
      if (value.is_null()) continue;  // the default, as the server takes null
      if (!value.is_boolean()) {
        Fail("chat request: \"add_generation_prompt\" must be true or false");
      }
      request.add_generation_prompt = value.get<bool>();
    } else if (key == "continue_final_message") {
      if (value.is_null()) continue;
      if (!value.is_boolean()) {
        Fail("chat request: \"continue_final_message\" must be true or false");
      }
      request.continue_final_message = value.get<bool>();
    } else if (key != "chat_template_kwargs") {
      kwargs.Set(key, value);
    }
  }
  if (j.contains("chat_template_kwargs") && !j["chat_template_kwargs"].is_null()) {
    const auto& extra = j["chat_template_kwargs"];
    if (!extra.is_object()) Fail("chat request: \"chat_template_kwargs\" must be an object");
    for (const auto& [key, value] : extra.items()) kwargs.Set(key, value);
  }
  request.kwargs = kwargs.Take();
  return request;
}

tokenizer::ChatRequest ParseRequestText(const std::string& text, const std::string& where) {
  return ParseRequest(tokenizer::ParseChatJson(text, where));
}

// One --requests line rendered, or its error prefixed by FILE:LINE (as tokenize --jsonl's are):
// the JSON's errors name the place themselves, the request's and the template's do not.
std::string RenderLine(const tokenizer::ChatTemplate& chat, const std::string& line,
                       const std::string& where) {
  const nlohmann::ordered_json request = tokenizer::ParseChatJson(line, where);
  try {
    return chat.Render(ParseRequest(request));
  } catch (const Error& e) {
    FailLike(e, where, ": ", e.what());
  }
}

int Run(const RenderChatOptions& opt) {
  const std::string dir = !opt.tokenizer_dir.empty() ? opt.tokenizer_dir : opt.model_dir;
  if (dir.empty()) Fail("render-chat needs --tokenizer DIR (or --model DIR)");
  if (opt.request_file.empty() == opt.requests_file.empty()) {
    Fail("render-chat needs exactly one of --request FILE.json and --requests FILE.jsonl");
  }
  const tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::FromTokenizerDir(dir);
  if (!opt.request_file.empty()) {
    const std::string text = ReadAll("--request", opt.request_file);
    std::cout << chat.Render(ParseRequestText(text, opt.request_file));
    std::cout.flush();
    return 0;
  }
  std::istringstream lines(ReadAll("--requests", opt.requests_file));
  std::string line;
  int failed = 0;
  for (size_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json result;
    try {
      result = RenderLine(chat, line, StrCat(opt.requests_file, ":", n));
    } catch (const Error& e) {
      result = {{"error", e.what()}};
      ++failed;
    }
    // Invalid UTF-8 cannot reach the output (templates and JSON input are checked), but replace
    // rather than throw if it ever does.
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  std::cout.flush();
  return failed ? 2 : 0;
}

Runner RegisterRenderChat(CLI::App& app) {
  auto opt = std::make_shared<RenderChatOptions>();
  CLI::App* sub = app.add_subcommand(
      "render-chat",
      "Render a conversation with the tokenizer's chat template and print the prompt");
  sub->add_option("--tokenizer", opt->tokenizer_dir,
                  "Tokenizer directory (tokenizer_config.json and/or chat_template.jinja)");
  sub->add_option("--model", opt->model_dir,
                  "Checkpoint directory, used when --tokenizer is not given");
  sub->add_option(
         "--request", opt->request_file,
         "File holding one JSON request: messages, tools, add_generation_prompt, "
         "continue_final_message, template kwargs ('-': stdin)")
      ->option_text("FILE");
  sub->add_option(
         "--requests", opt->requests_file,
         "File of JSON Lines, one request per line; prints one JSON string (or {\"error\"}) "
         "per line ('-': stdin)")
      ->option_text("FILE");
  return [opt] { return Run(*opt); };
}

}  // namespace

LATENT_COMMAND(42, RegisterRenderChat);

}  // namespace latent::cli
