#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"

namespace latent::server {
namespace {

// Feeds `pieces` one by one and returns the concatenated result, Finish() included; `steps` gets
// each Push's delta.
ParsedDelta Feed(OutputParser& parser, const std::vector<std::string>& pieces,
                 std::vector<ParsedDelta>* steps = nullptr) {
  ParsedDelta all;
  for (const std::string& piece : pieces) {
    const ParsedDelta d = parser.Push(piece);
    if (steps) steps->push_back(d);
    all.Append(d);
  }
  all.Append(parser.Finish());
  return all;
}

ParsedDelta Whole(ThinkStart start, const std::string& text) {
  ThinkParser parser(start);
  return Feed(parser, {text});
}

TEST(ReasoningParserTest, SplitsThinkBlockFromAnswer) {
  const ParsedDelta d = Whole(ThinkStart::kMayOpen, "<think>step 1</think>The answer.");
  EXPECT_EQ(d.reasoning, "step 1");
  EXPECT_EQ(d.content, "The answer.");
}

TEST(ReasoningParserTest, LeadingWhitespaceBeforeOpenIsDropped) {
  // GLM-4.5 writes "\n<think>" after its assistant tag.
  const ParsedDelta d = Whole(ThinkStart::kMayOpen, "\n<think>why</think>\nok");
  EXPECT_EQ(d.reasoning, "why");
  EXPECT_EQ(d.content, "\nok");
}

TEST(ReasoningParserTest, StartsInReasoningWithoutOpenMarker) {
  const ParsedDelta d = Whole(ThinkStart::kReasoning, "thinking\n</think>answer");
  EXPECT_EQ(d.reasoning, "thinking\n");
  EXPECT_EQ(d.content, "answer");
  // A repeated <think> at the start is dropped too (vLLM's deepseek_r1).
  const ParsedDelta again = Whole(ThinkStart::kReasoning, "<think>x</think>y");
  EXPECT_EQ(again.reasoning, "x");
  EXPECT_EQ(again.content, "y");
}

TEST(ReasoningParserTest, UnclosedReasoningIsAllReasoning) {
  const ParsedDelta d = Whole(ThinkStart::kReasoning, "still thinking </thi");
  EXPECT_EQ(d.reasoning, "still thinking </thi");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParserTest, WithoutMarkersOutsideReasoningAllIsContent) {
  EXPECT_EQ(Whole(ThinkStart::kMayOpen, "plain answer").content, "plain answer");
  EXPECT_EQ(Whole(ThinkStart::kMayOpen, "plain answer").reasoning, "");
  // A close marker with no reasoning open is text; so is a <think> that is not at the start.
  EXPECT_EQ(Whole(ThinkStart::kMayOpen, "a</think>b").content, "a</think>b");
  EXPECT_EQ(Whole(ThinkStart::kMayOpen, "a<think>b</think>c").content, "a<think>b</think>c");
  // Only whitespace, or a partial "<think>" at the very end of a short output.
  EXPECT_EQ(Whole(ThinkStart::kMayOpen, " \n").content, " \n");
  EXPECT_EQ(Whole(ThinkStart::kMayOpen, "<thi").content, "<thi");
}

TEST(ReasoningParserTest, OnlyTheFirstCloseEndsReasoning) {
  const ParsedDelta d = Whole(ThinkStart::kReasoning, "a</think>b</think>c");
  EXPECT_EQ(d.reasoning, "a");
  EXPECT_EQ(d.content, "b</think>c");
}

TEST(ReasoningParserTest, PartialMarkerIsHeldBackUntilDecided) {
  ThinkParser parser(ThinkStart::kReasoning);
  std::vector<ParsedDelta> steps;
  const ParsedDelta all = Feed(parser, {"abc<", "/thi", "nk", ">", "done"}, &steps);
  EXPECT_EQ(steps[0].reasoning, "abc");  // "<" held: it may start </think>.
  EXPECT_TRUE(steps[1].empty());
  EXPECT_TRUE(steps[2].empty());
  EXPECT_TRUE(steps[3].empty());
  EXPECT_EQ(steps[4].content, "done");
  EXPECT_EQ(all.reasoning, "abc");
  EXPECT_EQ(all.content, "done");
}

TEST(ReasoningParserTest, FalsePartialMarkerIsReleased) {
  ThinkParser parser(ThinkStart::kReasoning);
  std::vector<ParsedDelta> steps;
  const ParsedDelta all = Feed(parser, {"a</th", "x"}, &steps);
  EXPECT_EQ(steps[0].reasoning, "a");
  EXPECT_EQ(steps[1].reasoning, "</thx");
  EXPECT_EQ(all.reasoning, "a</thx");
}

TEST(ReasoningParserTest, EverySplitGivesTheWholeResult) {
  // Any cut of the output into three pieces (markers split anywhere) gives what the whole gives,
  // and never a content delta before the reasoning has closed.
  const std::vector<std::pair<ThinkStart, std::string>> cases = {
      {ThinkStart::kMayOpen, " <think>r1 <b></think> c1 </think>"},
      {ThinkStart::kReasoning, "r</thinx</think>c"},
      {ThinkStart::kReasoning, "<think>r</think>"},
      {ThinkStart::kMayOpen, "<thinking>no</think>"},
      {ThinkStart::kContent, "<think>r</think>c"},
  };
  for (const auto& [starts, text] : cases) {
    const ParsedDelta whole = Whole(starts, text);
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t j = i; j <= text.size(); ++j) {
        ThinkParser parser(starts);
        std::vector<ParsedDelta> steps;
        const ParsedDelta got =
            Feed(parser, {text.substr(0, i), text.substr(i, j - i), text.substr(j)}, &steps);
        EXPECT_EQ(got.reasoning, whole.reasoning) << text << " cut at " << i << ", " << j;
        EXPECT_EQ(got.content, whole.content) << text << " cut at " << i << ", " << j;
      }
    }
  }
}

TEST(ReasoningParserTest, ResolveNamesAndAuto) {
  EXPECT_EQ(ResolveReasoningParser("auto", true), "think");
  EXPECT_EQ(ResolveReasoningParser("auto", false), "");
  EXPECT_EQ(ResolveReasoningParser("none", true), "");
  EXPECT_EQ(ResolveReasoningParser("deepseek_r1", false), "deepseek_r1");
  EXPECT_EQ(ResolveReasoningParser("glm45", false), "glm45");
  EXPECT_EQ(ResolveReasoningParser("kimi_k2", false), "kimi_k2");
  EXPECT_THROW(ResolveReasoningParser("qwen3", true), Error);
}

TEST(ReasoningParserTest, StartFollowsTheRenderedPrompt) {
  // DeepSeek V3.1 with thinking ends the prompt in <think>: the output starts in reasoning.
  auto v31 = MakeReasoningParser("think", "<｜User｜>hi<｜Assistant｜><think>");
  EXPECT_EQ(Feed(*v31, {"r</think>c"}).reasoning, "r");
  // Without thinking it ends in </think>: all content (the marker was in the prompt).
  auto plain = MakeReasoningParser("think", "<｜User｜>hi<｜Assistant｜></think>");
  EXPECT_EQ(Feed(*plain, {"r</think>c"}).content, "r</think>c");
  // GLM-4.5 with enable_thinking=false closes an empty block: even a <think> is then content.
  auto closed = MakeReasoningParser("think", "<|assistant|>\n<think></think>");
  EXPECT_EQ(Feed(*closed, {"<think>r</think>c"}).content, "<think>r</think>c");
  // GLM-4.5 thinking: the prompt ends in the assistant tag and the model opens the block.
  auto glm = MakeReasoningParser("glm45", "<|assistant|>");
  const ParsedDelta opened = Feed(*glm, {"\n<thi", "nk>r</think>c"});
  EXPECT_EQ(opened.reasoning, "r");
  EXPECT_EQ(opened.content, "c");
  // deepseek_r1 always starts in reasoning.
  auto r1 = MakeReasoningParser("deepseek_r1", "<｜Assistant｜>");
  EXPECT_EQ(Feed(*r1, {"r</think>c"}).reasoning, "r");
  EXPECT_EQ(MakeReasoningParser("", "x"), nullptr);
}

// Kimi K2 may start its tool calls inside an unclosed reasoning: the tool-call section's start
// ends the reasoning and stays for the tool parser (vLLM's kimi_k2), whichever spelling, however
// the marker is split; the reasoning starts without a <think> (vLLM's kimi_k2 starts inside it).
TEST(ReasoningParserTest, KimiToolSectionEndsTheReasoning) {
  const std::string prompt = "<|im_assistant|>assistant<|im_middle|>";
  EXPECT_EQ(ReasoningStart("kimi_k2", prompt), ThinkStart::kReasoning);
  for (const std::string marker :
       {"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"}) {
    const std::string calls = marker + "<|tool_call_begin|>functions.search:0<|tool_call_end|>";
    for (const std::string& text :
         {"<think>I should search." + calls, "I should search." + calls}) {
      for (size_t i = 0; i <= text.size(); ++i) {
        for (size_t j = i; j <= text.size(); j += 7) {
          std::vector<ParsedDelta> steps;
          const ParsedDelta got = Feed(*MakeReasoningParser("kimi_k2", prompt),
                                       {text.substr(0, i), text.substr(i, j - i), text.substr(j)},
                                       &steps);
          EXPECT_EQ(got.reasoning, "I should search.") << text << " cut at " << i << ", " << j;
          EXPECT_EQ(got.content, calls) << text << " cut at " << i << ", " << j;
        }
      }
    }
  }
  // An output that closes the reasoning it never opened: reasoning, then content.
  const ParsedDelta closed = Feed(*MakeReasoningParser("kimi_k2", prompt), {"r</think>c"});
  EXPECT_EQ(closed.reasoning, "r");
  EXPECT_EQ(closed.content, "c");
  // After </think> the marker is plain content; under "think" it never ends the reasoning.
  EXPECT_EQ(Feed(*MakeReasoningParser("kimi_k2", prompt),
                 {"r</think>a<|tool_calls_section_begin|>"}).content,
            "a<|tool_calls_section_begin|>");
  EXPECT_EQ(Feed(*MakeReasoningParser("think", prompt + "<think>"),
                 {"r<|tool_calls_section_begin|>x"}).reasoning,
            "r<|tool_calls_section_begin|>x");
  // A prompt that closed the reasoning (thinking off) leaves all to the content.
  EXPECT_EQ(ReasoningStart("kimi_k2", prompt + "<think></think>"), ThinkStart::kContent);
  // A partial marker is held back, then released as reasoning when it is not one.
  std::vector<ParsedDelta> steps;
  const ParsedDelta partial =
      Feed(*MakeReasoningParser("kimi_k2", prompt), {"a<|tool_ca", "t|>b"}, &steps);
  EXPECT_EQ(steps[0].reasoning, "a");
  EXPECT_EQ(partial.reasoning, "a<|tool_cat|>b");
  EXPECT_EQ(partial.content, "");
}

// vLLM's kimi_k2 reads chat_template_kwargs' "thinking" as Python's bool() (left out: on); off, it
// is its identity parser: all of the output is content, markers included, and the start is
// kContent, so a grammar applies from the first token. Only kimi_k2 reads it, and not
// "enable_thinking".
TEST(ReasoningParserTest, KimiThinkingOffIsAllContent) {
  using OrderedJson = nlohmann::ordered_json;
  const std::string prompt = "<|im_assistant|>assistant<|im_middle|>";
  const std::string text = " <think>r</think>c<|tool_calls_section_begin|>x";
  for (const char* off :
       {R"({"thinking": false})", R"({"thinking": null})", R"({"thinking": 0})",
        R"({"thinking": 0.0})", R"({"thinking": ""})", R"({"thinking": []})",
        R"({"thinking": {}})", R"({"enable_thinking": true, "thinking": false})"}) {
    const OrderedJson kwargs = OrderedJson::parse(off);
    EXPECT_EQ(ReasoningStart("kimi_k2", prompt, nullptr, &kwargs), ThinkStart::kContent) << off;
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      const ParsedDelta d = Feed(*MakeReasoningParser("kimi_k2", prompt, nullptr, &kwargs),
                                 {text.substr(0, cut), text.substr(cut)});
      EXPECT_EQ(d.reasoning, "") << off << " cut at " << cut;
      EXPECT_EQ(d.content, text) << off << " cut at " << cut;
    }
    // Over a continued message's own markers too: the identity parser reads none.
    const ContinuedMessage m{"assistant", "<think>Let me"};
    EXPECT_EQ(ReasoningStart("kimi_k2", prompt + m.text, &m, &kwargs), ThinkStart::kContent);
  }
  for (const char* on : {"null", "{}", R"({"thinking": true})", R"({"thinking": 1})",
                         R"({"thinking": "false"})", R"({"thinking": [0]})",
                         R"({"enable_thinking": false})"}) {
    const OrderedJson kwargs = OrderedJson::parse(on);
    EXPECT_EQ(ReasoningStart("kimi_k2", prompt, nullptr, &kwargs), ThinkStart::kReasoning) << on;
    EXPECT_EQ(Feed(*MakeReasoningParser("kimi_k2", prompt, nullptr, &kwargs), {"r</think>c"})
                  .reasoning,
              "r")
        << on;
  }
  const OrderedJson off = {{"thinking", false}};
  EXPECT_EQ(ReasoningStart("deepseek_r1", prompt, nullptr, &off), ThinkStart::kReasoning);
  EXPECT_EQ(ReasoningStart("think", prompt, nullptr, &off), ThinkStart::kMayOpen);
}

// continue_final_message: the output goes on with the final message, so only that message
// decides: its own last marker, else a marker the template wrote right before it, else content.
TEST(ReasoningParserTest, AContinuedMessageDecidesWhereTheOutputStarts) {
  auto start = [](const std::string& name, const std::string& prompt, const std::string& role,
                  const std::string& text, const std::vector<std::string>& pieces) {
    const ContinuedMessage m{role, text};
    return Feed(*MakeReasoningParser(name, prompt, &m), pieces);
  };
  // Qwen3's tail: the template's empty block, then the message's own open one.
  const std::string qwen = "<|im_start|>assistant\n<think>\n\n</think>\n\n<think>\nLet me";
  const ParsedDelta t =
      start("think", qwen, "assistant", "<think>\nLet me", {" see.</think>", "4"});
  EXPECT_EQ(t.reasoning, " see.");
  EXPECT_EQ(t.content, "4");
  // Not continued, the same prompt leaves the start to the output (it opens no block: content).
  EXPECT_EQ(Feed(*MakeReasoningParser("think", qwen), {" see.</think>4"}).content,
            " see.</think>4");
  // An answer after the template's empty block (Qwen3), or after the message's own closed block.
  EXPECT_EQ(start("think", "assistant\n<think>\n\n</think>\n\nThe answer", "assistant",
                  "The answer", {" is 4."}).content, " is 4.");
  EXPECT_EQ(start("deepseek_r1", "<｜Assistant｜><think>r</think>The answer is", "assistant",
                  "<think>r</think>The answer is", {" 4."}).content, " 4.");
  // A marker in the system prompt or the history says nothing about the continued message.
  const std::string kimi = "<|im_system|>Reason inside <think> tags<|im_end|><|im_assistant|>"
                           "assistant<|im_middle|>The answer";
  EXPECT_EQ(start("think", kimi, "assistant", "The answer", {" is <think>4"}).content,
            " is <think>4");
  // A template that opens the block right before the text: the text is reasoning.
  EXPECT_EQ(start("think", "<|assistant|><think>\nHmm", "assistant", "Hmm", {" so</think>4"})
                .reasoning, " so");
  // A user's text continued is content, whatever it says.
  EXPECT_EQ(start("deepseek_r1", "<｜User｜>Explain <think>", "user", "Explain <think>",
                  {" tags</think>"}).content, " tags</think>");
  // An empty message is a fresh reply: "deepseek_r1" in reasoning.
  EXPECT_EQ(start("deepseek_r1", "<｜Assistant｜>", "assistant", "", {"r</think>c"}).reasoning,
            "r");
}

// The start a grammar looks at (AfterReasoning unless kContent) is the parser's own.
TEST(ReasoningParserTest, ReasoningStartIsTheParsersStart) {
  EXPECT_EQ(ReasoningStart("", "<think>"), std::nullopt);
  EXPECT_EQ(ReasoningStart("deepseek_r1", "<｜Assistant｜>"), ThinkStart::kReasoning);
  // A prompt that closed the reasoning leaves none to the output, under deepseek_r1 too (Qwen3
  // with enable_thinking=false), as vLLM's is_reasoning_end on the prompt's ids.
  const std::string closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  EXPECT_EQ(ReasoningStart("deepseek_r1", closed), ThinkStart::kContent);
  EXPECT_EQ(Feed(*MakeReasoningParser("deepseek_r1", closed), {"4"}).content, "4");
  EXPECT_EQ(ReasoningStart("think", "<｜Assistant｜><think>\n"), ThinkStart::kReasoning);
  EXPECT_EQ(ReasoningStart("think", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            ThinkStart::kContent);
  EXPECT_EQ(ReasoningStart("glm45", "<|assistant|>"), ThinkStart::kMayOpen);
  ContinuedMessage m{"assistant", "<think>Let me"};
  EXPECT_EQ(ReasoningStart("think", "<|assistant|><think>Let me", &m), ThinkStart::kReasoning);
  m.text = "<think>x</think>The";
  EXPECT_EQ(ReasoningStart("deepseek_r1", "<|assistant|><think>x</think>The", &m),
            ThinkStart::kContent);
  EXPECT_EQ(ReasoningEndMarker(), "</think>");
}

}  // namespace
}  // namespace latent::server
