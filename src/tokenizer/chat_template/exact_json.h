// JSON text whose integers reach chat templates, parsed without nlohmann's quiet widening: an
// integer past the 64-bit range becomes a float there (-9223372036854775809 parses as
// -9.223372036854776e+18, which a template's tojson then prints), while transformers keeps
// Python's exact int. Template values hold 64-bit integers, so such an integer is refused with an
// error naming where it is, on every front that renders a chat (render-chat, the server's chat
// requests, request lines).
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/error.h"

namespace latent::tokenizer {

// An integer outside [-2^63, 2^63) in JSON text. path(): where it is, as "messages[0].content.x"
// ("" for a bare integer).
class JsonIntegerRangeError : public Error {
 public:
  JsonIntegerRangeError(const std::string& lexeme, std::string path);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Parses `text` as nlohmann::ordered_json::parse does (nlohmann's parse_error on bad JSON), but
// throws JsonIntegerRangeError for an integer outside the signed 64-bit range. With `keep`
// non-empty, only those members of a top-level object are kept, as a parser callback that drops
// the others would. With `checked` non-empty, only the integers inside those top-level members
// are checked (the others parse as nlohmann parses them: a request line's uint64 seed stays
// good). Callers bound the nesting first (JsonNestsDeeperThan).
nlohmann::ordered_json ParseJsonExactIntegers(std::string_view text,
                                              std::initializer_list<std::string_view> keep = {},
                                              std::initializer_list<std::string_view> checked = {});

// As ParseJsonExactIntegers, with no integer checked: nlohmann's values, built in time linear in
// the text (a long list of objects, a wide object), keeping only `keep`'s top-level members
// (all when empty).
nlohmann::ordered_json ParseJsonKeeping(std::string_view text,
                                        std::initializer_list<std::string_view> keep = {});

}  // namespace latent::tokenizer
