// `latent tokenize --tokenizer DIR (--text T | --jsonl FILE | --bench FILE) [--no-special-tokens]`
// prints {"ids": [...]} per input ({"text": ...} lines in FILE), or, with --bench, the encode
// throughput (one thread) over FILE's texts as JSON (bench/tokenizer_bench.py).
// `latent detokenize --tokenizer DIR (--ids 1,2,3 | --jsonl FILE) [--skip-special-tokens]
// [--stream]` prints {"text": ...} per input ({"ids": [...]} lines in FILE); --stream decodes
// token by token with the streaming detokenizer and also prints the pieces. A line's optional
// "prompt_ids" make "ids" an output after that prompt: the text is what the ids add to the
// prompt's, as the server and `latent generate` give an output's text (DecodeAfter).
// --tokenizer defaults to --model, so a checkpoint directory works as well as a directory with
// only tokenizer files. With --jsonl, a bad line prints {"error": "..."} in its place and the
// other lines go on; the command then exits 2.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/input_file.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/token_ids.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace latent::cli {
namespace {

using nlohmann::json;

struct TokenizerDirOptions {
  std::string tokenizer_dir, model_dir;
  std::string Dir() const {
    if (!tokenizer_dir.empty()) return tokenizer_dir;
    if (!model_dir.empty()) return model_dir;
    Fail("give --tokenizer DIR (or --model DIR)");
  }
};

void AddDirOptions(CLI::App* sub, TokenizerDirOptions& opt) {
  sub->add_option("--tokenizer", opt.tokenizer_dir,
                  "Directory with tokenizer.json (and tokenizer_config.json), or with Kimi's "
                  "tiktoken.model and tokenizer_config.json");
  sub->add_option("--model", opt.model_dir,
                  "Checkpoint directory, used when --tokenizer is absent");
}

// Calls `fn(line_number, object)` for each non-blank JSON line of `path` ("-": stdin), given by
// `flag`. A line that is not a JSON object, or whose `fn` throws a latent::Error, stops the loop
// with that error; or, given `on_error`, is reported to it and the loop goes on (the lines are
// independent: one bad text need not lose a batch's other results).
template <typename Fn>
void ForEachJsonLine(std::string_view flag, const std::string& path, Fn fn,
                     const std::function<void(const Error&)>& on_error = nullptr) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path == "-") {
    CheckStandardInput(flag, path);
  } else {
    file = OpenInputFile(flag, path, std::ios::binary);
    in = &file;
  }
  std::string line;
  size_t number = 0;
  for (;;) {
    errno = 0;  // so that a read that fails names its own reason (CheckReadToEnd)
    if (!std::getline(*in, line)) break;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      json object;
      try {
        object = json::parse(line);
      } catch (const json::exception& e) {
        Fail(path, ":", number, ": not valid JSON: ", e.what());
      }
      if (!object.is_object()) Fail(path, ":", number, ": expected a JSON object");
      fn(number, object);
    } catch (const Error& e) {
      if (!on_error) throw;
      on_error(e);
    }
  }
  CheckReadToEnd(*in, flag, path);
}

// --jsonl's failed lines: each printed in its place as {"error": "..."}, as render-chat
// --requests does; the command exits 2 (bad input) after the last line when any failed.
struct LineErrors {
  size_t failed = 0;
  std::function<void(const Error&)> Reporter() {
    return [this](const Error& e) {
      ++failed;
      std::cout << json({{"error", e.what()}}).dump(-1, ' ', false, json::error_handler_t::replace)
                << "\n";
    };
  }
  int ExitCode() const { return failed ? 2 : 0; }
};

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct TokenizeOptions : TokenizerDirOptions {
  std::string text, jsonl, bench;
  bool has_text = false;
  bool no_special_tokens = false;
  int repeat = 1;
};

// Encodes every {"text": ...} line of --bench FILE --repeat times; reports the best pass.
int RunBench(const tokenizer::Tokenizer& tok, const TokenizeOptions& opt) {
  std::vector<std::string> texts;
  size_t bytes = 0;
  ForEachJsonLine("--bench", opt.bench, [&](size_t number, const json& object) {
    auto it = object.find("text");
    if (it == object.end() || !it->is_string())
      Fail(opt.bench, ":", number, ": expected {\"text\": ...}");
    texts.push_back(it->get<std::string>());
    bytes += texts.back().size();
  });
  // Wall time, and CPU time of this (single-threaded) process, which a busy machine disturbs less.
  size_t tokens = 0;
  double best = std::numeric_limits<double>::infinity();
  double best_cpu = std::numeric_limits<double>::infinity();
  for (int r = 0; r < opt.repeat; ++r) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (const std::string& text : texts) tokens += tok.Encode(text, !opt.no_special_tokens).size();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
    best_cpu = std::min(best_cpu, static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC);
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::cout << Dump({{"bytes", bytes},
                     {"texts", texts.size()},
                     {"tokens", tokens},
                     {"seconds", best},
                     {"cpu_seconds", best_cpu},
                     {"mb_per_s", mb / best},
                     {"cpu_mb_per_s", mb / best_cpu}})
            << "\n";
  return 0;
}

Runner RegisterTokenize(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  CLI::App* sub = app.add_subcommand("tokenize", "Text to token ids, as JSON {\"ids\": [...]}");
  AddDirOptions(sub, *opt);
  auto* text = sub->add_option("--text", opt->text, "Text to encode");
  auto* jsonl =
      sub->add_option("--jsonl", opt->jsonl,
                      "File of {\"text\": ...} lines (- for stdin); a bad line prints "
                      "{\"error\": ...} and the rest go on (exit 2 after)");
  auto* bench = sub->add_option("--bench", opt->bench,
                                "Time encoding each {\"text\": ...} line of FILE; prints JSON");
  text->excludes(jsonl)->excludes(bench);
  jsonl->excludes(bench);
  sub->add_option("--repeat", opt->repeat, "--bench: passes over the file (the best counts)")
      ->check(Positive(opt->repeat));
  sub->add_flag("--no-special-tokens", opt->no_special_tokens,
                "Do not add BOS/EOS (add_special_tokens=False)");
  return [opt, text] {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromDir(opt->Dir());
    const bool add_special = !opt->no_special_tokens;
    if (!opt->bench.empty()) return RunBench(tok, *opt);
    if (!opt->jsonl.empty()) {
      LineErrors errors;
      ForEachJsonLine(
          "--jsonl", opt->jsonl,
          [&](size_t number, const json& object) {
            auto it = object.find("text");
            if (it == object.end() || !it->is_string()) {
              Fail(opt->jsonl, ":", number, ": expected {\"text\": \"...\"}");
            }
            std::cout << Dump({{"ids", tok.Encode(it->get<std::string>(), add_special)}})
                      << "\n";
          },
          errors.Reporter());
      return errors.ExitCode();
    }
    if (text->count() == 0) Fail("tokenize needs --text, --jsonl or --bench");
    std::cout << Dump({{"ids", tok.Encode(opt->text, add_special)}}) << "\n";
    return 0;
  };
}

struct DetokenizeOptions : TokenizerDirOptions {
  std::string ids, jsonl;
  bool skip_special_tokens = false;
  bool stream = false;
};

json DecodeToJson(const tokenizer::Tokenizer& tok, const std::vector<int32_t>& ids,
                  const std::optional<std::vector<int32_t>>& prompt,
                  const DetokenizeOptions& opt) {
  if (!opt.stream) {
    if (prompt) {
      return {{"text", tokenizer::DecodeAfter(tok, *prompt, ids, opt.skip_special_tokens)}};
    }
    return {{"text", tok.Decode(ids, opt.skip_special_tokens)}};
  }
  tokenizer::StreamingDetokenizer stream(tok, opt.skip_special_tokens);
  if (prompt) stream.Prime(*prompt);
  std::string text;
  json pieces = json::array();
  const auto add = [&](std::string piece) {
    if (piece.empty()) return;
    text += piece;
    pieces.push_back(std::move(piece));
  };
  for (int32_t id : ids) add(stream.Push(id));
  add(stream.Finish());
  // Every piece must be whole characters; the parity test checks this count is zero.
  size_t partial = 0;
  for (const json& piece : pieces) partial += !tokenizer::IsValidUtf8(piece.get<std::string>());
  return {{"text", text}, {"pieces", pieces}, {"partial_pieces", partial}};
}

std::vector<int32_t> IdsFromJson(const json& value, const std::string& where) {
  if (!value.is_array()) Fail(where, ": expected {\"ids\": [...]}");
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (const json& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      Fail(where, ": ", id.dump(), " is not a token id");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

Runner RegisterDetokenize(CLI::App& app) {
  auto opt = std::make_shared<DetokenizeOptions>();
  CLI::App* sub = app.add_subcommand("detokenize", "Token ids to text, as JSON {\"text\": ...}");
  AddDirOptions(sub, *opt);
  auto* ids = sub->add_option("--ids", opt->ids, "Token ids, e.g. 1,2,3");
  auto* jsonl =
      sub->add_option("--jsonl", opt->jsonl,
                      "File of {\"ids\": [...]} lines (- for stdin); a bad line prints "
                      "{\"error\": ...} and the rest go on (exit 2 after)");
  ids->excludes(jsonl);
  sub->add_flag("--skip-special-tokens", opt->skip_special_tokens, "Leave out special tokens");
  sub->add_flag("--stream", opt->stream,
                "Decode token by token with the streaming detokenizer; adds \"pieces\"");
  return [opt] {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromDir(opt->Dir());
    if (!opt->jsonl.empty()) {
      LineErrors errors;
      ForEachJsonLine(
          "--jsonl", opt->jsonl,
          [&](size_t number, const json& object) {
            const std::string where = opt->jsonl + ":" + std::to_string(number);
            std::optional<std::vector<int32_t>> prompt;
            if (object.contains("prompt_ids")) {
              prompt = IdsFromJson(object["prompt_ids"], where + ": prompt_ids");
            }
            std::cout << Dump(DecodeToJson(tok, IdsFromJson(object.value("ids", json()), where),
                                           prompt, *opt))
                      << "\n";
          },
          errors.Reporter());
      return errors.ExitCode();
    }
    if (opt->ids.empty()) Fail("detokenize needs --ids or --jsonl");
    std::cout << Dump(DecodeToJson(tok, ParseTokenIds(opt->ids), std::nullopt, *opt)) << "\n";
    return 0;
  };
}

}  // namespace

LATENT_COMMAND(40, RegisterTokenize);
LATENT_COMMAND(41, RegisterDetokenize);

}  // namespace latent::cli
