// Splits template source into tokens the way jinja2's lexer does under transformers' settings
// (trim_blocks, lstrip_blocks, no trailing newline kept): text, {{ }}, {% %} with their
// whitespace control, {# #} comments and {% raw %} blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace latent::tokenizer::jinja {

struct Pos {
  int line = 1;
  int col = 1;
};

enum class TokenType : uint8_t {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type;
  std::string value;  // text, name, unescaped string, operator; digits (without '_') for numbers
  Pos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

// "chat template line L col C: message" as a latent::Error.
[[noreturn]] void FailAt(Pos pos, const std::string& message);

// Tokenizes `source` (valid UTF-8). Throws latent::Error with the position on malformed input.
std::vector<Token> Tokenize(const std::string& source);

}  // namespace latent::tokenizer::jinja
