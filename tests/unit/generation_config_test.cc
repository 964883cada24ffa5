// GenerationConfig: generation_config.json's EOS ids, and which of them is the primary one (the
// tokenizer's) whose end gives no stop_reason, the others ending a sample as stop ids (vLLM's
// update_from_generation_config).
#include "model/generation_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace latent::model {
namespace {

ModelConfig WithEos(std::vector<int64_t> eos) {
  ModelConfig c;
  c.vocab_size = 100;
  c.eos_token_ids = std::move(eos);
  return c;
}

class GenerationConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs each test in its own process, possibly at once.
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("latent_generation_config_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& json) { std::ofstream(dir_ / "generation_config.json") << json; }
  // What each front that reads the sampling fields throws for a file holding `json`
  // (LoadGenerationConfig, then LoadSamplingDefaults); a front that takes it adds a failure.
  std::vector<std::string> Refusals(const char* json) {
    Write(json);
    std::vector<std::string> refusals;
    for (int front = 0; front < 2; ++front) {
      try {
        if (front == 0) LoadGenerationConfig(dir_.string(), WithEos({}));
        if (front == 1) LoadSamplingDefaults(dir_.string());
        ADD_FAILURE() << json << " was taken";
      } catch (const Error& e) {
        refusals.push_back(e.what());
      }
    }
    return refusals;
  }

  std::filesystem::path dir_;
};

TEST_F(GenerationConfigTest, ThePrimaryEosIsTheTokenizers) {
  Write(R"({"eos_token_id": [7, 1, 9]})");
  GenerationConfig gen = LoadGenerationConfig(dir_.string(), WithEos({7, 1}));
  EXPECT_EQ(gen.eos_token_ids, (std::vector<int64_t>{7, 1, 9}));
  // No tokenizer, or one naming no EOS: no primary (not config.json's first), as vLLM's
  // request.eos_token_id is None then: every EOS id reports its id.
  EXPECT_EQ(gen.primary_eos_id, std::nullopt);
  SetTokenizerEos(gen, std::nullopt);
  EXPECT_EQ(gen.primary_eos_id, std::nullopt);
  EXPECT_TRUE(gen.IsExtraEos(7));
  EXPECT_TRUE(gen.IsExtraEos(1));
  SetTokenizerEos(gen, 1);
  EXPECT_EQ(gen.primary_eos_id, std::optional<int64_t>(1));
  EXPECT_FALSE(gen.IsExtraEos(1));
  EXPECT_TRUE(gen.IsExtraEos(7));
  EXPECT_TRUE(gen.IsExtraEos(9));
  EXPECT_FALSE(gen.IsExtraEos(3));  // not an EOS id at all
}

TEST_F(GenerationConfigTest, WithoutAPrimaryEosEveryEosIdIsExtra) {
  // No generation_config.json and no eos in config.json: no EOS, nothing extra.
  GenerationConfig gen = LoadGenerationConfig(dir_.string(), WithEos({}));
  EXPECT_EQ(gen.primary_eos_id, std::nullopt);
  EXPECT_FALSE(gen.IsExtraEos(0));
  // generation_config.json's ids with no primary one: each ends a sample as a stop id, as in vLLM
  // without a tokenizer eos.
  Write(R"({"eos_token_id": 4})");
  gen = LoadGenerationConfig(dir_.string(), WithEos({}));
  EXPECT_TRUE(gen.IsExtraEos(4));
}

TEST_F(GenerationConfigTest, TheTokenizersEosEndsASampleThoughUnlisted) {
  // Kimi K2: the tokenizer ends on [EOS], generation_config.json lists another id; both end it.
  Write(R"({"eos_token_id": 9})");
  GenerationConfig gen = LoadGenerationConfig(dir_.string(), WithEos({9}));
  EXPECT_EQ(gen.EndIds(100), (std::vector<int32_t>{9}));
  SetTokenizerEos(gen, 3);
  EXPECT_EQ(gen.EndIds(100), (std::vector<int32_t>{9, 3}));
  EXPECT_FALSE(gen.IsExtraEos(3));
  EXPECT_TRUE(gen.IsExtraEos(9));
  SetTokenizerEos(gen, 9);  // listed: once
  EXPECT_EQ(gen.EndIds(100), (std::vector<int32_t>{9}));
  SetTokenizerEos(gen, 120);  // outside the model's vocabulary: draws never reach it
  EXPECT_EQ(gen.EndIds(100), (std::vector<int32_t>{9}));
}

TEST_F(GenerationConfigTest, AFileWithoutEosTokenIdHasNone) {
  // vLLM (transformers' GenerationConfig.from_pretrained) reads only generation_config.json when
  // it exists: config.json's ids no longer count, the tokenizer's EOS alone ends a sample.
  for (const char* json : {R"({"do_sample": false})", R"({"eos_token_id": null})"}) {
    Write(json);
    const GenerationConfig gen = LoadGenerationConfig(dir_.string(), WithEos({7, 1}));
    EXPECT_TRUE(gen.eos_token_ids.empty()) << json;
  }
  // Without the file, config.json's (vLLM's GenerationConfig.from_model_config).
  std::filesystem::remove(dir_ / "generation_config.json");
  EXPECT_EQ(LoadGenerationConfig(dir_.string(), WithEos({7, 1})).eos_token_ids,
            (std::vector<int64_t>{7, 1}));
}

// The sampling fields every front takes as its defaults (vLLM's get_diff_sampling_param).
TEST_F(GenerationConfigTest, SamplingFieldsAreReadAsVllmNamesThem) {
  Write(R"({"temperature": 0.6, "top_p": 0.95, "top_k": 16.0, "min_p": null,
            "repetition_penalty": 1, "max_new_tokens": 64, "eos_token_id": 1})");
  const SamplingDefaults s = LoadGenerationConfig(dir_.string(), WithEos({})).sampling;
  EXPECT_EQ(s.temperature, 0.6);
  EXPECT_EQ(s.top_p, 0.95);
  EXPECT_EQ(s.top_k, 16);             // 16.0: an integer, as Python writes some
  EXPECT_FALSE(s.min_p.has_value());  // null: unset
  EXPECT_EQ(s.repetition_penalty, 1.0);
  EXPECT_EQ(s.max_new_tokens, 64);
  EXPECT_EQ(s.AsFields().dump(),
            R"({"max_tokens":64,"repetition_penalty":1.0,"temperature":0.6,"top_k":16,)"
            R"("top_p":0.95})");
  // The same without the model's config, for a front that reads them before the model.
  EXPECT_EQ(LoadSamplingDefaults(dir_.string()).AsFields(), s.AsFields());
  std::filesystem::remove(dir_ / "generation_config.json");
  EXPECT_TRUE(LoadSamplingDefaults(dir_.string()).AsFields().empty());
}

TEST_F(GenerationConfigTest, AMistypedSamplingFieldIsNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": "0.6"})", "temperature must be a number, got \"0.6\""},
      {R"({"top_p": true})", "top_p must be a number, got true"},
      {R"({"top_k": 1.5})", "top_k must be an integer, got 1.5"},
      {R"({"max_new_tokens": 18446744073709551615})",
       "max_new_tokens is out of range: 18446744073709551615"},
      {R"({"top_k": -1e30})", "top_k is out of range"},
  };
  for (const auto& [json, message] : cases) {
    for (const std::string& refusal : Refusals(json)) {
      EXPECT_NE(refusal.find("generation_config.json: "), std::string::npos);
      EXPECT_NE(refusal.find(message), std::string::npos) << refusal;
    }
  }
}

// One range check for every front (SamplingDefaults::Check): the server refused max_new_tokens 0
// that request lines and LLM took (every default request then made no token), and request lines
// refused the top_k -1 (off) that the other two took.
TEST_F(GenerationConfigTest, SamplingFieldsOutOfRangeAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"max_new_tokens": 0})", "max_new_tokens must be at least 1, got 0"},
      {R"({"temperature": -0.5})", "temperature must be >= 0, got -0.5"},
      {R"({"temperature": 1e39})", "temperature is 1e+39, outside the range of a 32-bit float"},
      {R"({"min_p": 1e-50})", "min_p is 1e-50, outside the range of a 32-bit float"},
      {R"({"top_p": 0})", "top_p must be in (0, 1], got 0"},
      {R"({"top_p": 1.5})", "top_p must be in (0, 1], got 1.5"},
      {R"({"min_p": 2})", "min_p must be in [0, 1], got 2"},
      {R"({"repetition_penalty": 0})", "repetition_penalty must be in [0.01, 100], got 0"},
      {R"({"top_k": -2})", "top_k must be -1 (off), 0 (off) or positive, got -2"},
  };
  for (const auto& [json, message] : cases) {
    for (const std::string& refusal : Refusals(json)) {
      EXPECT_NE(refusal.find("generation_config.json: " + std::string(message)), std::string::npos)
          << refusal;
    }
  }
}

// What Check lets through, every front takes as it is: top_k -1 (vLLM's off) as 0, and one past
// int32 as int32's most, which request lines and SamplingParams hold.
TEST_F(GenerationConfigTest, TopKIsGivenAsEveryFrontTakesIt) {
  Write(R"({"top_k": -1, "max_new_tokens": 1, "temperature": 0, "min_p": 0})");
  EXPECT_EQ(LoadSamplingDefaults(dir_.string()).AsFields().dump(),
            R"({"max_tokens":1,"min_p":0.0,"temperature":0.0,"top_k":0})");
  Write(R"({"top_k": 4294967297})");
  EXPECT_EQ(LoadSamplingDefaults(dir_.string()).top_k, 2147483647);
  EXPECT_EQ(LoadGenerationConfig(dir_.string(), WithEos({})).sampling.top_k, 2147483647);
}

}  // namespace
}  // namespace latent::model
