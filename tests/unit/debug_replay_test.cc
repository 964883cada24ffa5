#include "engine/debug_replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"

namespace latent::engine {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("latent_replay_" + name)).string();
  std::ofstream(path) << text;
  return path;
}

TEST(DebugReplayTest, ReadsAListOrAnIdsObject) {
  EXPECT_EQ(LoadDebugReplay(WriteFile("list.json", "[3, 1, 2]"), 10),
            (std::vector<int32_t>{3, 1, 2}));
  EXPECT_EQ(LoadDebugReplay(WriteFile("object.json", R"({"ids": [0, 9]})"), 10),
            (std::vector<int32_t>{0, 9}));
}

TEST(DebugReplayTest, RefusesBadFilesNamingTheProblem) {
  auto message = [](const std::string& name, const std::string& text) {
    try {
      LoadDebugReplay(WriteFile(name, text), 10);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("empty.json", "[]").find("empty"), std::string::npos);
  EXPECT_NE(message("range.json", "[1, 10]").find("entry 1"), std::string::npos);
  EXPECT_NE(message("neg.json", "[-1]").find("entry 0"), std::string::npos);
  EXPECT_NE(message("str.json", "[\"a\"]").find("entry 0"), std::string::npos);
  EXPECT_NE(message("obj.json", R"({"tokens": [1]})").find("\"ids\""), std::string::npos);
  EXPECT_NE(message("bad.json", "[1,").find("not valid JSON"), std::string::npos);
  EXPECT_THROW(LoadDebugReplay("/nonexistent/latent_replay.json", 10), Error);
}

TEST(DebugReplayTest, ReplaysByPositionWithLogprobs) {
  const std::vector<int32_t> ids = {2, 0};
  Sequence seq(0, 4);
  seq.tokens = {1, 1};
  seq.num_prompt = 2;
  const float logits[3] = {0.0f, 0.0f, std::log(2.0f)};  // p = 1/4, 1/4, 1/2
  SamplingParams params;
  params.top_logprobs = 1;
  SampledToken t = ReplayNext(ids, logits, 3, seq, params);
  EXPECT_EQ(t.token, 2);
  EXPECT_NEAR(t.logprob, std::log(0.5f), 1e-6);
  ASSERT_EQ(t.top_logprobs.size(), 1u);
  EXPECT_EQ(t.top_logprobs[0].token, 2);
  EXPECT_FALSE(ReplayDone(ids, seq));
  seq.tokens.push_back(2);
  EXPECT_EQ(ReplayNext(ids, logits, 3, seq, params).token, 0);
  seq.tokens.push_back(0);
  EXPECT_TRUE(ReplayDone(ids, seq));
}

}  // namespace
}  // namespace latent::engine
