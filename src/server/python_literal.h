// Python literals read as JSON values. GLM's tool calls write each argument's value as text, and
// models write Python there as often as JSON (True, None, {'k': 'v'}); vLLM's glm4_moe parser
// reads a value that json.loads refuses with ast.literal_eval, then json.dumps it. This is that
// fallback for the literals that json.dumps can write.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace latent::server {

// `text` (whitespace around and between tokens allowed, `#` comments not) read as one Python
// literal, as the JSON value json.dumps writes for it; nullopt when it is not one of:
// - True, False, None;
// - int and float literals with an optional sign: decimal (`_` between digits, `1.`, `.5`,
//   exponents), and 0x/0o/0b ints; ints must fit in 64 bits, floats must be finite;
// - str literals: '...' or "..." (an optional u prefix), Python's escapes, adjacent ones joined;
// - lists and tuples (JSON arrays), and dicts (JSON objects; keys str, int, True/False/None,
//   which json.dumps writes as strings; a repeated key keeps its first place and its last value),
//   trailing commas allowed, nested at most `max_depth` levels.
// Not read (nullopt, so the caller keeps the text as a string): complex numbers, bytes, raw or
// triple-quoted strings, sets, float keys, and expressions that are not literals.
std::optional<nlohmann::ordered_json> ParsePythonLiteral(std::string_view text, int max_depth);

}  // namespace latent::server
