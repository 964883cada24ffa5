#include "server/openai_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "server/metrics.h"

namespace latent::server {
namespace {

ServingLimits Limits() {
  ServingLimits l;
  l.model_name = "tiny";
  l.context_tokens = 512;
  l.cache_tokens = 256;
  l.vocab_size = 1000;
  return l;
}

GenerationRequest Parse(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  return ParseGenerationRequest(body, e, Limits());
}

// The ApiError `body` raises: status and param.
std::pair<int, std::string> Refusal(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  try {
    Parse(body, e);
  } catch (const ApiError& err) {
    return {err.status(), err.param()};
  }
  return {0, ""};
}

TEST(OpenAiSchemaTest, CompletionDefaults) {
  const GenerationRequest r = Parse(R"({"prompt": "hi"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_text);
  EXPECT_EQ(r.prompts[0].text, "hi");
  EXPECT_EQ(r.model, "tiny");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's default, not greedy.
  EXPECT_EQ(r.sampling.n, 1);
  EXPECT_EQ(r.sampling.top_logprobs, -1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(MakeEngineRequest(r, {1, 2, 3}, Limits()).max_tokens, 16);
}

TEST(OpenAiSchemaTest, PromptForms) {
  EXPECT_EQ(Parse(R"({"prompt": ["a", "b"]})").prompts.size(), 2u);
  const GenerationRequest ids = Parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  const GenerationRequest lists = Parse(R"({"prompt": [[1], [2, 3]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1].ids, (std::vector<int32_t>{2, 3}));
}

TEST(OpenAiSchemaTest, SamplingFields) {
  const GenerationRequest r = Parse(
      R"({"prompt": "x", "temperature": 0.25, "top_p": 0.5, "top_k": -1, "min_p": 0.2, "seed": -3,
          "n": 2, "logprobs": 4, "presence_penalty": 1, "frequency_penalty": -1,
          "repetition_penalty": 1.2, "stop": "\n", "max_tokens": 7.0, "ignore_eos": true})");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.25f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(*r.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 4);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_TRUE(r.ignore_eos);
}

// The message of the ApiError `body` raises.
std::string RefusalMessage(const std::string& body) {
  try {
    Parse(body);
  } catch (const ApiError& err) {
    return err.message();
  }
  return "";
}

// vLLM's SamplingParams maps seed -1 to None: no seed, an unseeded draw (not the seed 2^64 - 1).
// Other negative seeds are their bits, as before.
TEST(OpenAiSchemaTest, SeedMinusOneIsNoSeed) {
  EXPECT_FALSE(Parse(R"({"prompt": "x", "seed": -1})").sampling.seed.has_value());
  EXPECT_EQ(Parse(R"({"prompt": "x", "seed": -2})").sampling.seed,
            std::optional<uint64_t>(static_cast<uint64_t>(-2)));
  EXPECT_EQ(Parse(R"({"prompt": "x", "seed": 18446744073709551615})").sampling.seed,
            std::optional<uint64_t>(std::numeric_limits<uint64_t>::max()));
}

// vLLM's _verify_greedy_sampling: n > 1 with temperature 0 is refused, in its words; also when
// the temperature 0 is generation_config's default.
TEST(OpenAiSchemaTest, SeveralGreedySamplesAreRefused) {
  EXPECT_EQ(Refusal(R"({"prompt": "x", "temperature": 0, "n": 2})"),
            std::make_pair(400, std::string("n")));
  EXPECT_EQ(RefusalMessage(R"({"prompt": "x", "temperature": 0, "n": 2})"),
            "n must be 1 when using greedy sampling, got 2.");
  ServingLimits greedy = Limits();
  greedy.sampling_defaults = {{"temperature", 0.0}};
  EXPECT_THROW(ParseGenerationRequest(R"({"prompt": "x", "n": 3})", Endpoint::kCompletions, greedy),
               ApiError);
  EXPECT_EQ(Parse(R"({"prompt": "x", "temperature": 0.5, "n": 2})").sampling.n, 2);
}

// The float fields are checked on the request's doubles, and the message shows the value as it
// was sent (1.0000000001, not an ostream's "1").
TEST(OpenAiSchemaTest, FloatFieldsAreCheckedOnTheirDoubles) {
  EXPECT_EQ(RefusalMessage(R"({"prompt": "x", "top_p": 1.0000000001})"),
            "'top_p' must be in (0, 1], got 1.0000000001");
  EXPECT_EQ(RefusalMessage(R"({"prompt": "x", "repetition_penalty": 100.000001})"),
            "'repetition_penalty' must be in [0.01, 100], got 100.000001");
  EXPECT_EQ(RefusalMessage(R"({"prompt": "x", "presence_penalty": 2.00000001})"),
            "'presence_penalty' must be in [-2, 2], got 2.00000001");
  EXPECT_EQ(RefusalMessage(R"({"prompt": "x", "temperature": 1e300})"),
            "'temperature' is 1e+300, outside the range of a 32-bit float");
  EXPECT_EQ(Refusal(R"({"prompt": "x", "temperature": true})"),
            std::make_pair(400, std::string("temperature")));
}

// OpenAI's logit_bias (token ids as string keys) and vLLM's allowed_token_ids reach the engine's
// SamplingParams; every bad form is a 400 naming the field.
TEST(OpenAiSchemaTest, LogitBiasAndAllowedTokenIds) {
  const GenerationRequest r = Parse(
      R"({"prompt": "x", "logit_bias": {"5": 100, "999": -100, "0": 2.5},
          "allowed_token_ids": [7, 5]})");
  EXPECT_EQ(r.sampling.logit_bias,
            (std::map<int32_t, float>{{0, 2.5f}, {5, 100.0f}, {999, -100.0f}}));
  EXPECT_EQ(r.sampling.allowed_token_ids, (std::vector<int32_t>{7, 5}));
  EXPECT_EQ(MakeEngineRequest(r, {1}, Limits()).sampling.logit_bias.size(), 3u);
  EXPECT_TRUE(Parse(R"({"prompt": "x", "logit_bias": {}})").sampling.logit_bias.empty());
  EXPECT_FALSE(Parse(R"({"prompt": "x"})").sampling.allowed_token_ids.has_value());
  for (const char* bad : {R"({"a": 1})", R"({"1.0": 1})", R"({"": 1})", R"({"1000": 1})",
                          R"({"-1": 1})", R"({"99999999999999999999": 1})", R"({"1": 100.01})",
                          R"({"1": -101})", R"({"1": "2"})", R"({"1": true})", "[]", "3",
                          // one id, one key: "05" would be a second key for id 5
                          R"({"05": 1})", R"({"-0": 1})", R"({"00": 1})", R"({"+5": 1})",
                          R"({"1": 100.0000001})"}) {
    EXPECT_EQ(Refusal(std::string(R"({"prompt": "x", "logit_bias": )") + bad + "}"),
              std::make_pair(400, std::string("logit_bias")))
        << bad;
  }
  for (const char* bad : {"[]", "[1000]", "[-1]", R"(["1"])", "[1.5]", "5", "{}"}) {
    EXPECT_EQ(Refusal(std::string(R"({"prompt": "x", "allowed_token_ids": )") + bad + "}"),
              std::make_pair(400, std::string("allowed_token_ids")))
        << bad;
  }
}

TEST(OpenAiSchemaTest, ChatFields) {
  const GenerationRequest r = Parse(
      R"({"messages": [{"role": "developer", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 5, "max_tokens": 9, "logprobs": true, "top_logprobs": 2,
          "stream": true, "stream_options": {"include_usage": true}})",
      Endpoint::kChatCompletions);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(*r.max_tokens, 5);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_TRUE(r.include_usage);
  // The chat default is the rest of the room (min of context and cache).
  GenerationRequest open =
      Parse(R"({"messages": [{"role": "user", "content": "x"}]})", Endpoint::kChatCompletions);
  EXPECT_EQ(MakeEngineRequest(open, std::vector<int32_t>(56, 1), Limits()).max_tokens, 200);
}

// generation_config.json's sampling fields fill those a request leaves out or null, as vLLM's
// default_sampling_params; its max_tokens caps a chat completion's default only.
TEST(OpenAiSchemaTest, SamplingDefaultsFillTheFieldsARequestLeavesOut) {
  ServingLimits limits = Limits();
  limits.sampling_defaults = Json::parse(R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20,
      "min_p": 0.05, "repetition_penalty": 1.1, "max_tokens": 7})");
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}])";
  const GenerationRequest omitted =
      ParseGenerationRequest(chat + "}", Endpoint::kChatCompletions, limits);
  EXPECT_FLOAT_EQ(omitted.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(omitted.sampling.top_p, 0.9f);
  EXPECT_EQ(omitted.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(omitted.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(omitted.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(MakeEngineRequest(omitted, {1, 2}, limits).max_tokens, 7);
  // Near the end of the room, the room wins (vLLM's get_max_tokens takes the smallest).
  EXPECT_EQ(MakeEngineRequest(omitted, std::vector<int32_t>(252, 1), limits).max_tokens, 4);
  const GenerationRequest given =
      ParseGenerationRequest(chat + R"(, "temperature": 0, "top_k": null, "max_tokens": 30})",
                             Endpoint::kChatCompletions, limits);
  EXPECT_EQ(given.sampling.temperature, 0.0f);
  EXPECT_EQ(given.sampling.top_k, 20);  // null: the default, as an absent field
  EXPECT_EQ(MakeEngineRequest(given, {1, 2}, limits).max_tokens, 30);
  // A completion's max_tokens default stays 16, as vLLM's CompletionRequest's.
  const GenerationRequest completion =
      ParseGenerationRequest(R"({"prompt": "x"})", Endpoint::kCompletions, limits);
  EXPECT_FLOAT_EQ(completion.sampling.temperature, 0.6f);
  EXPECT_EQ(MakeEngineRequest(completion, {1, 2}, limits).max_tokens, 16);
  // "max_tokens": null is vLLM's None: the file's max_new_tokens, else the room left.
  const GenerationRequest null_completion = ParseGenerationRequest(
      R"({"prompt": "x", "max_tokens": null})", Endpoint::kCompletions, limits);
  EXPECT_EQ(MakeEngineRequest(null_completion, {1, 2}, limits).max_tokens, 7);
  EXPECT_EQ(MakeEngineRequest(null_completion, {1, 2}, Limits()).max_tokens, 254);
  // Without defaults, OpenAI's.
  EXPECT_EQ(Parse(chat + "}", Endpoint::kChatCompletions).sampling.temperature, 1.0f);
}

// The one rule the server and request lines fill sampling defaults by: each field the request
// leaves out or sends null, never max_tokens, for either JSON type (request lines keep key order).
TEST(OpenAiSchemaTest, SamplingDefaultsLeftOutAreTheAbsentAndNullFieldsButMaxTokens) {
  const std::string defaults = R"({"temperature": 0.6, "top_k": 20, "min_p": 0.05,
      "max_tokens": 7})";
  const std::string request = R"({"temperature": 0, "top_k": null, "prompt": "x"})";
  EXPECT_EQ(SamplingDefaultsLeftOut(Json::parse(defaults), Json::parse(request)),
            Json::parse(R"({"top_k": 20, "min_p": 0.05})"));
  const OrderedJson left_out =
      SamplingDefaultsLeftOut(OrderedJson::parse(defaults), OrderedJson::parse(request));
  EXPECT_EQ(left_out.dump(), R"({"top_k":20,"min_p":0.05})");
  EXPECT_TRUE(SamplingDefaultsLeftOut(Json::parse(defaults),
                                      Json::parse(R"({"temperature": 1, "top_k": 5,
                                          "min_p": 0, "max_tokens": null})"))
                  .empty());
}

// The fields whose key order matters (messages, tools, chat_template_kwargs, a response_format or
// structured_outputs schema) are parsed again keeping it, and only they: nlohmann's ordered_json
// inserts each key by a linear scan, so a body re-parsed whole with a 60k-key object beside them
// took 12 s. What is checked is what makes it linear, that the re-parse builds only the members
// it is asked for (a time bound failed under ASan on a loaded machine: no timing in tests). Their
// own keys keep their order, however deep.
TEST(OpenAiSchemaTest, OrderedFieldsAreParsedWithoutTheRestOfTheBody) {
  std::string big = R"("ignored": {)";
  for (int i = 0; i < 2000; ++i) big += StrCat(i ? ", " : "", "\"key", i, "\": {\"v\": ", i, "}");
  big += "}";
  const std::string schema =
      R"({"type": "object", "properties": {"z": {}, "a": {"y": 1, "b": 2}}})";
  const std::string structured =
      StrCat(R"({"prompt": "hi", )", big, R"(, "structured_outputs": {"json": )", schema, "}}");
  const OrderedJson kept = ParseOrdered(structured, {"structured_outputs", "messages"});
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept.begin().key(), "structured_outputs");
  EXPECT_EQ(kept["structured_outputs"]["json"].dump(),
            R"({"type":"object","properties":{"z":{},"a":{"y":1,"b":2}}})");
  EXPECT_TRUE(ParseOrdered(structured, {"tools"}).empty());

  const auto check = [](const structured::OutputSpec& output) {
    EXPECT_EQ(output.kind, structured::OutputSpec::Kind::kJsonSchema);
    EXPECT_EQ(output.schema.dump(), R"({"type":"object","properties":{"z":{},"a":{"y":1,"b":2}}})");
  };
  check(Parse(structured).output);
  check(Parse(StrCat(R"({"prompt": "hi", )", big,
                     R"(, "response_format": {"type": "json_schema", "json_schema": )",
                     R"({"name": "x", "schema": )", schema, "}}}"))
            .output);
  const GenerationRequest r =
      Parse(StrCat(R"({"messages": [{"role": "user", "name": "n", "content": "x"}], )", big,
                   R"(, "chat_template_kwargs": {"z": 1, "a": 2}, "tools": )",
                   R"([{"type": "function", "function": {"name": "f", )", R"("parameters": )",
                   schema, "}}]}"),
            Endpoint::kChatCompletions);
  EXPECT_EQ(r.messages.dump(), R"([{"role":"user","name":"n","content":"x"}])");
  EXPECT_EQ(r.chat_template_kwargs.dump(), R"({"z":1,"a":2})");
  EXPECT_EQ(r.tools[0]["function"]["parameters"].dump(),
            R"({"type":"object","properties":{"z":{},"a":{"y":1,"b":2}}})");
}

// A chat's messages, tools and template kwargs reach the template with their integers exact: one
// past the 64-bit range is a 400 naming its place, not a float. The body's other integers parse
// as before (a seed of 2^64 - 1 is good).
TEST(OpenAiSchemaTest, ChatIntegersPastSixtyFourBitsAreRefused) {
  const std::string head = R"({"messages": [{"role": "user", "content": "x", "n": )";
  EXPECT_EQ(Refusal(head + "-9223372036854775809}]}", Endpoint::kChatCompletions),
            std::make_pair(400, std::string("messages[0].n")));
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs":)"
                    R"( {"k": [18446744073709551616]}})",
                    Endpoint::kChatCompletions),
            std::make_pair(400, std::string("chat_template_kwargs.k[0]")));
  try {
    ParseTokenizeRequest(head + "9223372036854775808}]}", Limits());
    ADD_FAILURE() << "taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "messages[0].n");
    EXPECT_EQ(e.message(),
              "integer 9223372036854775808 at messages[0].n is too large (64-bit limit)");
  }
  const GenerationRequest r =
      Parse(head + R"(-9223372036854775808}], "seed": 18446744073709551615})",
            Endpoint::kChatCompletions);
  EXPECT_EQ(r.messages[0]["n"].get<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*r.sampling.seed, 18446744073709551615u);
}

// The kept members are built as nlohmann's own parser builds them (a repeated key keeps its first
// place and takes the last value), however they nest, and whatever the dropped members hold. The
// builder is linear: a long list of objects and a wide object, each quadratic in nlohmann's
// builders (a 300 KB list took 6 s), are here only to be built right (no timing in tests).
TEST(OpenAiSchemaTest, OrderedFieldsAreBuiltAsNlohmannBuildsThem) {
  std::string list = "[";
  for (int i = 0; i < 20000; ++i) list += i ? ", {}" : "{}";
  list += "]";
  std::string wide = "{";
  for (int i = 0; i < 4000; ++i) wide += StrCat(i ? ", " : "", "\"k", 3999 - i, "\": ", i);
  wide += "}";
  const std::string kept_members =
      StrCat(R"("messages": [{"z": [1, [2, {"y": null}], "s"], "a": {"b": {}, "c": []}}, 1.5,)",
             R"( -7, 18446744073709551615, true, "t"], "tools": {"d": 1, "e": [{"f": 2}], "d": )",
             R"({"g": [3]}, "h": {}}, "list": )", list, R"(, "wide": )", wide);
  const std::string dropped_members =
      StrCat(R"("n": 1, "o": [[{"p": [1, {"q": {}}]}], 2], "r": {"s": {"t": [[]]}, "u": "v"},)",
             R"( "w": null, "x": [], "y": {}, "big": )", list);
  for (const std::string& text :
       {StrCat("{", kept_members, ", ", dropped_members, "}"),
        StrCat("{", dropped_members, ", ", kept_members, "}")}) {
    OrderedJson expected = OrderedJson::parse(text);
    for (const char* dropped : {"n", "o", "r", "w", "x", "y", "big"}) expected.erase(dropped);
    const OrderedJson kept = ParseOrdered(text, {"messages", "tools", "list", "wide", "absent"});
    EXPECT_EQ(kept.dump(), expected.dump());
    EXPECT_EQ(kept["tools"].dump(), R"({"d":{"g":[3]},"e":[{"f":2}],"h":{}})");
    EXPECT_EQ(kept["wide"].begin().key(), "k3999");
    EXPECT_EQ(kept["list"].size(), 20000u);
  }
  EXPECT_TRUE(ParseOrdered(R"({"a": {"b": [1]}, "c": 2})", {}).empty());
  EXPECT_EQ(ParseOrdered(R"({"a": {"b": [1]}, "c": 2})", {"c"}).dump(), R"({"c":2})");
}

TEST(OpenAiSchemaTest, RefusalsNameTheField) {
  EXPECT_EQ(Refusal("{"), std::make_pair(400, std::string()));
  EXPECT_EQ(Refusal("[1]"), std::make_pair(400, std::string()));
  EXPECT_EQ(Refusal(R"({})"), std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(Refusal(R"({"prompt": ""})"), std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(Refusal(R"({"prompt": [1000]})"), std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "model": "other"})"),
            std::make_pair(404, std::string("model")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "max_tokens": 0})"),
            std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "temperature": -1})"),
            std::make_pair(400, std::string("temperature")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "top_p": 0})"), std::make_pair(400, std::string("top_p")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "top_p": 1.01})"),
            std::make_pair(400, std::string("top_p")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "n": 129})"), std::make_pair(400, std::string("n")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "stream": 1})"), std::make_pair(400, std::string("stream")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "stream_options": {}})"),
            std::make_pair(400, std::string("stream_options")));
  // 9 prompts x 128 samples: more choices than the cap (1024).
  EXPECT_EQ(Refusal(R"({"prompt": ["a", "a", "a", "a", "a", "a", "a", "a", "a"], "n": 128})"),
            std::make_pair(400, std::string("n")));
  EXPECT_EQ(Refusal(R"({"messages": []})", Endpoint::kChatCompletions),
            std::make_pair(400, std::string("messages")));
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 1})",
                    Endpoint::kChatCompletions),
            std::make_pair(400, std::string("top_logprobs")));
  EXPECT_EQ(Refusal("{\"prompt\": " + std::string(100, '[') + std::string(100, ']') + "}").first,
            400);
}

TEST(OpenAiSchemaTest, ContextAndCacheLimits) {
  const GenerationRequest r = Parse(R"({"prompt": "x", "max_tokens": 100})");
  EXPECT_EQ(MakeEngineRequest(r, std::vector<int32_t>(156, 1), Limits()).max_tokens, 100);
  EXPECT_THROW(MakeEngineRequest(r, std::vector<int32_t>(157, 1), Limits()), ApiError);  // Cache.
  EXPECT_THROW(MakeEngineRequest(r, std::vector<int32_t>(600, 1), Limits()), ApiError);  // Context.
  EXPECT_THROW(MakeEngineRequest(r, {}, Limits()), ApiError);
}

TEST(OpenAiSchemaTest, EchoScoresThePrompt) {
  // lm-evaluation-harness's loglikelihood request: echo, logprobs, no completion.
  const GenerationRequest r =
      Parse(R"({"prompt": [[1, 2, 3]], "echo": true, "logprobs": 1, "max_tokens": 0})");
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(*r.max_tokens, 0);
  engine::Request e = MakeEngineRequest(r, {1, 2, 3}, Limits());
  EXPECT_EQ(e.max_tokens, 0);
  EXPECT_EQ(e.prompt_logprobs, 1);
  // Scoring needs no room for a completion: a prompt that fills the cache (256) is fine, one
  // token more is not.
  EXPECT_EQ(MakeEngineRequest(r, std::vector<int32_t>(256, 1), Limits()).max_tokens, 0);
  EXPECT_THROW(MakeEngineRequest(r, std::vector<int32_t>(257, 1), Limits()), ApiError);
  // Prompt logprobs only with both echo and logprobs.
  EXPECT_EQ(MakeEngineRequest(Parse(R"({"prompt": "x", "echo": true})"), {1}, Limits()).prompt_logprobs,
            -1);
  EXPECT_EQ(MakeEngineRequest(Parse(R"({"prompt": "x", "logprobs": 2})"), {1}, Limits()).prompt_logprobs,
            -1);
  EXPECT_EQ(MakeEngineRequest(Parse(R"({"prompt": "x", "logprobs": 2, "echo": true})"), {1}, Limits())
                .prompt_logprobs,
            2);
  // max_tokens 0 without echo would return nothing; echo is for completions only.
  EXPECT_EQ(Refusal(R"({"prompt": "x", "max_tokens": 0, "echo": false})"),
            std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "max_tokens": -1, "echo": true})"),
            std::make_pair(400, std::string("max_tokens")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "echo": 1})"), std::make_pair(400, std::string("echo")));
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})",
                    Endpoint::kChatCompletions),
            std::make_pair(400, std::string("echo")));
}

TEST(OpenAiSchemaTest, ParallelToolCalls) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}])";
  EXPECT_TRUE(Parse(chat + "}", Endpoint::kChatCompletions).parallel_tool_calls);
  EXPECT_TRUE(Parse(chat + R"(, "parallel_tool_calls": null})", Endpoint::kChatCompletions)
                  .parallel_tool_calls);
  EXPECT_FALSE(Parse(chat + R"(, "parallel_tool_calls": false})", Endpoint::kChatCompletions)
                   .parallel_tool_calls);
  EXPECT_EQ(Refusal(chat + R"(, "parallel_tool_calls": 0})", Endpoint::kChatCompletions),
            std::make_pair(400, std::string("parallel_tool_calls")));
}

TEST(OpenAiSchemaTest, EchoedFirstTokenHasNullLogprobs) {
  ResponseMeta meta;
  meta.logprobs = true;
  ChoiceOutput c;
  c.text = "ab";
  LogprobEntry first;
  first.token = "a";
  first.null_logprob = true;
  LogprobEntry second;
  second.token = "b";
  second.logprob = -1.5f;
  second.top = {{"c", -0.5f}};
  second.text_offset = 1;
  c.logprobs = {first, second};
  const OrderedJson j = ResponseJson(meta, {c}, {});
  const OrderedJson& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], OrderedJson({"a", "b"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -1.5f);
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  // The prompt token itself, then its alternative.
  EXPECT_EQ(lp["top_logprobs"][1], OrderedJson({{"b", -1.5f}, {"c", -0.5f}}));
  EXPECT_EQ(lp["text_offset"], OrderedJson({0, 1}));
}

TEST(OpenAiSchemaTest, CompletionTopLogprobsIncludeTheToken) {
  ResponseMeta meta;
  meta.logprobs = true;
  LogprobEntry alone;  // "logprobs": 0
  alone.token = "a";
  alone.logprob = -0.25f;
  LogprobEntry best;  // Sampled the best token: its entry is not repeated.
  best.token = "b";
  best.logprob = -0.5f;
  best.top = {{"b", -0.5f}, {"c", -1.0f}};
  LogprobEntry outside;  // Sampled outside the alternatives: logprobs + 1 entries.
  outside.token = "d";
  outside.logprob = -3.0f;
  outside.top = {{"b", -0.5f}, {"c", -1.0f}};
  LogprobEntry shared;  // Two ids of one text share a key, with the better logprob.
  shared.token = "e";
  shared.logprob = -2.0f;
  shared.top = {{"e", -0.75f}, {"f", -1.0f}};
  ChoiceOutput c;
  c.text = "abde";
  c.logprobs = {alone, best, outside, shared};
  const OrderedJson j = ResponseJson(meta, {c}, {});
  const OrderedJson& top = j["choices"][0]["logprobs"]["top_logprobs"];
  EXPECT_EQ(top[0], OrderedJson({{"a", -0.25f}}));
  EXPECT_EQ(top[1], OrderedJson({{"b", -0.5f}, {"c", -1.0f}}));
  EXPECT_EQ(top[2], OrderedJson({{"d", -3.0f}, {"b", -0.5f}, {"c", -1.0f}}));
  EXPECT_EQ(top[3], OrderedJson({{"e", -0.75f}, {"f", -1.0f}}));
  // Chat lists the token and its top_logprobs apart, as before.
  meta.endpoint = Endpoint::kChatCompletions;
  const OrderedJson chat = ResponseJson(meta, {c}, {})["choices"][0]["logprobs"]["content"];
  EXPECT_TRUE(chat[0]["top_logprobs"].empty());
  EXPECT_EQ(chat[2]["top_logprobs"].size(), 2u);
}

TEST(OpenAiSchemaTest, ReturnTokensAsTokenIds) {
  EXPECT_FALSE(Parse(R"({"prompt": "x"})").return_tokens_as_token_ids);
  EXPECT_TRUE(Parse(R"({"prompt": "x", "return_tokens_as_token_ids": true})")
                  .return_tokens_as_token_ids);
  EXPECT_EQ(Refusal(R"({"prompt": "x", "return_tokens_as_token_ids": 1})"),
            std::make_pair(400, std::string("return_tokens_as_token_ids")));
  // Chat: the sampled token's "bytes" are its text's, an alternative's its own token's (vLLM).
  ResponseMeta meta;
  meta.endpoint = Endpoint::kChatCompletions;
  meta.logprobs = true;
  ChoiceOutput c;
  LogprobEntry e;
  e.token = "token_id:7";
  e.bytes = "\xc3\xa9";
  e.top = {{"token_id:7", -0.1f}};
  c.logprobs = {e};
  const OrderedJson j = ResponseJson(meta, {c}, {});
  const OrderedJson& entry = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(entry["token"], "token_id:7");
  EXPECT_EQ(entry["bytes"], OrderedJson({0xc3, 0xa9}));
  EXPECT_EQ(entry["top_logprobs"][0]["bytes"], OrderedJson({'t', 'o', 'k', 'e', 'n', '_', 'i',
                                                            'd', ':', '7'}));
}

TEST(OpenAiSchemaTest, MinTokens) {
  GenerationRequest r = Parse(R"({"prompt": "x", "max_tokens": 9, "min_tokens": 4})");
  EXPECT_EQ(r.min_tokens, 4);
  EXPECT_EQ(MakeEngineRequest(r, {1}, Limits()).min_tokens, 4);
  EXPECT_EQ(Parse(R"({"prompt": "x", "min_tokens": null})").min_tokens, 0);
  EXPECT_EQ(Parse(R"({"prompt": "x", "max_tokens": 9, "min_tokens": 9})").min_tokens, 9);
  EXPECT_EQ(Refusal(R"({"prompt": "x", "min_tokens": -1})"),
            std::make_pair(400, std::string("min_tokens")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "min_tokens": 1.5})"),
            std::make_pair(400, std::string("min_tokens")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "min_tokens": "3"})"),
            std::make_pair(400, std::string("min_tokens")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "max_tokens": 3, "min_tokens": 4})"),
            std::make_pair(400, std::string("min_tokens")));
  EXPECT_EQ(Refusal(R"({"messages": [{"role": "user", "content": "x"}], "min_tokens": 6,
                        "max_completion_tokens": 5})",
                    Endpoint::kChatCompletions),
            std::make_pair(400, std::string("min_tokens")));
  // Above the default max_tokens (16 for completions): refused once the default is known.
  r = Parse(R"({"prompt": "x", "min_tokens": 17})");
  try {
    MakeEngineRequest(r, {1}, Limits());
    ADD_FAILURE() << "min_tokens above the default max_tokens accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "min_tokens");
  }
}

TEST(OpenAiSchemaTest, RepetitionPenaltyRange) {
  EXPECT_FLOAT_EQ(Parse(R"({"prompt": "x", "repetition_penalty": 0.01})")
                      .sampling.repetition_penalty, 0.01f);
  EXPECT_FLOAT_EQ(Parse(R"({"prompt": "x", "repetition_penalty": 100})")
                      .sampling.repetition_penalty, 100.0f);
  for (const char* v : {"0.0099", "1e-39", "1e-300", "0", "100.5"}) {
    EXPECT_EQ(Refusal(std::string(R"({"prompt": "x", "repetition_penalty": )") + v + "}"),
              std::make_pair(400, std::string("repetition_penalty")))
        << v;
  }
}

// vLLM's response_format {"type": "structural_tag"}, in its legacy form (structures and
// triggers) and XGrammar's (format), on both endpoints; structured_outputs.structural_tag takes
// the same as JSON text. Bad ones are 400s naming response_format and what is wrong.
TEST(OpenAiSchemaTest, StructuralTagResponseFormat) {
  const std::string legacy =
      R"({"type": "structural_tag", "structures": [{"begin": "<function=f>", "schema": )"
      R"({"type": "object", "properties": {"z": {}, "a": {}}}, "end": "</function>"}], )"
      R"("triggers": ["<function="]})";
  const GenerationRequest chat =
      Parse(StrCat(R"({"messages": [{"role": "user", "content": "x"}], "response_format": )",
                   legacy, "}"),
            Endpoint::kChatCompletions);
  EXPECT_EQ(chat.output.kind, structured::OutputSpec::Kind::kStructuralTag);
  EXPECT_STREQ(chat.output_field, "response_format");
  const nlohmann::ordered_json& tags = chat.output.schema["format"]["tags"];
  EXPECT_EQ(chat.output.schema["format"]["triggers"].dump(), R"(["<function="])");
  EXPECT_EQ(tags[0]["begin"], "<function=f>");
  EXPECT_EQ(tags[0]["end"], "</function>");
  // The schema keeps its keys' order (it orders the generated object).
  EXPECT_EQ(tags[0]["content"]["json_schema"].dump(),
            R"({"type":"object","properties":{"z":{},"a":{}}})");

  const std::string format =
      R"({"type": "triggered_tags", "triggers": ["<f"], "tags": [{"begin": "<f>", )"
      R"("content": {"type": "const_string", "value": "x"}, "end": "</f>"}]})";
  const GenerationRequest completion = Parse(
      StrCat(R"({"prompt": "x", "response_format": {"type": "structural_tag", "format": )", format,
             "}}"));
  EXPECT_EQ(completion.output.kind, structured::OutputSpec::Kind::kStructuralTag);
  EXPECT_EQ(completion.output.schema.dump(),
            StrCat(R"({"type":"structural_tag","format":)",
                   nlohmann::ordered_json::parse(format).dump(), "}"));
  // The same through structured_outputs, as JSON text.
  const GenerationRequest text = Parse(StrCat(
      R"({"prompt": "x", "structured_outputs": {"structural_tag": )",
      nlohmann::json(StrCat(R"({"type": "structural_tag", "format": )", format, "}")).dump(),
      "}}"));
  EXPECT_EQ(text.output.schema, completion.output.schema);
  EXPECT_STREQ(text.output_field, "structured_outputs");

  const auto error = [](const std::string& response_format) -> std::string {
    try {
      Parse(StrCat(R"({"prompt": "x", "response_format": )", response_format, "}"));
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "response_format");
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error(R"({"type": "structural_tag"})"),
            "response_format needs 'format' (XGrammar's structural tag format) or 'structures' "
            "and 'triggers'");
  EXPECT_EQ(error(R"({"type": "structural_tag", "structures": [{"begin": "<f>", "schema": {}, )"
                  R"("end": "</f>"}]})"),
            "response_format needs 'triggers' beside 'structures'");
  EXPECT_EQ(error(R"({"type": "structural_tag", "format": [1]})"),
            "response_format.format must be an object, got [1]");
  EXPECT_THAT(error(R"({"type": "tag"})"),
              ::testing::HasSubstr("(text, json_object, json_schema or structural_tag)"));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "response_format": {"type": "structural_tag", "format": )"
                    R"({}}, "structured_outputs": {"regex": "a"}})"),
            std::make_pair(400, std::string("structured_outputs")));
}

TEST(OpenAiSchemaTest, CompletionsRefuseTopLogprobs) {
  EXPECT_EQ(Refusal(R"({"prompt": "x", "logprobs": 2, "top_logprobs": 2})"),
            std::make_pair(400, std::string("top_logprobs")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "top_logprobs": 0})"),
            std::make_pair(400, std::string("top_logprobs")));
  EXPECT_EQ(Parse(R"({"prompt": "x", "logprobs": 2, "top_logprobs": null})").top_logprobs, 2);
}

TEST(OpenAiSchemaTest, MinusInfinityLogprobsAreNumbers) {
  // -inf would serialize as null; vLLM's -9999.0 instead, for completions and chat alike.
  const float inf = std::numeric_limits<float>::infinity();
  LogprobEntry e;
  e.token = "a";
  e.logprob = -inf;
  e.top = {{"a", -inf}};
  ChoiceOutput c;
  c.text = "a";
  c.logprobs = {e};
  ResponseMeta meta;
  meta.logprobs = true;
  OrderedJson lp = ResponseJson(meta, {c}, {})["choices"][0]["logprobs"];
  EXPECT_EQ(lp["token_logprobs"][0], -9999.0f);
  EXPECT_EQ(lp["top_logprobs"][0]["a"], -9999.0f);
  meta.endpoint = Endpoint::kChatCompletions;
  lp = ResponseJson(meta, {c}, {})["choices"][0]["logprobs"];
  EXPECT_EQ(lp["content"][0]["logprob"], -9999.0f);
  EXPECT_EQ(lp["content"][0]["top_logprobs"][0]["logprob"], -9999.0f);
}

// The server's boundaries (a worker's job, a session's start, its constraint and submit) answer a
// caught latent::Error through RequestError. A failed LATENT_CHECK is an InternalError, which is a
// latent::Error too: it was answered 400 invalid_request_error, blaming the client for a bug.
TEST(OpenAiSchemaTest, RequestErrorAnswersBadInput400AndAFailedCheck500) {
  const ApiError bad = RequestError(Error("not a schema"), "response_format: ", "response_format");
  EXPECT_EQ(bad.status(), 400);
  EXPECT_EQ(std::string(bad.what()), "response_format: not a schema");
  EXPECT_EQ(bad.param(), "response_format");
  EXPECT_EQ(ErrorJson(bad)["error"]["type"], "invalid_request_error");

  try {
    const std::string empty;
    LATENT_CHECK(!empty.empty());
    FAIL() << "the check passed";
  } catch (const Error& e) {
    const ApiError bug = RequestError(e, "response_format: ", "response_format");
    EXPECT_EQ(bug.status(), 500);
    EXPECT_EQ(std::string(bug.what()).rfind("internal error: response_format: ", 0), 0u)
        << bug.what();
    EXPECT_NE(std::string(bug.what()).find("check failed: !empty.empty()"), std::string::npos);
    // The shape of the server's other unexpected exceptions: no param, code internal_error.
    const OrderedJson json = ErrorJson(bug);
    EXPECT_EQ(json["error"]["type"], "server_error");
    EXPECT_EQ(json["error"]["param"], nullptr);
    EXPECT_EQ(json["error"]["code"], "internal_error");
  }
}

TEST(OpenAiSchemaTest, ErrorJsonShape) {
  const OrderedJson e = ErrorJson(ApiError(400, "bad top_p", "top_p"));
  EXPECT_EQ(
      Dump(e),
      R"({"error":{"message":"bad top_p","type":"invalid_request_error","param":"top_p","code":null}})");
  EXPECT_EQ(ErrorJson(503, "stopping")["error"]["type"], "server_error");
}

TEST(OpenAiSchemaTest, ResponseAndChunks) {
  ResponseMeta meta;
  meta.endpoint = Endpoint::kChatCompletions;
  meta.id = "chatcmpl-1";
  meta.model = "tiny";
  meta.include_usage = true;
  ChoiceOutput c;
  c.text = "hi";
  c.finish_reason = "length";
  const OrderedJson whole = ResponseJson(meta, {c}, {5, 2, 3});
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(whole["usage"]["total_tokens"], 7);
  EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  const OrderedJson role = ChunkJson(meta, c, /*role_only=*/true);
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["usage"].is_null());
  const OrderedJson usage = UsageChunkJson(meta, {5, 2, 0});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(SseData(OrderedJson{{"a", 1}}), "data: {\"a\":1}\n\n");
  // Invalid UTF-8 is replaced, never thrown.
  c.text = "\xff";
  EXPECT_NO_THROW(Dump(ResponseJson(meta, {c}, {})));
}

TEST(OpenAiSchemaTest, ForcedToolCallsHaveEmptyContent) {
  ResponseMeta meta;
  meta.endpoint = Endpoint::kChatCompletions;
  ChoiceOutput c;
  c.tool_calls = {{0, "call_1", "f", "{}"}};
  c.finish_reason = "stop";
  // auto: null beside the calls; a forced call (required, named): "" (vLLM's `content or ""`).
  EXPECT_TRUE(ResponseJson(meta, {c}, {})["choices"][0]["message"]["content"].is_null());
  meta.forced_tool_call = true;
  EXPECT_EQ(ResponseJson(meta, {c}, {})["choices"][0]["message"]["content"], "");
}

TEST(OpenAiSchemaTest, ContinuousUsageStats) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], "stream": true, )";
  auto parse = [&](const std::string& options) {
    return Parse(chat + R"("stream_options": )" + options + "}", Endpoint::kChatCompletions);
  };
  EXPECT_TRUE(parse(R"({"include_usage": true, "continuous_usage_stats": true})").continuous_usage);
  // vLLM's include_usage and continuous_usage_stats: without include_usage, no usage at all.
  EXPECT_FALSE(parse(R"({"continuous_usage_stats": true})").continuous_usage);
  EXPECT_FALSE(
      parse(R"({"include_usage": true, "continuous_usage_stats": false})").continuous_usage);
  EXPECT_FALSE(parse(R"({"include_usage": true})").continuous_usage);
  EXPECT_EQ(Refusal(chat + R"("stream_options": {"continuous_usage_stats": 1}})",
                    Endpoint::kChatCompletions),
            std::make_pair(400, std::string("continuous_usage_stats")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "stream_options": {"include_usage": true,
                       "continuous_usage_stats": true}})"),
            std::make_pair(400, std::string("stream_options")));
  ResponseMeta meta;
  meta.include_usage = true;
  ChoiceOutput c;
  c.text = "a";
  EXPECT_TRUE(ChunkJson(meta, c)["usage"].is_null());
  c.usage = Usage{4, 2, 1};
  const OrderedJson usage = ChunkJson(meta, c)["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 4);
  EXPECT_EQ(usage["completion_tokens"], 2);
  EXPECT_EQ(usage["total_tokens"], 6);
}

TEST(OpenAiSchemaTest, PromptTokenIdsWhereVllmPutsThem) {
  ResponseMeta meta;
  meta.return_token_ids = true;
  ChoiceOutput c;
  c.token_ids = {7};
  c.prompt_token_ids = {1, 2};
  // Completions: in each choice (its prompt's), none at the top level.
  OrderedJson whole = ResponseJson(meta, {c}, {});
  EXPECT_EQ(whole["choices"][0]["prompt_token_ids"], OrderedJson({1, 2}));
  EXPECT_FALSE(whole.contains("prompt_token_ids"));
  EXPECT_EQ(ChunkJson(meta, c)["choices"][0]["prompt_token_ids"], OrderedJson({1, 2}));
  ChoiceOutput later = c;  // A later chunk leaves them out.
  later.prompt_token_ids.clear();
  EXPECT_FALSE(ChunkJson(meta, later)["choices"][0].contains("prompt_token_ids"));
  // Chat: at the top level, flat.
  meta.endpoint = Endpoint::kChatCompletions;
  whole = ResponseJson(meta, {c}, {});
  EXPECT_EQ(whole["prompt_token_ids"], OrderedJson({1, 2}));
  EXPECT_FALSE(whole["choices"][0].contains("prompt_token_ids"));
  const OrderedJson role = ChunkJson(meta, c, /*role_only=*/true);
  EXPECT_EQ(role["prompt_token_ids"], OrderedJson({1, 2}));
  EXPECT_FALSE(role["choices"][0].contains("prompt_token_ids"));
  EXPECT_FALSE(ChunkJson(meta, later).contains("prompt_token_ids"));
}

TEST(OpenAiSchemaTest, VllmFieldsLatentDoesNotImplementAreRefused) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  for (const std::string& field : {std::string(R"("use_beam_search": true)"),
                                   std::string(R"("bad_words": ["x"])"),
                                   std::string(R"("priority": 3)")}) {
    SCOPED_TRACE(field);
    const std::string name = field.substr(1, field.find('"', 1) - 1);
    EXPECT_EQ(Refusal(R"({"prompt": "x", )" + field + "}"), std::make_pair(400, name));
    EXPECT_EQ(Refusal(chat + field + "}", Endpoint::kChatCompletions), std::make_pair(400, name));
    try {
      Parse(R"({"prompt": "x", )" + field + "}");
      ADD_FAILURE() << "not refused";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code(), "unsupported_parameter");
    }
  }
  // Their defaults are no change.
  EXPECT_NO_THROW(Parse(R"({"prompt": "x", "use_beam_search": false, "bad_words": [],
                            "priority": 0})"));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "bad_words": "x"})"),
            std::make_pair(400, std::string("bad_words")));
  EXPECT_EQ(Refusal(R"({"prompt": "x", "priority": "high"})"),
            std::make_pair(400, std::string("priority")));
}

TEST(OpenAiSchemaTest, PromptLogprobs) {
  EXPECT_EQ(Parse(R"({"prompt": "x"})").prompt_logprobs, -1);
  EXPECT_EQ(Parse(R"({"prompt": "x", "prompt_logprobs": null})").prompt_logprobs, -1);
  const GenerationRequest r = Parse(R"({"prompt": "x", "prompt_logprobs": 3})");
  EXPECT_EQ(r.prompt_logprobs, 3);
  EXPECT_EQ(MakeEngineRequest(r, {1, 2}, Limits()).prompt_logprobs, 3);
  // With echo's logprobs the engine computes the larger count once.
  EXPECT_EQ(MakeEngineRequest(Parse(R"({"prompt": "x", "prompt_logprobs": 1, "echo": true,
                                        "logprobs": 4})"),
                              {1, 2}, Limits())
                .prompt_logprobs,
            4);
  EXPECT_EQ(MakeEngineRequest(Parse(R"({"prompt": "x", "prompt_logprobs": 5, "echo": true,
                                        "logprobs": 0})"),
                              {1, 2}, Limits())
                .prompt_logprobs,
            5);
  EXPECT_EQ(Parse(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 0})",
                  Endpoint::kChatCompletions)
                .prompt_logprobs,
            0);
  for (const char* body : {R"({"prompt": "x", "prompt_logprobs": -1})",
                           R"({"prompt": "x", "prompt_logprobs": 21})",
                           R"({"prompt": "x", "prompt_logprobs": true})",
                           R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})"}) {
    EXPECT_EQ(Refusal(body), std::make_pair(400, std::string("prompt_logprobs"))) << body;
  }
  // vLLM takes 0 with stream, and streams none: none are computed.
  EXPECT_EQ(Parse(R"({"prompt": "x", "prompt_logprobs": 0, "stream": true})").prompt_logprobs, -1);
  // Ranks only for prompt_logprobs. Echo with logprobs asks for them as vLLM does (prompt_logprobs
  // = logprobs when left out), not streamed: a streamed echo's logprobs show no rank.
  EXPECT_TRUE(MakeEngineRequest(r, {1, 2}, Limits()).prompt_ranks);
  const GenerationRequest echoed = Parse(R"({"prompt": "x", "echo": true, "logprobs": 2})");
  EXPECT_EQ(echoed.prompt_logprobs, 2);
  const engine::Request echo = MakeEngineRequest(echoed, {1, 2}, Limits());
  EXPECT_EQ(echo.prompt_logprobs, 2);
  EXPECT_TRUE(echo.prompt_ranks);
  EXPECT_EQ(Parse(R"({"prompt": "x", "echo": true, "logprobs": 2, "prompt_logprobs": 0})")
                .prompt_logprobs,
            0);
  EXPECT_EQ(Parse(R"({"prompt": "x", "echo": true})").prompt_logprobs, -1);
  EXPECT_EQ(Parse(R"({"prompt": "x", "logprobs": 2})").prompt_logprobs, -1);
  const GenerationRequest streamed =
      Parse(R"({"prompt": "x", "echo": true, "logprobs": 2, "stream": true})");
  EXPECT_EQ(streamed.prompt_logprobs, -1);
  const engine::Request streamed_echo = MakeEngineRequest(streamed, {1, 2}, Limits());
  EXPECT_EQ(streamed_echo.prompt_logprobs, 2);
  EXPECT_FALSE(streamed_echo.prompt_ranks);
  const OrderedJson j = PromptLogprobsJson(
      {{{5, -1.5f, 7, "a"}, {9, -0.25f, 1, "b"}, {5, -1.5f, 2, "a"}},
       {{6, -0.5f, 1, std::nullopt}, {6, -0.5f, 1, std::nullopt}}});
  EXPECT_EQ(j.dump(),
            R"([null,{"5":{"logprob":-1.5,"rank":7,"decoded_token":"a"},)"
            R"("9":{"logprob":-0.25,"rank":1,"decoded_token":"b"}},)"
            R"({"6":{"logprob":-0.5,"rank":1,"decoded_token":null}}])");
  // In the completions choice; at the top level of a chat response.
  ResponseMeta meta;
  ChoiceOutput c;
  c.prompt_logprobs = j;
  EXPECT_EQ(ResponseJson(meta, {c}, {})["choices"][0]["prompt_logprobs"], j);
  meta.endpoint = Endpoint::kChatCompletions;
  const OrderedJson chat = ResponseJson(meta, {c}, {});
  EXPECT_EQ(chat["prompt_logprobs"], j);
  EXPECT_FALSE(chat["choices"][0].contains("prompt_logprobs"));
  c.prompt_logprobs = nullptr;
  EXPECT_FALSE(ResponseJson(meta, {c}, {}).contains("prompt_logprobs"));
}

TEST(OpenAiSchemaTest, TruncatePromptTokens) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ServingLimits limits = Limits();
  limits.cache_tokens = 1024;  // The context (512) is the bound here.
  auto kept = [&](const std::string& body, Endpoint e = Endpoint::kCompletions) {
    return MakeEngineRequest(Parse(body, e), prompt, limits).prompt;
  };
  EXPECT_EQ(kept(R"({"prompt": "x", "truncate_prompt_tokens": 3})"),
            std::vector<int32_t>({8, 9, 10}));
  EXPECT_EQ(kept(R"({"prompt": "x", "truncate_prompt_tokens": 30})"), prompt);
  EXPECT_EQ(kept(R"({"prompt": "x", "truncate_prompt_tokens": null})"), prompt);
  // -1: the context (512) less max_tokens (as vLLM counts it: 16 left out, 0 for chat).
  EXPECT_EQ(kept(R"({"prompt": "x", "truncate_prompt_tokens": -1, "max_tokens": 505})"),
            std::vector<int32_t>({4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(kept(R"({"prompt": "x", "truncate_prompt_tokens": -1})"), prompt);
  EXPECT_EQ(kept(R"({"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": 4})",
                 Endpoint::kChatCompletions),
            std::vector<int32_t>({7, 8, 9, 10}));
  for (const char* body : {R"({"prompt": "x", "truncate_prompt_tokens": 0})",
                           R"({"prompt": "x", "truncate_prompt_tokens": -2})",
                           R"({"prompt": "x", "truncate_prompt_tokens": "3"})"}) {
    EXPECT_EQ(Refusal(body), std::make_pair(400, std::string("truncate_prompt_tokens"))) << body;
  }
  // Past the room (512 - 16): refused, as vLLM refuses it.
  try {
    kept(R"({"prompt": "x", "truncate_prompt_tokens": 497})");
    ADD_FAILURE() << "not refused";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "truncate_prompt_tokens");
  }
  EXPECT_EQ(kept(R"({"prompt": "x", "truncate_prompt_tokens": 496})"), prompt);
  // max_tokens null: vLLM's `max_tokens or 0` leaves the whole context; the completion still
  // gets the rest of it.
  const engine::Request null_max = MakeEngineRequest(
      Parse(R"({"prompt": "x", "truncate_prompt_tokens": 512, "max_tokens": null})"), prompt,
      limits);
  EXPECT_EQ(null_max.prompt, prompt);
  EXPECT_EQ(null_max.max_tokens, 502);
}

// Empty content: "" from a plain chat, null under a reasoning parser (a reply that is only
// reasoning, or nothing at all), as vLLM's parsers return None for it.
TEST(OpenAiSchemaTest, EmptyContentIsNullUnderAReasoningParser) {
  ResponseMeta meta;
  meta.endpoint = Endpoint::kChatCompletions;
  ChoiceOutput c;
  c.finish_reason = "length";
  EXPECT_EQ(ResponseJson(meta, {c}, {})["choices"][0]["message"]["content"], "");
  meta.reasoning = true;
  c.reasoning = "thinking";
  OrderedJson message = ResponseJson(meta, {c}, {})["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << message;
  EXPECT_EQ(message["reasoning_content"], "thinking");
  c.reasoning.clear();
  message = ResponseJson(meta, {c}, {})["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << message;
  EXPECT_TRUE(message["reasoning_content"].is_null()) << message;
  c.text = "4";
  EXPECT_EQ(ResponseJson(meta, {c}, {})["choices"][0]["message"]["content"], "4");
  // A forced call keeps "" under a reasoning parser too, as vLLM's forced paths write it.
  c.text.clear();
  c.tool_calls.push_back({});
  meta.forced_tool_call = true;
  EXPECT_EQ(ResponseJson(meta, {c}, {})["choices"][0]["message"]["content"], "");
}

TEST(OpenAiSchemaTest, StopReasonBesideFinishReason) {
  // vLLM's shape: every response choice and completions chunk carries stop_reason (null, a stop
  // string, or a stop token id as a JSON int); a chat chunk only with its finish_reason.
  for (const Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
    SCOPED_TRACE(static_cast<int>(endpoint));
    ResponseMeta meta;
    meta.endpoint = endpoint;
    ChoiceOutput c;
    c.text = "hi";
    const bool chat = endpoint == Endpoint::kChatCompletions;
    OrderedJson chunk = ChunkJson(meta, c)["choices"][0];
    EXPECT_EQ(chunk.contains("stop_reason"), !chat) << chunk;
    if (!chat) {
      EXPECT_TRUE(chunk["stop_reason"].is_null());
    }
    c.finish_reason = "stop";
    EXPECT_TRUE(ResponseJson(meta, {c}, {})["choices"][0]["stop_reason"].is_null());
    c.stop_reason = 7;
    const OrderedJson choice = ResponseJson(meta, {c}, {})["choices"][0];
    EXPECT_EQ(Dump(choice["stop_reason"]), "7");
    // Right after finish_reason, as vLLM's models order their fields.
    auto after = std::next(choice.find("finish_reason"));
    ASSERT_NE(after, choice.end());
    EXPECT_EQ(after.key(), "stop_reason");
    chunk = ChunkJson(meta, c)["choices"][0];
    EXPECT_EQ(Dump(chunk["stop_reason"]), "7");
    c.stop_reason = "\n\n";
    EXPECT_EQ(ChunkJson(meta, c)["choices"][0]["stop_reason"], "\n\n");
    if (chat) {
      EXPECT_FALSE(ChunkJson(meta, c, /*role_only=*/true)["choices"][0].contains("stop_reason"));
    }
  }
}

TEST(MetricsTest, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(5);
  std::string out;
  h.Render("x", "a=\"b\"", out);
  EXPECT_EQ(out,
            "x_bucket{a=\"b\",le=\"0.1\"} 1\nx_bucket{a=\"b\",le=\"1\"} "
            "2\nx_bucket{a=\"b\",le=\"+Inf\"} 3\n"
            "x_sum{a=\"b\"} 5.55\nx_count{a=\"b\"} 3\n");
  EXPECT_EQ(PrometheusLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace latent::server
