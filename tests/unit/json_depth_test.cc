// base/json_depth.h: the nesting bound checked on caller JSON text before it is parsed.
#include "base/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace latent {
namespace {

TEST(JsonDepthTest, CountsArraysAndObjects) {
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"a": [1, {"b": []}]})", 4));  // {, [, {, []
  EXPECT_TRUE(JsonNestsDeeperThan(R"({"a": [1, {"b": []}]})", 3));
  EXPECT_FALSE(JsonNestsDeeperThan("[][][]", 1));  // siblings, not nesting
  EXPECT_FALSE(JsonNestsDeeperThan("", 0));
}

TEST(JsonDepthTest, BracketsInStringsDoNotCount) {
  EXPECT_FALSE(JsonNestsDeeperThan(R"(["[[[{{{", "\"[[[", "\\"])", 1));
  // The escaped backslash ends the string before the brackets: they count.
  EXPECT_TRUE(JsonNestsDeeperThan(R"(["\\", [[]]])", 2));
}

TEST(JsonDepthTest, StrayClosersLendNoDepth) {
  const std::string text = std::string(100, ']') + std::string(100, '[');
  EXPECT_TRUE(JsonNestsDeeperThan(text, 64));
}

}  // namespace
}  // namespace latent
