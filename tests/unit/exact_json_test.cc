// ParseJsonExactIntegers: JSON for chat templates parsed as nlohmann parses it, except that an
// integer past the 64-bit range (which nlohmann would keep as a float) is refused by where it is.
#include "tokenizer/chat_template/exact_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace latent::tokenizer {
namespace {

using nlohmann::ordered_json;

// The path and message of the JsonIntegerRangeError `text` raises.
std::pair<std::string, std::string> Refusal(const std::string& text,
                                            std::initializer_list<std::string_view> keep = {},
                                            std::initializer_list<std::string_view> checked = {}) {
  try {
    ParseJsonExactIntegers(text, keep, checked);
  } catch (const JsonIntegerRangeError& e) {
    return {e.path(), e.what()};
  }
  ADD_FAILURE() << text << " was taken";
  return {};
}

TEST(ExactJson, ParsesAsNlohmannDoes) {
  const std::string text =
      R"({"b": [1, -2, 3.5, 1e300, -0, 9223372036854775807, -9223372036854775808], "a": {"x":)"
      R"( null, "y": true, "z": "s", "x": [{}]}, "c": 1E2})";
  const ordered_json got = ParseJsonExactIntegers(text);
  EXPECT_EQ(got, ordered_json::parse(text));
  EXPECT_EQ(got.dump(), ordered_json::parse(text).dump());  // key order and repeated keys too
  EXPECT_THROW(ParseJsonExactIntegers("{\"a\": 1,}"), nlohmann::json::parse_error);
  EXPECT_THROW(ParseJsonExactIntegers("[1] x"), nlohmann::json::parse_error);
}

TEST(ExactJson, IntegersPastSixtyFourBitsAreRefusedByPlace) {
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "x": -9223372036854775809}]})"),
            std::make_pair(std::string("messages[0].x"),
                           std::string("integer -9223372036854775809 at messages[0].x is too "
                                       "large (64-bit limit)")));
  EXPECT_EQ(Refusal(R"({"k": {"n": [0, 9223372036854775808]}})").first, "k.n[1]");
  EXPECT_EQ(Refusal(R"([[], 100000000000000000000000])").first, "[1]");
  EXPECT_EQ(Refusal("18446744073709551616"),
            std::make_pair(std::string(), std::string("integer 18446744073709551616 is too large "
                                                      "(64-bit limit)")));
}

TEST(ExactJson, KeepsAndChecksOnlyTheNamedMembers) {
  const std::string text =
      R"({"seed": 18446744073709551615, "messages": [1], "big": [1e300, 99999999999999999999],)"
      R"( "tools": {"a": 2}})";
  const ordered_json kept = ParseJsonExactIntegers(text, {"messages", "tools"}, {"messages"});
  EXPECT_EQ(kept.dump(), R"({"messages":[1],"tools":{"a":2}})");
  // Unchecked members parse as nlohmann parses them: a request's uint64 seed stays good.
  const ordered_json checked = ParseJsonExactIntegers(text, {}, {"messages", "tools"});
  EXPECT_EQ(checked["seed"].get<uint64_t>(), 18446744073709551615u);
  EXPECT_TRUE(checked["big"][1].is_number_float());
  EXPECT_EQ(Refusal(R"({"seed": 1, "tools": [{"n": 18446744073709551615}]})", {}, {"tools"}).first,
            "tools[0].n");
}

}  // namespace
}  // namespace latent::tokenizer
