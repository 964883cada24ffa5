#include "server/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace latent::server {
namespace {

// Feeds `pieces` and returns everything emitted (Finish() included unless stopped).
std::string Feed(StopStringMatcher& m, const std::vector<std::string>& pieces,
                 std::vector<std::string>* out = nullptr) {
  std::string all;
  for (const std::string& p : pieces) {
    const std::string emitted = m.Push(p);
    if (out) out->push_back(emitted);
    all += emitted;
  }
  return all + m.Finish();
}

TEST(StopStringsTest, NoStopsPassesEverythingThrough) {
  StopStringMatcher m({});
  std::vector<std::string> out;
  EXPECT_EQ(Feed(m, {"ab", "c"}, &out), "abc");
  EXPECT_EQ(out, (std::vector<std::string>{"ab", "c"}));
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringsTest, StopInsideOnePiece) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Push("helloENDworld"), "hello");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopStringsTest, StopAcrossPiecesIsHeldBackThenCut) {
  StopStringMatcher m({"END"});
  std::vector<std::string> out;
  EXPECT_EQ(Feed(m, {"abE", "N", "Dxyz"}, &out), "ab");
  EXPECT_EQ(out, (std::vector<std::string>{"ab", "", ""}));
  EXPECT_TRUE(m.stopped());
}

TEST(StopStringsTest, FalseStartIsReleased) {
  StopStringMatcher m({"END"});
  std::vector<std::string> out;
  EXPECT_EQ(Feed(m, {"abE", "N", "x"}, &out), "abENx");
  EXPECT_EQ(out, (std::vector<std::string>{"ab", "", "ENx"}));
  EXPECT_FALSE(m.stopped());
}

// min_tokens: text pushed unmatched never ends the output, nor starts a stop string that later
// text completes; matching resumes with the text after it.
TEST(StopStringsTest, UnmatchedTextIsPassedThrough) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.PushUnmatched("aENDxEN"), "aENDx");  // nothing matched; "EN" held back
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.PushUnmatched("Dy"), "ENDy");  // still unmatched
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("qEND"), "q");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.PushUnmatched("z"), "");
}

// As vLLM searches the new text and the stop string's length less one before it: a stop string
// may start in the unmatched text and end in the next, but one inside the unmatched text does
// not match later.
TEST(StopStringsTest, StopStringsMayStartInUnmatchedText) {
  StopStringMatcher straddling({"END"});
  EXPECT_EQ(straddling.PushUnmatched("xEN"), "x");
  EXPECT_EQ(straddling.Push("Dy"), "");
  EXPECT_TRUE(straddling.stopped());
  EXPECT_EQ(straddling.matched(), "END");
  // "xaby" is held for "xabyz"; "ab" lies wholly inside it and must not match.
  StopStringMatcher inside({"ab", "xabyz"});
  EXPECT_EQ(inside.PushUnmatched("cxaby"), "c");
  EXPECT_EQ(inside.Push("q"), "xabyq");
  EXPECT_FALSE(inside.stopped());
  EXPECT_EQ(inside.Push("ab"), "");
  EXPECT_TRUE(inside.stopped());
}

// include_stop_str_in_output: the text ends after the stop string, held text and all.
TEST(StopStringsTest, AnIncludedStopStringEndsTheText) {
  StopStringMatcher m({"END", "xy"}, /*include_stop=*/true);
  EXPECT_EQ(m.Push("abEN"), "ab");
  EXPECT_EQ(m.Push("Dxy"), "END");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopStringsTest, HeldTextComesOutAtFinish) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Push("xEN"), "x");
  EXPECT_EQ(m.Finish(), "EN");
}

TEST(StopStringsTest, EarliestOccurrenceOfAnyStopWins) {
  StopStringMatcher m({"world", "lo"});
  EXPECT_EQ(Feed(m, {"hello world"}), "hel");
  StopStringMatcher overlapping({"bcd", "abcde"});
  EXPECT_EQ(Feed(overlapping, {"xab", "cdef"}), "x");
}

TEST(StopStringsTest, MatchedNamesTheEarliestStopFirstListedOnTies) {
  StopStringMatcher none({"x"});
  EXPECT_EQ(none.matched(), "");
  StopStringMatcher later({"cd", "b"});
  EXPECT_EQ(Feed(later, {"a", "bcd"}), "a");
  EXPECT_EQ(later.matched(), "b");
  StopStringMatcher tie({"bc", "b"});
  EXPECT_EQ(Feed(tie, {"abcd"}), "a");
  EXPECT_EQ(tie.matched(), "bc");
}

TEST(StopStringsTest, Utf8StopStrings) {
  StopStringMatcher m({"\xe2\x98\x83"});  // U+2603
  EXPECT_EQ(Feed(m, {"a\xc3\xa9", "\xe2\x98",
                     "\x83"
                     "b"}),
            "a\xc3\xa9");
}

TEST(StopStringsTest, EmptyStopStringsAreIgnored) {
  StopStringMatcher m({""});
  EXPECT_EQ(Feed(m, {"abc"}), "abc");
}

TEST(StopStringsTest, EveryByteSplitGivesTheSameResult) {
  const std::string text = "one two three four";
  for (const std::vector<std::string>& stops :
       std::vector<std::vector<std::string>>{{"three"}, {"o t", "xx"}, {"four", "r f"}, {"zzz"}}) {
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    const std::string expected = text.substr(0, first);
    for (size_t step = 1; step <= text.size(); ++step) {
      StopStringMatcher m(stops);
      std::vector<std::string> pieces;
      for (size_t i = 0; i < text.size(); i += step) pieces.push_back(text.substr(i, step));
      EXPECT_EQ(Feed(m, pieces), expected) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace latent::server
