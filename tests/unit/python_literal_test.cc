#include "server/python_literal.h"

#include <gtest/gtest.h>

#include <string>

namespace latent::server {
namespace {

// The JSON text a literal reads as, or "-" for none.
std::string Read(const std::string& text, int max_depth = 64) {
  const auto v = ParsePythonLiteral(text, max_depth);
  return v ? v->dump() : "-";
}

TEST(PythonLiteralTest, Constants) {
  EXPECT_EQ(Read("True"), "true");
  EXPECT_EQ(Read(" False\n"), "false");
  EXPECT_EQ(Read("None"), "null");
  EXPECT_EQ(Read("true"), "-");
  EXPECT_EQ(Read("Truex"), "-");
  EXPECT_EQ(Read("True False"), "-");
}

TEST(PythonLiteralTest, Numbers) {
  EXPECT_EQ(Read("42"), "42");
  EXPECT_EQ(Read("+7"), "7");
  EXPECT_EQ(Read("- 3"), "-3");
  EXPECT_EQ(Read("1_000"), "1000");
  EXPECT_EQ(Read("0x1F"), "31");
  EXPECT_EQ(Read("0o17"), "15");
  EXPECT_EQ(Read("-0b101"), "-5");
  EXPECT_EQ(Read("00"), "0");
  EXPECT_EQ(Read("1."), "1.0");
  EXPECT_EQ(Read(".5"), "0.5");
  EXPECT_EQ(Read("-.5e1"), "-5.0");
  EXPECT_EQ(Read("1_0.2_5"), "10.25");
  // Not Python literals, or not what json.dumps can write.
  for (const char* bad : {"007", "1__0", "1_", "0x", "1e", "1j", "1e999", "--1",
                          "99999999999999999999", "0xg", ".", "+", "1abc"}) {
    EXPECT_EQ(Read(bad), "-") << bad;
  }
}

TEST(PythonLiteralTest, Strings) {
  EXPECT_EQ(Read("'it\\'s'"), "\"it's\"");
  EXPECT_EQ(Read("\"a'b\""), "\"a'b\"");
  EXPECT_EQ(Read("'a' \"b\""), "\"ab\"");
  EXPECT_EQ(Read("u'x'"), "\"x\"");
  EXPECT_EQ(Read("'\\n\\t\\x41\\u00e9\\U0001F600\\101\\q'"), "\"\\n\\tAé😀A\\\\q\"");
  EXPECT_EQ(Read("'東京'"), "\"東京\"");
  for (const char* bad : {"'open", "'a\nb'", "'''x'''", "b'x'", "r'x'", "'\\ud800'", "'\\N{DASH}'",
                          "'\\x4'"}) {
    EXPECT_EQ(Read(bad), "-") << bad;
  }
}

TEST(PythonLiteralTest, Containers) {
  EXPECT_EQ(Read("[1, 'a', None,]"), "[1,\"a\",null]");
  EXPECT_EQ(Read("(1, 2)"), "[1,2]");
  EXPECT_EQ(Read("(1,)"), "[1]");
  EXPECT_EQ(Read("(1)"), "1");
  EXPECT_EQ(Read("()"), "[]");
  EXPECT_EQ(Read("{}"), "{}");
  EXPECT_EQ(Read("{'b': 1, 'a': {'x': [True]}}"), "{\"b\":1,\"a\":{\"x\":[true]}}");
  // Keys as json.dumps writes them; a repeated key keeps its first place and its last value.
  EXPECT_EQ(Read("{1: 'a', True: 2, None: 3, 'k': 4, 1: 'z'}"),
            "{\"1\":\"z\",\"true\":2,\"null\":3,\"k\":4}");
  for (const char* bad : {"[1 2]", "[1,,2]", "{1, 2}", "{'a' 1}", "{1.5: 0}", "{(1,): 0}", "[1",
                          "{'a': }", "[1] [2]"}) {
    EXPECT_EQ(Read(bad), "-") << bad;
  }
  // Nesting past the bound is refused (the caller keeps the text).
  EXPECT_EQ(Read("[[[1]]]", 3), "[[[1]]]");
  EXPECT_EQ(Read("[[[1]]]", 2), "-");
  EXPECT_EQ(Read(std::string(100000, '[')), "-");
}

}  // namespace
}  // namespace latent::server
