// Structured output: the allowed-token mask in the sampler (greedy and seeded draws only ever pick
// allowed tokens; no mask leaves the draw exactly as it was), in the engine (a constrained request
// batched with unconstrained ones: those give what they give alone; the constrained one ends when
// its constraint terminates), and the XGrammar-backed constraints (a JSON schema over a small
// vocabulary, EOS only where the JSON is complete, unsupported schemas refused by name; regexes,
// choices and EBNF grammars; a grammar that starts after the reasoning; vLLM's structured_outputs
// parsed; structural tags: free text, constrained between a trigger and the end), and the
// tool_choice schema.
#include "structured/structured_output.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_depth.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "structured/after_reasoning.h"
#include "structured/json_schema_check.h"
#include "structured/structural_tag.h"
#include "structured/tool_choice.h"
#include "favoured_token_model.h"
#include "error_of.h"

namespace latent {
namespace {

using engine::BitmaskWords;
using ::testing::HasSubstr;
using OJson = nlohmann::ordered_json;

using test::ErrorOf;

std::vector<uint32_t> MaskOf(int64_t vocab, const std::set<int32_t>& allowed) {
  std::vector<uint32_t> mask(BitmaskWords(vocab), 0);
  for (int32_t t : allowed) mask[t / 32] |= 1u << (t % 32);
  return mask;
}

engine::Sequence MakeSequence(uint64_t seed, int64_t generated = 0) {
  engine::Sequence seq(0, 16);
  seq.tokens = {1, 2, 3};
  seq.num_prompt = 3;
  for (int64_t i = 0; i < generated; ++i) seq.tokens.push_back(4);
  seq.seed = seed;
  return seq;
}

// ---- The sampler ----

TEST(StructuredSampler, GreedyPicksTheBestAllowedToken) {
  const int64_t vocab = 70;  // three mask words, the last one partial
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] = float(i % 13);
  engine::SamplingParams greedy;
  const engine::Sequence seq = MakeSequence(0);
  EXPECT_EQ(engine::SampleNext(logits.data(), vocab, seq, greedy).token, 12);
  const std::vector<uint32_t> mask = MaskOf(vocab, {3, 40, 66});
  // 40 % 13 = 1, 66 % 13 = 1, 3: the largest; equal logits keep the first id.
  EXPECT_EQ(engine::SampleNext(logits.data(), vocab, seq, greedy, mask.data()).token, 3);
  const std::vector<uint32_t> late = MaskOf(vocab, {69});
  EXPECT_EQ(engine::SampleNext(logits.data(), vocab, seq, greedy, late.data()).token, 69);
  // With penalties, too (the copy path).
  engine::SamplingParams penalised;
  penalised.repetition_penalty = 1.5f;
  EXPECT_EQ(engine::SampleNext(logits.data(), vocab, seq, penalised, mask.data()).token, 3);
}

TEST(StructuredSampler, SeededDrawsOnlyAllowedTokensWithLogprobsOverThem) {
  const int64_t vocab = 100;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(rng);
  const std::set<int32_t> allowed = {5, 17, 31, 32, 64, 99};
  const std::vector<uint32_t> mask = MaskOf(vocab, allowed);
  std::set<int32_t> seen;
  for (const float top_p : {1.0f, 0.5f}) {
    for (const int32_t top_k : {0, 3, 50}) {
      for (uint64_t seed = 0; seed < 200; ++seed) {
        engine::SamplingParams p;
        p.temperature = 1.0f;
        p.top_p = top_p;
        p.top_k = top_k;
        p.top_logprobs = 0;
        const engine::Sequence seq = MakeSequence(seed);
        const engine::SampledToken s = engine::SampleNext(logits.data(), vocab, seq, p, mask.data());
        ASSERT_TRUE(allowed.count(s.token)) << s.token;
        seen.insert(s.token);
        // The reported logprob is the raw row's renormalised over the allowed tokens (vLLM's:
        // the mask before the logprobs; top_p and top_k never enter).
        const engine::SampledToken raw = engine::SampleNext(logits.data(), vocab, seq, p);
        float max = logits[*allowed.begin()];
        for (int32_t t : allowed) max = std::max(max, logits[t]);
        double z = 0;
        for (int32_t t : allowed) z += std::exp(double(logits[t]) - max);
        EXPECT_NEAR(s.logprob, logits[s.token] - max - std::log(z), 1e-4);
        EXPECT_EQ(raw.token, engine::SampleNext(logits.data(), vocab, seq, p, nullptr).token);
      }
    }
  }
  EXPECT_GE(seen.size(), 3u);  // temperature 1 over six allowed tokens: not always the best one
}

TEST(StructuredSampler, NoMaskIsBitIdenticalAndAnEmptyMaskFails) {
  const int64_t vocab = 64;
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] = std::sin(float(i));
  std::vector<uint32_t> all(BitmaskWords(vocab), ~0u);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    engine::SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = 40;
    const engine::Sequence seq = MakeSequence(seed, seed % 5);
    // With a filter the masked draw ranks the allowed tokens as the unmasked one ranks all: an
    // all-allowed mask draws what no mask draws.
    EXPECT_EQ(engine::SampleNext(logits.data(), vocab, seq, p, all.data()).token,
              engine::SampleNext(logits.data(), vocab, seq, p).token);
  }
  const std::vector<uint32_t> none(BitmaskWords(vocab), 0);
  EXPECT_THAT(ErrorOf([&] { engine::SampleNext(logits.data(), vocab, MakeSequence(0), {}, none.data()); }),
              HasSubstr("allows no next token"));
}

TEST(StructuredSampler, UnfilteredMaskedDrawsFollowTheSoftmaxOfTheAllowedTokens) {
  // Without top-k / top-p / min-p the masked draw walks the allowed tokens in id order (no sort):
  // its frequencies are the softmax over the allowed tokens at the temperature.
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f, 0.0f, 3.0f, 1.5f, -0.5f};
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const std::set<int32_t> allowed = {1, 2, 3, 6};
  const std::vector<uint32_t> mask = MaskOf(vocab, allowed);
  engine::SamplingParams p;
  p.temperature = 0.8f;
  std::map<int32_t, int> counts;
  const int draws = 20000;
  for (int seed = 0; seed < draws; ++seed) ++counts[engine::SampleNext(logits.data(), vocab, MakeSequence(seed), p, mask.data()).token];
  double z = 0;
  for (int32_t t : allowed) z += std::exp(logits[t] / 0.8);
  for (const auto& [t, count] : counts) ASSERT_TRUE(allowed.count(t)) << t;
  for (int32_t t : allowed) {
    const double expected = std::exp(logits[t] / 0.8) / z;
    EXPECT_NEAR(double(counts[t]) / draws, expected, 0.015) << t;
  }
}

// ---- The engine: a constrained request beside unconstrained ones ----

// Logits that depend only on the sequence's last token and position: token (last * 7 + pos) % V
// is favoured, with a gentle slope over the rest, so seeded sampling varies.
std::unique_ptr<model::Model> FakeModel() {
  constexpr int64_t kVocab = 48;
  return std::make_unique<engine::testing::FavouredTokenModel>(
      kVocab,
      [](int32_t last, int64_t position) {
        return static_cast<int32_t>((int64_t{last} * 7 + position) % kVocab);
      },
      /*favoured_logit=*/3.0f,
      [](int64_t v, int32_t last) { return float((v * 5 + last) % 11) * 0.3f; });
}

// Allows only multiples of 3 (with 0 the stop token) for `length` tokens, then only the stop token.
class EveryThird final : public engine::TokenConstraint {
 public:
  explicit EveryThird(int length) : length_(length) {}
  void FillNextTokenBitmask(uint32_t* bitmask) override {
    std::fill(bitmask, bitmask + BitmaskWords(48), 0u);
    for (int t = 3; t < 48 && accepted_ < length_; t += 3) bitmask[t / 32] |= 1u << (t % 32);
    if (accepted_ >= length_) bitmask[0] |= 1u;
  }
  bool Accept(int32_t token) override {
    if (token == 0 ? accepted_ < length_ : (token % 3 != 0 || accepted_ >= length_)) return false;
    if (token == 0) terminated_ = true;
    ++accepted_;
    return true;
  }
  bool IsTerminated() const override { return terminated_; }

 private:
  int length_, accepted_ = 0;
  bool terminated_ = false;
};
class EveryThirdFactory final : public engine::TokenConstraintFactory {
 public:
  std::unique_ptr<engine::TokenConstraint> Start() const override { return std::make_unique<EveryThird>(5); }
};

struct Outcome {
  std::vector<int32_t> tokens;
  engine::FinishReason finish = engine::FinishReason::kNone;
};

// Runs `requests` together (submitted before the first step) and returns each sample's outcome.
std::vector<std::vector<Outcome>> RunTogether(std::vector<engine::Request> requests) {
  engine::EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 64;
  options.check_invariants = true;
  model::GenerationConfig generation;
  generation.eos_token_ids = {0};
  engine::Engine e(FakeModel(), generation, options);
  std::vector<std::vector<Outcome>> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    out[i].resize(requests[i].sampling.n);
    e.Submit(requests[i], [&out, i](const engine::RequestOutput& o) {
      if (o.has_token) out[i][o.sample].tokens.push_back(o.token);
      if (o.finish != engine::FinishReason::kNone) out[i][o.sample].finish = o.finish;
    });
  }
  while (e.Step()) {
  }
  return out;
}

engine::Request Plain(std::vector<int32_t> prompt, uint64_t seed, float temperature) {
  engine::Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = 12;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.ignore_eos = true;
  return r;
}

TEST(StructuredEngine, ConstrainedSamplesFollowTheirConstraintAndOthersAreUnaffected) {
  std::vector<engine::Request> plain = {Plain({5, 6, 7}, 1, 1.0f), Plain({9}, 2, 0.0f), Plain({11, 12}, 3, 0.8f)};
  const auto alone = RunTogether(plain);
  std::vector<engine::Request> mixed = plain;
  for (const float temperature : {0.0f, 1.0f}) {
    engine::Request constrained = Plain({5, 6, 7}, 4, temperature);
    constrained.max_tokens = 20;
    constrained.sampling.n = 2;
    constrained.constraint = std::make_shared<EveryThirdFactory>();
    mixed.insert(mixed.begin() + 1, constrained);
  }
  const auto together = RunTogether(mixed);
  // The unconstrained requests: the same tokens as without the constrained ones.
  EXPECT_EQ(together[0][0].tokens, alone[0][0].tokens);
  EXPECT_EQ(together[3][0].tokens, alone[1][0].tokens);
  EXPECT_EQ(together[4][0].tokens, alone[2][0].tokens);
  for (int r : {1, 2}) {
    for (const Outcome& o : together[r]) {
      // Five multiples of 3, then the stop token, which ends the sample (ignore_eos or not).
      ASSERT_EQ(o.tokens.size(), 6u);
      for (int i = 0; i < 5; ++i) EXPECT_EQ(o.tokens[i] % 3, 0) << o.tokens[i];
      EXPECT_NE(o.tokens[0], 0);
      EXPECT_EQ(o.tokens[5], 0);
      EXPECT_EQ(o.finish, engine::FinishReason::kStop);
    }
  }
  // Without the constraint the same request does not stay on multiples of 3.
  engine::Request free = Plain({5, 6, 7}, 4, 1.0f);
  free.max_tokens = 20;
  const auto unconstrained = RunTogether({free});
  int off = 0;
  for (int32_t t : unconstrained[0][0].tokens) off += t % 3 != 0;
  EXPECT_GT(off, 0);
}

// ---- XGrammar constraints over a small vocabulary ----

// Single characters of JSON plus a few multi-character tokens; id 0 is EOS, id 1 a special token.
structured::GrammarVocabulary SmallVocabulary(std::map<std::string, int32_t>* ids) {
  structured::GrammarVocabulary v;
  v.token_bytes.push_back(std::nullopt);  // 0: EOS (a special token)
  v.token_bytes.push_back(std::nullopt);  // 1: another special token
  const std::vector<std::string> pieces = {
      "{", "}",    "[",     "]",     "\"",  ":",   ",",    " ", "a", "b", "c",   "n",    "0",   "1",
      "2", "-", "true", "false", "\"a\"", "\":", "red", "blue", "é", "<", "x", ">", "<x>", "</x>"};
  for (const std::string& p : pieces) {
    (*ids)[p] = static_cast<int32_t>(v.token_bytes.size());
    v.token_bytes.push_back(p);
  }
  v.token_bytes.push_back("\xC3");  // half of é: a byte-level token
  (*ids)["\xC3"] = static_cast<int32_t>(v.token_bytes.size()) - 1;
  v.token_bytes.resize(64);  // the model's vocabulary is larger than the tokenizer's
  v.stop_token_ids = {0};
  return v;
}

std::set<int32_t> Allowed(engine::TokenConstraint& c, int64_t vocab) {
  std::vector<uint32_t> mask(BitmaskWords(vocab));
  c.FillNextTokenBitmask(mask.data());
  std::set<int32_t> out;
  for (int32_t t = 0; t < vocab; ++t) {
    if (engine::BitmaskAllows(mask.data(), t)) out.insert(t);
  }
  return out;
}

TEST(StructuredGrammar, JsonSchemaMasksUntilTheObjectIsCompleteThenOnlyEos) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  const OJson schema = OJson::parse(R"({"type": "object", "properties": {
      "a": {"type": "boolean"}, "b": {"enum": ["red", "blue"]}}, "required": ["a", "b"]})");
  auto factory = output.JsonSchema(schema);
  EXPECT_EQ(output.JsonSchema(schema), factory);  // cached by schema text
  auto c = factory->Start();
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["{"]}));  // compact: no leading space, no EOS
  for (const std::string piece : {"{", "\"a\"", ":"}) ASSERT_TRUE(c->Accept(id[piece])) << piece;
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["true"], id["false"]}));
  EXPECT_FALSE(c->Accept(id["1"]));  // not a boolean: refused, state unchanged
  for (const std::string piece : {"false", ",", "\"", "b", "\":", "\"", "blue", "\""}) {
    ASSERT_TRUE(c->Accept(id[piece])) << piece;
  }
  EXPECT_FALSE(c->IsTerminated());
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["}"]}));
  ASSERT_TRUE(c->Accept(id["}"]));
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{0}));  // complete: EOS only
  ASSERT_TRUE(c->Accept(0));
  EXPECT_TRUE(c->IsTerminated());
  // Each sample starts afresh.
  EXPECT_EQ(Allowed(*factory->Start(), 64), (std::set<int32_t>{id["{"]}));
}

TEST(StructuredGrammar, JsonObjectAcceptsAnyObjectAndStringsTakeRawBytes) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  auto c = output.JsonObject()->Start();
  for (const std::string piece : {"{", "\"", "\xC3"}) ASSERT_TRUE(c->Accept(id[piece])) << piece;
  // Mid-character: only the byte completing é (0xA9) may follow, and no token has it alone.
  EXPECT_FALSE(Allowed(*c, 64).count(id["\""]));
  EXPECT_FALSE(c->Accept(id["\""]));
  auto d = output.JsonObject()->Start();
  for (const std::string piece : {"{", "\"", "é", "\"", ":", "[", "1", ",", "true", "]", "}"}) {
    ASSERT_TRUE(d->Accept(id[piece])) << piece;
  }
  EXPECT_EQ(Allowed(*d, 64), (std::set<int32_t>{0}));
}

// Accepts `pieces` in order; true when every one was accepted.
bool AcceptAll(engine::TokenConstraint& c, std::map<std::string, int32_t>& id,
               const std::vector<std::string>& pieces) {
  for (const std::string& piece : pieces) {
    if (!c.Accept(id.at(piece))) return false;
  }
  return true;
}

TEST(StructuredGrammar, RegexMatchesTheWholeOutput) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  auto factory = output.Regex("(red|blue)-[0-2]+");
  EXPECT_EQ(output.Regex("(red|blue)-[0-2]+"), factory);  // cached by the pattern
  auto c = factory->Start();
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["red"], id["blue"], id["b"]}));
  ASSERT_TRUE(AcceptAll(*c, id, {"red", "-", "1"}));
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{0, id["0"], id["1"], id["2"]}));  // EOS may end it
  EXPECT_FALSE(c->Accept(id["a"]));
  ASSERT_TRUE(AcceptAll(*c, id, {"2"}));
  ASSERT_TRUE(c->Accept(0));
  EXPECT_TRUE(c->IsTerminated());
  EXPECT_THAT(ErrorOf([&] { output.Regex("(unclosed"); }),
              HasSubstr("the regex cannot be compiled"));
}

// XGrammar's errors start with the time and its source file's path, which mean nothing to the
// client reading them, and end with a newline.
TEST(StructuredGrammar, CompileErrorsLeaveOutXGrammarsTimeAndPath) {
  EXPECT_EQ(structured::XGrammarErrorText(
                "[02:43:31] /work/b/_deps/xgrammar/cpp/regex_converter.cc:94: Regex parsing error "
                "at position 9: x\n"),
            "Regex parsing error at position 9: x");
  EXPECT_EQ(structured::XGrammarErrorText("[12:00:00] C:/src/a:b.cc:7: no check (y) \n \n"),
            "no check (y)");
  // A failed check's C++ condition is XGrammar's code, not the caller's: only its message stays.
  EXPECT_EQ(structured::XGrammarErrorText(
                "[12:00:00] /x/grammar_compiler.cc:1318: Check failed: (std::holds_alternative<"
                "Grammar>(result)) is false: Invalid structural tag error: Or format must have at "
                "least one element\n"),
            "Invalid structural tag error: Or format must have at least one element");
  EXPECT_EQ(structured::XGrammarErrorText(
                "[12:00:00] /x/grammar_functor.cc:435: Internal check failed: "
                "(new_choice_ids.size() >= 1) is false: \n"),
            "XGrammar refused it without saying why");
  EXPECT_EQ(structured::XGrammarErrorText("plain: 12: text\n"), "plain: 12: text");
  EXPECT_EQ(structured::XGrammarErrorText("[12:00:00] no line number"),
            "[12:00:00] no line number");
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  for (const std::string& error : {ErrorOf([&] { output.Regex("(unclosed"); }),
                                   ErrorOf([&] { output.Grammar("root ::= ("); })}) {
    EXPECT_THAT(error, HasSubstr("cannot be compiled: "));
    EXPECT_THAT(error, ::testing::Not(HasSubstr(".cc:")));
    EXPECT_THAT(error, ::testing::Not(HasSubstr("] ")));
    EXPECT_NE(error.back(), '\n');
  }
}

// A grammar that compiles but whose language is empty, or whose every string needs bytes no token
// has, is refused when it is compiled (a request's error), not at the first draw (an engine
// failure). The verdict is cached with the grammar.
TEST(StructuredGrammar, AGrammarAdmittingNoOutputIsRefusedWhenCompiled) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  EXPECT_EQ(ErrorOf([&] { output.Grammar("root ::= root"); }), "the grammar admits no output");
  EXPECT_EQ(ErrorOf([&] { output.Regex("[^\\x00-\\U0010FFFF]"); }), "the regex admits no output");
  EXPECT_EQ(ErrorOf([&] { output.Regex("z"); }), "the regex admits no output");  // no token has z
  EXPECT_EQ(output.cached_grammars(), 3u);
  EXPECT_EQ(ErrorOf([&] { output.Grammar("root ::= root"); }), "the grammar admits no output");
  EXPECT_EQ(output.cached_grammars(), 3u);
  // A grammar whose only string is the empty one admits EOS, and one that needs a rare token
  // compiles as before.
  EXPECT_EQ(Allowed(*output.Grammar("root ::= \"\"")->Start(), 64), (std::set<int32_t>{0}));
  EXPECT_EQ(Allowed(*output.Regex("é")->Start(), 64), (std::set<int32_t>{id["é"], id["\xC3"]}));
}

TEST(StructuredGrammar, ChoiceIsExactlyOneOfTheStringsWithQuotesAndControlCharacters) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  structured::OutputSpec spec;
  spec.kind = structured::OutputSpec::Kind::kChoice;
  spec.choices = {"red", "\"a\"", "b\\c"};
  auto c = output.Constraint(spec)->Start();
  ASSERT_TRUE(AcceptAll(*c, id, {"red"}));
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{0}));  // complete: nothing else may follow
  auto quoted = output.Constraint(spec)->Start();
  EXPECT_FALSE(quoted->Accept(id["a"]));
  ASSERT_TRUE(AcceptAll(*quoted, id, {"\"a\""}));  // the quotes themselves, as one token
  EXPECT_EQ(Allowed(*quoted, 64), (std::set<int32_t>{0}));
  auto backslash = output.Constraint(spec)->Start();
  ASSERT_TRUE(AcceptAll(*backslash, id, {"b"}));
  EXPECT_FALSE(backslash->Accept(id["c"]));  // the backslash comes first

  EXPECT_EQ(structured::ChoiceGrammar({"a\"b", "x\\", "\n1"}),
            R"(root ::= "a\"b" | "x\\" | "\u000a1")");
}

TEST(StructuredGrammar, EbnfGrammarFromRootAndItsErrorsNamed) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  auto c = output.Grammar(R"(root ::= "[" item ("," item)* "]"
item ::= "red" | "blue")")->Start();
  ASSERT_TRUE(AcceptAll(*c, id, {"[", "red", ",", "blue"}));
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id[","], id["]"]}));
  ASSERT_TRUE(AcceptAll(*c, id, {"]"}));
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{0}));
  EXPECT_THAT(ErrorOf([&] { output.Grammar("root ::= ("); }),
              HasSubstr("the grammar cannot be compiled"));
  EXPECT_THAT(ErrorOf([&] { output.Grammar(R"(start ::= "a")"); }),  // no rule `root`
              HasSubstr("the grammar cannot be compiled"));
}

// A thinking model's grammar (--reasoning-parser): every token is allowed and the grammar stays
// where it was until the reasoning's end token; from the token after it the grammar masks, and the
// sample terminates only once the grammar does. Replaying the tokens into a fresh constraint (a
// recompute) gives the same masks; each sample has its own state.
TEST(StructuredGrammar, AfterReasoningFreesTheReasoningThenTheGrammarMasks) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  const int32_t end = 1;  // the special token standing for </think>
  auto factory = structured::AfterReasoning(output.Regex("(red|blue)-[0-2]+"), end, 64);
  std::set<int32_t> every;
  for (int32_t t = 0; t < 64; ++t) every.insert(t);
  auto c = factory->Start();
  auto other = factory->Start();
  std::vector<int32_t> tokens;
  std::vector<std::set<int32_t>> masks;
  const auto step = [&](int32_t token) {
    masks.push_back(Allowed(*c, 64));
    tokens.push_back(token);
    return c->Accept(token);
  };
  // Reasoning: anything, the grammar's refusals and EOS included, and nothing terminates.
  for (const std::string piece : {"a", "{", "red", "-", "1"}) ASSERT_TRUE(step(id[piece])) << piece;
  EXPECT_EQ(Allowed(*c, 64), every);
  ASSERT_TRUE(step(0));
  EXPECT_FALSE(c->IsTerminated());
  ASSERT_TRUE(step(end));
  // The answer: the regex from its start (the reasoning's "red-1" did not advance it).
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["red"], id["blue"], id["b"]}));
  EXPECT_FALSE(c->Accept(id["a"]));
  EXPECT_FALSE(c->Accept(end));  // a second end marker is the answer's, and not in it
  for (const std::string piece : {"blue", "-", "2"}) ASSERT_TRUE(step(id[piece])) << piece;
  EXPECT_FALSE(c->IsTerminated());
  ASSERT_TRUE(step(0));
  EXPECT_TRUE(c->IsTerminated());
  // The other sample is still reasoning.
  EXPECT_EQ(Allowed(*other, 64), every);
  EXPECT_FALSE(other->IsTerminated());
  // A fresh constraint fed the same tokens sees the same masks and ends the same way.
  auto replay = factory->Start();
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(Allowed(*replay, 64), masks[i]) << i;
    ASSERT_TRUE(replay->Accept(tokens[i])) << i;
  }
  EXPECT_TRUE(replay->IsTerminated());
}

// A prompt that leaves the model to open the reasoning (the reasoning parser's kMayOpen): the
// first token decides, as the parser does. The open token starts the reasoning, free until the
// end token; any other first token is the answer's, masked by the grammar from that first token.
TEST(StructuredGrammar, AfterReasoningThatMayOpenDecidesByTheFirstToken) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  const int32_t end = 1, open = 50;  // </think> and <think>, ids the grammar never allows
  std::set<int32_t> every;
  for (int32_t t = 0; t < 64; ++t) every.insert(t);
  auto factory = structured::AfterReasoning(output.Regex("(red|blue)-[0-2]+"), end, 64, open);
  // The first mask is the grammar's and the open token.
  auto answers = factory->Start();
  EXPECT_EQ(Allowed(*answers, 64), (std::set<int32_t>{id["red"], id["blue"], id["b"], open}));
  // Text that is not the grammar's is refused at once (the state stays the first token's).
  EXPECT_FALSE(answers->Accept(id["a"]));
  EXPECT_FALSE(answers->Accept(end));
  ASSERT_TRUE(answers->Accept(id["red"]));
  // Answered: the grammar alone, and the open token is no longer allowed.
  EXPECT_EQ(Allowed(*answers, 64), (std::set<int32_t>{id["-"]}));
  EXPECT_FALSE(answers->Accept(open));
  for (const std::string piece : {"-", "1"}) ASSERT_TRUE(answers->Accept(id[piece])) << piece;
  ASSERT_TRUE(answers->Accept(0));
  EXPECT_TRUE(answers->IsTerminated());
  // Opened: free (EOS included, nothing terminates) until the end token, then the grammar.
  auto thinks = factory->Start();
  ASSERT_TRUE(thinks->Accept(open));
  EXPECT_EQ(Allowed(*thinks, 64), every);
  for (const std::string piece : {"a", "{", "red"}) ASSERT_TRUE(thinks->Accept(id[piece])) << piece;
  EXPECT_FALSE(thinks->IsTerminated());
  ASSERT_TRUE(thinks->Accept(end));
  EXPECT_EQ(Allowed(*thinks, 64), (std::set<int32_t>{id["red"], id["blue"], id["b"]}));
  for (const std::string piece : {"blue", "-", "0"}) ASSERT_TRUE(thinks->Accept(id[piece]));
  ASSERT_TRUE(thinks->Accept(0));
  EXPECT_TRUE(thinks->IsTerminated());
}

TEST(StructuredOutputsSpec, ParsesOneKindAndNamesWhatIsWrong) {
  using Kind = structured::OutputSpec::Kind;
  const auto parse = [](const char* text) {
    return structured::ParseStructuredOutputs(OJson::parse(text));
  };
  EXPECT_EQ(parse(R"({"regex": "a+"})").text, "a+");
  EXPECT_EQ(parse(R"({"regex": "a+", "json": null, "json_object": false})").kind, Kind::kRegex);
  EXPECT_EQ(parse(R"({"grammar": "root ::= \"a\""})").kind, Kind::kGrammar);
  EXPECT_EQ(parse(R"({"choice": ["x", "y"]})").choices, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(parse(R"({"json_object": true, "disable_any_whitespace": true})").kind,
            Kind::kJsonObject);
  // A schema object keeps its key order; a schema given as text is parsed the same.
  const structured::OutputSpec object =
      parse(R"({"json": {"type": "object", "properties": {"z": {}, "a": {}}}})");
  EXPECT_EQ(object.kind, Kind::kJsonSchema);
  EXPECT_EQ(object.schema["properties"].begin().key(), "z");
  EXPECT_EQ(
      parse(R"({"json": "{\"type\": \"object\", \"properties\": {\"z\": {}, \"a\": {}}}"})").schema,
      object.schema);

  const auto error = [&](const char* text) { return ErrorOf([&] { parse(text); }); };
  EXPECT_THAT(
      error(R"({})"),
      HasSubstr("needs one of json, regex, choice, grammar, json_object or structural_tag"));
  EXPECT_THAT(error(R"({"json_object": false})"), HasSubstr("needs one of"));
  EXPECT_THAT(error(R"({"regex": "a", "choice": ["a"]})"),
              HasSubstr("not both 'regex' and 'choice'"));
  EXPECT_THAT(error(R"({"choice": []})"), HasSubstr("choice must be a non-empty list of strings"));
  EXPECT_THAT(error(R"({"choice": ["a", 1]})"),
              HasSubstr("structured_outputs.choice[] must be a string"));
  EXPECT_THAT(error(R"({"regex": 5})"), HasSubstr("structured_outputs.regex must be a string"));
  EXPECT_THAT(error(R"({"regex": ""})"), HasSubstr("structured_outputs.regex is empty"));
  EXPECT_THAT(error(R"({"json": "{not json"})"),
              HasSubstr("structured_outputs.json is not a JSON schema"));
  EXPECT_THAT(error(R"({"json": [1]})"),
              HasSubstr("structured_outputs.json must be a JSON schema"));
  EXPECT_THAT(error(R"({"whitespace_pattern": "x"})"),
              HasSubstr("structured_outputs.whitespace_pattern is not supported"));
  EXPECT_THAT(error(R"(["regex"])"), HasSubstr("structured_outputs must be an object"));
  // vLLM's option booleans change nothing here.
  EXPECT_EQ(parse(R"({"regex": "a", "disable_fallback": true, "disable_any_whitespace": false,
                      "disable_additional_properties": true})").kind,
            Kind::kRegex);
  EXPECT_THAT(error(R"({"regex": "a", "disable_fallback": 1})"),
              HasSubstr("structured_outputs.disable_fallback must be a boolean"));
}

// A schema given as text is parsed here, where the request's own depth check cannot see: nested
// past kMaxJsonDepth it is refused before it is parsed (a hundred thousand levels would overflow
// the stack where the value is next copied or dumped).
TEST(StructuredOutputsSpec, ASchemaAsTextNestedTooDeepIsRefused) {
  const auto error = [](const std::string& schema_text) {
    OJson value = OJson::object();
    value["json"] = schema_text;
    return ErrorOf([&] { structured::ParseStructuredOutputs(value); });
  };
  const auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_THAT(error(nested(kMaxJsonDepth)),
              HasSubstr("structured_outputs.json must be a JSON schema"));
  EXPECT_EQ(error(nested(kMaxJsonDepth + 1)),
            StrCat("structured_outputs.json nests deeper than ", kMaxJsonDepth, " levels"));
  EXPECT_THAT(error(nested(100000)), HasSubstr("nests deeper than"));
}

// An error quotes at most a few hundred characters of the value at fault: a schema may be
// megabytes, and the error goes back to the client and into logs.
TEST(StructuredOutputsSpec, ErrorsQuoteOnlyTheStartOfALongValue) {
  const std::string long_text(100000, 'x');
  const auto error = [](const OJson& value) {
    return ErrorOf([&] { structured::ParseStructuredOutputs(value); });
  };
  const std::vector<std::string> errors = {
      error(OJson{{"json", OJson::array({long_text})}}),                 // not a schema
      error(OJson{{"json", "{\"a\": \"" + long_text}}),                 // unterminated text
      error(OJson{{"choice", long_text}}),                               // not a list
      error(OJson{{"regex", OJson::array({long_text})}}),                // not a string
      error(OJson{{"json_object", long_text}}),                          // not a boolean
      error(OJson{{"disable_fallback", long_text}}),
      error(OJson{{long_text, true}}),                                   // not a key latent takes
      error(OJson::array({long_text})),                                  // not an object
  };
  for (const std::string& e : errors) {
    EXPECT_THAT(e, HasSubstr("structured_outputs"));
    EXPECT_THAT(e, HasSubstr("xxx..."));
    EXPECT_LT(e.size(), 500u) << e.substr(0, 300);
  }
  // Cut between characters, never inside one: the 200th byte quoted (after the dump's opening
  // quote) is the second of an é.
  const std::string e =
      error(OJson{{"choice", std::string(198, 'a') + "\xC3\xA9" + std::string(300, 'a')}});
  EXPECT_THAT(e, HasSubstr("\"" + std::string(198, 'a') + "..."));
  EXPECT_NO_THROW((void)OJson(e).dump());
}

TEST(StructuredGrammar, UnsupportedOrInvalidSchemasAreNamed) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  EXPECT_THAT(ErrorOf([&] {
                output.JsonSchema(OJson::parse(R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})"));
              }),
              HasSubstr("unsupported JSON schema keyword 'uniqueItems' at #/properties/tags"));
  EXPECT_THAT(ErrorOf([&] { output.JsonSchema(OJson::parse(R"({"anyOf": [{"not": {"type": "string"}}]})")); }),
              HasSubstr("'not' at #/anyOf/0"));
  EXPECT_THAT(ErrorOf([&] { output.JsonSchema(OJson::parse(R"({"type": "number", "multipleOf": 0.5})")); }),
              HasSubstr("'multipleOf' for type number"));
  EXPECT_THAT(ErrorOf([&] { output.JsonSchema(OJson::parse(R"({"type": "frobnicate"})")); }),
              HasSubstr("frobnicate"));
  EXPECT_THAT(ErrorOf([&] { output.JsonSchema(OJson::parse(R"({"properties": {"a": 3}})")); }),
              HasSubstr("#/properties/a must be an object or a boolean"));
  EXPECT_EQ(output.cached_grammars(), 0u);  // failures are not cached
}

// What XGrammar 0.2.9 would compile looser than the schema, with only a log line, is refused by
// name: allOf of several schemas (any JSON value), keywords beside the one it keeps ($ref, const,
// enum, anyOf, oneOf, allOf, in that order), an integer multipleOf it ignores, references out of
// the schema. What pydantic and OpenAPI commonly write still compiles.
TEST(StructuredGrammar, SchemasTheGrammarWouldLoosenAreRefused) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  const std::vector<std::pair<const char*, const char*>> refused = {
      {R"({"allOf": [{"type": "object", "required": ["a"]},
                     {"type": "object", "required": ["b"]}]})",
       "'allOf' with more than one schema at #"},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}},
          "allOf": [{"$ref": "#/$defs/B"}], "$defs": {"B": {"type": "object"}}})",
       "'type' beside 'allOf' at #"},
      {R"({"properties": {"x": {"anyOf": [{"type": "string"}], "minLength": 3}}})",
       "'minLength' beside 'anyOf' at #/properties/x"},
      {R"({"$ref": "#/$defs/A", "required": ["a"], "$defs": {"A": {"type": "object"}}})",
       "'required' beside '$ref' at #"},
      {R"({"enum": [1, 2], "anyOf": [{"type": "integer"}]})", "'anyOf' beside 'enum' at #"},
      {R"({"$ref": "other.json#/A"})", "only JSON pointers inside the schema"},
      {R"({"$ref": "#Foo"})", "only JSON pointers inside the schema"},
      {R"({"const": "a", "enum": ["b"]})", "'enum' beside 'const' at #"},
      {R"({"oneOf": [{"type": "integer"}], "maximum": 3})", "'maximum' beside 'oneOf' at #"},
      {R"({"type": ["integer", "null"], "multipleOf": 3, "minimum": 0})",
       "bounded on both sides or neither"},
      {R"({"type": "integer", "multipleOf": 1025})", "a whole number from 1 to 1024"},
      {R"({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 10000})",
       "at most 10,000 values"},
      {R"({"type": "object", "properties": {"age": {"minimum": 0}}})",
       "'minimum' at #/properties/age needs a 'type'"},
      {R"({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
       "'type' beside 'anyOf' at #"},
      {R"({"anyOf": [{"required": ["a"]}, {"type": "null"}]})",
       "'required' at #/anyOf/0 needs a 'type'"},
      {R"({"type": ["number", "null"], "multipleOf": 0.5})", "'multipleOf' for type number"},
      {R"({"type": "integer", "multipleOf": 2.5})", "a whole number from 1 to 1024"},
      {R"({"type": "integer", "multipleOf": 3, "minimum": 0})", "bounded on both sides or neither"},
      {R"({"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 100000})",
       "at most 10,000 values"},
  };
  for (const auto& [schema, error] : refused) {
    EXPECT_THAT(ErrorOf([&] { output.JsonSchema(OJson::parse(schema)); }), HasSubstr(error))
        << schema;
  }
  for (const char* schema : {
           R"({"enum": ["a", "b"], "type": "string", "title": "Color"})",
           // 2, not 3: a const no token of the test vocabulary can write admits no output.
           R"({"const": 2, "type": "integer"})",
           R"({"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "X"})",
           R"({"$defs": {"M": {"type": "object", "properties": {"a": {"type": "integer"}}}},
               "$ref": "#/$defs/M"})",
           R"({"allOf": [{"$ref": "#/$defs/M"}], "description": "one",
               "$defs": {"M": {"type": "object"}}})",
           R"({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100})",
           R"({"type": "integer", "multipleOf": 5})",
           R"({"type": "integer", "multipleOf": 5.0, "minimum": 0, "maximum": 9999})",
           R"({"type": "integer", "multipleOf": 1024, "exclusiveMinimum": 0,
               "exclusiveMaximum": 10001})",
           R"({"type": "integer", "multipleOf": 5, "minimum": -100000, "exclusiveMinimum": 0,
               "maximum": 100})",
           R"({"const": "cat", "enum": ["cat"], "type": "string"})",
           R"({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}})",
           R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})",
           R"({"description": "anything", "title": "A"})",
           R"({"definitions": {"A": {"type": "object"}}, "$ref": "#/definitions/A"})",
           R"({"$defs": {"N": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}}, "type": "object",
               "properties": {"next": {"$ref": "#/$defs/N"}}})"}) {
    EXPECT_EQ(ErrorOf([&] { output.JsonSchema(OJson::parse(schema)); }), "") << schema;
  }
}

TEST(StructuredGrammar, AVocabularyWithoutEosIsRefused) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})");
  EXPECT_THAT(ErrorOf([&] { structured::BuildGrammarVocabulary(tok, 2, {}); }), HasSubstr("no EOS token id"));
  const structured::GrammarVocabulary v = structured::BuildGrammarVocabulary(tok, 4, {1, 1});
  EXPECT_EQ(v.token_bytes.size(), 4u);
  EXPECT_EQ(v.token_bytes[0], "a");
  EXPECT_EQ(v.token_bytes[3], std::nullopt);
  EXPECT_EQ(v.stop_token_ids, (std::vector<int32_t>{1}));
}

// ---- tool_choice ----

TEST(StructuredToolChoice, NamedFunctionGivesItsParametersAndRequiredAnyCall) {
  const OJson tools = OJson::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}])");
  EXPECT_EQ(structured::ToolCallSchema(tools, OJson::parse(R"({"type": "function", "function": {"name": "get_weather"}})")),
            tools[0]["function"]["parameters"]);
  EXPECT_EQ(structured::ToolCallSchema(tools, OJson::parse(R"({"type": "function", "function": {"name": "now"}})")),
            OJson::parse(R"({"type": "object"})"));
  const OJson required = structured::ToolCallSchema(tools, "required");
  EXPECT_EQ(required["type"], "array");
  EXPECT_EQ(required["minItems"], 1);
  ASSERT_EQ(required["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(required["items"]["anyOf"][1]["properties"]["name"]["const"], "now");
  EXPECT_THAT(ErrorOf([&] { structured::ToolCallSchema(tools, OJson::parse(R"({"type": "function", "function": {"name": "x"}})")); }),
              HasSubstr("names function 'x', which is not in tools"));
  EXPECT_THAT(ErrorOf([&] { structured::ToolCallSchema(OJson::array(), "required"); }), HasSubstr("at least one tool"));
  EXPECT_THAT(ErrorOf([&] { structured::ToolCallSchema(tools, "auto"); }), HasSubstr("does not constrain"));
  // The schema compiles into a grammar.
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  EXPECT_NE(output.JsonSchema(required), nullptr);
}

// tool_choice "required" wraps every tool's parameters: their definitions move to the wrapper's
// root (two tools may both define "Item", differently) and their references follow, "#" to the
// tool's own root among them, so pydantic-made tools with nested models compile.
TEST(StructuredToolChoice, RequiredMovesEachToolsDefinitionsToTheRoot) {
  const OJson tools = OJson::parse(R"([
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}}, "required": ["item"],
        "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}},
      {"type": "function", "function": {"name": "tree", "parameters": {"type": "object",
        "properties": {"item": {"$ref": "#/definitions/Item"},
                       "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "definitions": {"Item": {"type": "string"}}}}}])");
  const OJson required = structured::ToolCallSchema(tools, "required");
  EXPECT_EQ(required["$defs"], OJson::parse(R"({"f0_Item": {"type": "object",
      "properties": {"n": {"type": "integer"}}}, "f1_Item": {"type": "string"}})"));
  const OJson& add = required["items"]["anyOf"][0]["properties"]["parameters"];
  const OJson& tree = required["items"]["anyOf"][1]["properties"]["parameters"];
  EXPECT_FALSE(add.contains("$defs"));
  EXPECT_FALSE(tree.contains("definitions"));
  EXPECT_EQ(add["properties"]["item"]["$ref"], "#/$defs/f0_Item");
  EXPECT_EQ(tree["properties"]["item"]["$ref"], "#/$defs/f1_Item");
  EXPECT_EQ(tree["properties"]["child"]["anyOf"][0]["$ref"],
            "#/items/anyOf/1/properties/parameters");
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  EXPECT_NE(output.JsonSchema(required), nullptr);
  // A named function keeps its schema as it is: it is the root there.
  EXPECT_EQ(structured::ToolCallSchema(tools, OJson::parse(R"({"type": "function",
      "function": {"name": "tree"}})")), tools[1]["function"]["parameters"]);
}

}  // namespace
}  // namespace latent

namespace latent {
namespace {

// ---- Structural tags (vLLM's response_format / structured_outputs structural_tag) ----

// The legacy form: after the trigger "<", one of the structures beginning with it.
const char* const kLegacyTag = R"({"type": "structural_tag", "structures": [{"begin": "<x>",
    "schema": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
    "end": "</x>"}], "triggers": ["<"]})";

structured::OutputSpec TagSpec(const std::string& tag) {
  return structured::ParseStructuredOutputs(OJson{{"structural_tag", tag}});
}

TEST(StructuredGrammar, StructuralTagConstrainsOnlyFromATriggerToItsEnd) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  auto c = output.Constraint(TagSpec(kLegacyTag))->Start();
  // Free text: any token, EOS too.
  const std::set<int32_t> free = Allowed(*c, 64);
  for (const std::string piece : {"red", "{", "a", "1", "\"", "x"}) {
    EXPECT_TRUE(free.count(id[piece])) << piece;
  }
  EXPECT_TRUE(free.count(0));
  ASSERT_TRUE(AcceptAll(*c, id, {"red", " ", "{", "<x>"}));
  // Begun: the schema's JSON, with one whitespace character at most between its tokens.
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["{"]}));
  EXPECT_FALSE(c->Accept(id["red"]));
  ASSERT_TRUE(AcceptAll(*c, id, {"{", " ", "\"a\"", ":", " "}));
  EXPECT_FALSE(c->Accept(id[" "]));  // a second whitespace character
  EXPECT_FALSE(c->Accept(id["1"]));  // not a boolean
  ASSERT_TRUE(AcceptAll(*c, id, {"true", "}"}));
  EXPECT_FALSE(c->Accept(id["red"]));  // the end comes next
  EXPECT_FALSE(c->Accept(0));
  ASSERT_TRUE(AcceptAll(*c, id, {"</x>", "blue", "a"}));  // then free text again
  ASSERT_TRUE(c->Accept(0));
  EXPECT_TRUE(c->IsTerminated());
  // The trigger alone: the rest of a begin must follow.
  auto d = output.Constraint(TagSpec(kLegacyTag))->Start();
  ASSERT_TRUE(d->Accept(id["<"]));
  EXPECT_EQ(Allowed(*d, 64), (std::set<int32_t>{id["x"]}));
  ASSERT_TRUE(AcceptAll(*d, id, {"x", ">"}));
  EXPECT_EQ(Allowed(*d, 64), (std::set<int32_t>{id["{"]}));
}

// XGrammar's own format, as given: here a tag that must come first and is the whole output.
TEST(StructuredGrammar, StructuralTagFormatIsXGrammarsAndItsErrorsAreNamed) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  const OJson tag = OJson::parse(R"({"type": "structural_tag", "format": {
      "type": "triggered_tags", "triggers": ["<"], "at_least_one": true, "stop_after_first": true,
      "tags": [{"begin": "<x>", "end": "</x>", "content": {"type": "json_schema",
                "json_schema": {"enum": ["red", "blue"]}, "max_whitespace_cnt": 1}}]}})");
  auto c = output.Constraint(TagSpec(tag.dump()))->Start();
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{id["<"], id["<x>"]}));
  ASSERT_TRUE(AcceptAll(*c, id, {"<x>", "\"", "blue", "\"", "</x>"}));
  EXPECT_EQ(Allowed(*c, 64), (std::set<int32_t>{0}));
  ASSERT_TRUE(c->Accept(0));
  EXPECT_TRUE(c->IsTerminated());

  const auto error = [&](const std::string& tag_text) {
    return ErrorOf([&] { output.Constraint(TagSpec(tag_text)); });
  };
  const std::string bad_type = error(R"({"format": {"type": "nonsense"}})");
  EXPECT_THAT(bad_type, HasSubstr("the structural tag cannot be compiled: "));
  EXPECT_THAT(bad_type, HasSubstr("nonsense"));
  EXPECT_THAT(bad_type, ::testing::Not(HasSubstr(".cc:")));
  EXPECT_THAT(error(R"({"format": {"type": "triggered_tags", "triggers": "<", "tags": []}})"),
              HasSubstr("the structural tag cannot be compiled: "));
  // Why a trigger that starts no begin is refused before XGrammar sees it: XGrammar's own refusal
  // is a failed internal check that names nothing the caller wrote.
  EXPECT_THAT(ErrorOf([&] {
                output.StructuralTag(R"({"type": "structural_tag", "format": {
                    "type": "triggered_tags", "triggers": ["<", "["], "tags": [{"begin": "<x>",
                    "content": {"type": "const_string", "value": "a"}, "end": "</x>"}]}})");
              }),
              HasSubstr("XGrammar refused it without saying why"));
  // Its schemas are held to what the grammar can enforce, as response_format's are.
  EXPECT_EQ(error(R"({"structures": [{"begin": "<x>", "end": "</x>", "schema": {"type": "object",
                      "properties": {"t": {"type": "array", "uniqueItems": true}}}}],
                      "triggers": ["<"]})"),
            "the structural tag's schema at format.tags[0].content: unsupported JSON schema "
            "keyword 'uniqueItems' at #/properties/t");
}

TEST(StructuredOutputsSpec, StructuralTagsInBothFormsAndWhatIsWrongNamed) {
  const auto parse = [](const OJson& value) {
    return structured::ParseStructuredOutputs(OJson{{"structural_tag", value}});
  };
  const structured::OutputSpec legacy = parse(
      R"({"structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}],
          "triggers": ["<f"]})");
  EXPECT_EQ(legacy.kind, structured::OutputSpec::Kind::kStructuralTag);
  EXPECT_EQ(legacy.schema.dump(),
            R"({"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<f"],)"
            R"("tags":[{"type":"tag","begin":"<f>","content":{"type":"json_schema","json_schema":)"
            R"({"type":"object"},"max_whitespace_cnt":1},"end":"</f>"}]}})");
  // XGrammar's format as given; the object itself is taken as its text is.
  const OJson format = OJson::parse(
      R"({"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}})");
  EXPECT_EQ(parse(format.dump()).schema, format);
  EXPECT_EQ(parse(format).schema, format);
  EXPECT_EQ(parse(R"({"format": {"type": "const_string", "value": "hi"}})").schema, format);

  const auto error = [&](const OJson& value) { return ErrorOf([&] { parse(value); }); };
  const std::string field = "structured_outputs.structural_tag";
  const auto with = [](const char* structures, const char* triggers) {
    return StrCat(R"({"structures": )", structures, R"(, "triggers": )", triggers, "}");
  };
  const char* const ok = R"([{"begin": "<f>", "schema": {}, "end": "</f>"}])";
  EXPECT_THAT(error("{\"structures\": ["), HasSubstr(field + " is not JSON: "));
  EXPECT_EQ(error(R"({"triggers": ["<"]})"),
            field + " needs 'format' (XGrammar's structural tag format) or 'structures' and "
                    "'triggers'");
  EXPECT_EQ(error(StrCat(R"({"structures": )", ok, "}")),
            field + " needs 'triggers' beside 'structures'");
  EXPECT_EQ(error(R"({"type": "structural_tag"})"),
            field + " needs 'format' (XGrammar's structural tag format) or 'structures' and "
                    "'triggers'");
  EXPECT_EQ(error(with("[]", R"(["<"])")),
            field + R"(.structures must be a non-empty list of {"begin", "schema", "end"} )"
                    "objects, got []");
  EXPECT_EQ(error(with(ok, R"("<")")),
            field + R"(.triggers must be a non-empty list of strings, got "<")");
  EXPECT_EQ(error(with(ok, R"(["<f", ""])")),
            field + R"(.triggers[1] must be a non-empty string, got "")");
  EXPECT_EQ(error(with("[3]", R"(["<"])")),
            field + R"(.structures[0] must be an object {"begin", "schema", "end"}, got 3)");
  EXPECT_EQ(error(with(R"([{"schema": {}, "end": "</f>"}])", R"(["<"])")),
            field + ".structures[0] needs 'begin' (a string)");
  EXPECT_EQ(error(with(R"([{"begin": "<f>", "schema": {}, "end": 1}])", R"(["<"])")),
            field + ".structures[0].end must be a string, got 1");
  EXPECT_EQ(error(with(R"([{"begin": "<f>", "end": "</f>"}])", R"(["<"])")),
            field + ".structures[0] needs 'schema' (a JSON schema object)");
  EXPECT_EQ(error(with(R"([{"begin": "<f>", "schema": "x", "end": "</f>"}])", R"(["<"])")),
            field + R"(.structures[0].schema must be a JSON schema (an object), got "x")");
  EXPECT_EQ(error(with(ok, R"(["<f", "["])")),
            field + R"(.triggers[1] "[" starts no begin (each trigger must be a prefix of some )"
                    "begin)");
  EXPECT_EQ(error(with(ok, R"(["["])")),
            field + R"(.structures[0].begin "<f>" starts with no trigger (it must start with )"
                    "exactly one of " + field + ".triggers)");
  EXPECT_THAT(error(with(ok, R"(["<", "<f"])")), HasSubstr("starts with more than one trigger"));
  // As vLLM: "structures" makes it the legacy form, whatever else is there; without it, the
  // format form, stray "triggers" ignored.
  EXPECT_EQ(parse(StrCat(R"({"format": {"type": "nonsense"}, "structures": )", ok,
                         R"(, "triggers": ["<f"]})")).schema["format"]["type"],
            "triggered_tags");
  EXPECT_EQ(parse(R"({"format": {"type": "const_string", "value": "hi"}, "triggers": ["<"]})")
                .schema,
            format);
  EXPECT_EQ(error(R"({"type": "json", "format": {}})"),
            field + R"(.type must be "structural_tag", got "json")");
  EXPECT_EQ(error(R"({"format": "x"})"), field + R"(.format must be an object, got "x")");
  EXPECT_EQ(error(5), field + " must be a structural tag (an object), got 5");
  // XGrammar's format: a trigger no tag begins with, however deep, is named where it is.
  EXPECT_EQ(error(R"({"format": {"type": "sequence", "elements": [{"type": "const_string",
      "value": "a"}, {"type": "triggered_tags", "triggers": ["<a", "["], "tags": [
      {"begin": "<a>", "content": {"type": "any_text"}, "end": "</a>"}]}]}})"),
            field + R"(.format.elements[1].triggers[1] "[" starts no begin (each trigger must be )"
                    "a prefix of some begin)");
  // Text the request's depth check cannot see into.
  EXPECT_EQ(error(std::string(100000, '[') + std::string(100000, ']')),
            StrCat(field, " nests deeper than ", kMaxJsonDepth, " levels"));
}

// Real tool lists are tens of tools; XGrammar compiles about 400 tags a second on the request's
// worker, and a long list's prefix checks were quadratic. A list past the cap is refused first.
TEST(StructuredOutputsSpec, StructuralTagsPastTheCapAreRefusedNamingIt) {
  const auto parse = [](const OJson& value) {
    return structured::ParseStructuredOutputs(OJson{{"structural_tag", value}});
  };
  const auto legacy = [](size_t structures, size_t triggers) {
    OJson tag = {{"structures", OJson::array()}, {"triggers", OJson::array()}};
    for (size_t i = 0; i < structures; ++i) {
      tag["structures"].push_back(
          {{"begin", StrCat("<f", i, ">")}, {"schema", OJson::object()}, {"end", "</f>"}});
    }
    for (size_t i = 0; i < triggers; ++i) tag["triggers"].push_back(StrCat("<f", i, ">"));
    return tag;
  };
  const size_t cap = structured::kMaxStructuralTagItems;
  EXPECT_EQ(cap, 1024u);
  EXPECT_EQ(parse(legacy(cap, cap)).kind, structured::OutputSpec::Kind::kStructuralTag);
  const std::string field = "structured_outputs.structural_tag";
  EXPECT_EQ(ErrorOf([&] { parse(legacy(cap + 1, 1)); }),
            field + ".structures holds more than 1024 structures, the most a structural tag may "
                    "have");
  EXPECT_EQ(ErrorOf([&] { parse(legacy(1, cap + 1)); }),
            field + ".triggers holds more than 1024 triggers, the most a structural tag may have");
  // A list 50 times the cap is refused as soon (it was minutes of work).
  EXPECT_THAT(ErrorOf([&] { parse(legacy(50 * cap, 50 * cap)); }), HasSubstr("more than 1024"));

  // XGrammar's format: counted over the whole tag, however the lists are nested.
  const auto tags = [](size_t n) {
    OJson list = OJson::array();
    for (size_t i = 0; i < n; ++i) {
      list.push_back({{"begin", StrCat("<f", i, ">")}, {"content", {{"type", "any_text"}}},
                      {"end", "</f>"}});
    }
    return OJson{{"type", "triggered_tags"}, {"triggers", {"<f"}}, {"tags", list}};
  };
  const auto sequence = [](OJson a, OJson b) {
    return OJson{{"format", {{"type", "sequence"}, {"elements", {a, b}}}}};
  };
  EXPECT_EQ(parse(sequence(tags(cap / 2), tags(cap / 2))).kind,
            structured::OutputSpec::Kind::kStructuralTag);
  EXPECT_EQ(ErrorOf([&] { parse(sequence(tags(cap / 2), tags(cap / 2 + 1))); }),
            field + ".format holds more than 1024 tags in all, the most a structural tag may have");
  OJson many_triggers = tags(1);
  for (size_t i = 0; i < cap; ++i) many_triggers["triggers"].push_back("<f");
  EXPECT_THAT(ErrorOf([&] { parse(OJson{{"format", many_triggers}}); }),
              HasSubstr(".format holds more than 1024 triggers in all"));
}

// XGrammar compiled a "sequence" of 10k const_strings in 10 s and half a GiB (the square of its
// length) and an "or" of 100k in half a minute: every format object is counted over the whole
// tag, "sequence" and "or" elements, tags and their contents alike, and past the cap refused.
TEST(StructuredOutputsSpec, StructuralTagFormatsPastTheCapAreRefusedNamingIt) {
  const auto parse = [](const OJson& value) {
    return structured::ParseStructuredOutputs(OJson{{"structural_tag", value}});
  };
  // `type` of `n` const_strings: n + 1 formats.
  const auto list = [](const char* type, size_t n) {
    OJson elements = OJson::array();
    for (size_t i = 0; i < n; ++i) elements.push_back({{"type", "const_string"}, {"value", "x"}});
    return OJson{{"type", type}, {"elements", std::move(elements)}};
  };
  const size_t cap = structured::kMaxStructuralTagFormats;
  EXPECT_EQ(cap, 4096u);
  const std::string field = "structured_outputs.structural_tag";
  const std::string past_the_cap =
      field + ".format holds more than 4096 formats in all, the most a structural tag may have";
  for (const char* type : {"sequence", "or"}) {
    EXPECT_EQ(parse(OJson{{"format", list(type, cap - 1)}}).kind,
              structured::OutputSpec::Kind::kStructuralTag)
        << type;
    EXPECT_EQ(ErrorOf([&] { parse(OJson{{"format", list(type, cap)}}); }), past_the_cap) << type;
  }
  // However they are nested: an "or" of two sequences, the cap in all, then one format more.
  const OJson nested = {{"type", "or"},
                        {"elements", {list("sequence", cap / 2), list("sequence", cap / 2 - 3)}}};
  EXPECT_EQ(parse(OJson{{"format", nested}}).kind, structured::OutputSpec::Kind::kStructuralTag);
  OJson one_more = nested;
  one_more["elements"][1]["elements"].push_back({{"type", "const_string"}, {"value", "y"}});
  EXPECT_EQ(ErrorOf([&] { parse(OJson{{"format", one_more}}); }), past_the_cap);
  // Tags' contents count too: kMaxStructuralTagItems tags, a content each, are in.
  OJson tags = OJson::array();
  for (size_t i = 0; i < structured::kMaxStructuralTagItems; ++i) {
    tags.push_back({{"begin", StrCat("<f", i, ">")}, {"content", list("sequence", 1)},
                    {"end", "</f>"}});
  }
  OJson triggered = {{"type", "triggered_tags"}, {"triggers", {"<f"}}, {"tags", tags}};
  EXPECT_EQ(parse(OJson{{"format", triggered}}).kind,
            structured::OutputSpec::Kind::kStructuralTag);
  triggered["tags"][0]["content"] = list("sequence", cap);
  EXPECT_EQ(ErrorOf([&] { parse(OJson{{"format", triggered}}); }), past_the_cap);
  // A list 25 times the cap (a 100k-element "or", 29 s to compile) is refused as soon.
  EXPECT_EQ(ErrorOf([&] { parse(OJson{{"format", list("or", 25 * cap)}}); }), past_the_cap);
}

// XGrammar infers a format's type when it has none (trying tag, const_string, json_schema, ...
// in turn) and takes qwen_xml_parameter's schema too: their schemas are checked as
// json_schema's, and an untyped triggered_tags' triggers as a typed one's.
TEST(StructuredGrammar, StructuralTagSchemasAndTriggersAreCheckedWhateverTheFormatsType) {
  std::map<std::string, int32_t> id;
  structured::StructuredOutput output(SmallVocabulary(&id));
  const auto error = [&](const std::string& tag_text) {
    return ErrorOf([&] { output.Constraint(TagSpec(tag_text)); });
  };
  const std::string unique_items = R"({"type": "array", "uniqueItems": true})";
  EXPECT_EQ(error(StrCat(R"({"format": {"json_schema": )", unique_items, "}}")),
            "the structural tag's schema at format: unsupported JSON schema keyword "
            "'uniqueItems' at #");
  EXPECT_EQ(error(StrCat(R"({"format": {"type": "qwen_xml_parameter", "json_schema": {"type": )",
                         R"("object", "properties": {"t": )", unique_items, "}}}}")),
            "the structural tag's schema at format: unsupported JSON schema keyword "
            "'uniqueItems' at #/properties/t");
  EXPECT_EQ(error(StrCat(R"({"format": {"begin": "<x>", "end": "</x>", "content": {)",
                         R"("json_schema": )", unique_items, "}}}")),
            "the structural tag's schema at format.content: unsupported JSON schema keyword "
            "'uniqueItems' at #");
  // Untyped, so XGrammar infers triggered_tags: "[" starts no begin.
  const std::string field = "structured_outputs.structural_tag";
  EXPECT_EQ(error(R"({"format": {"triggers": ["<", "["], "tags": [{"begin": "<x>",
                      "content": {"type": "any_text"}, "end": "</x>"}]}})"),
            field + R"(.format.triggers[1] "[" starts no begin (each trigger must be a prefix )"
                    "of some begin)");
  // Typed triggered_tags with at_least_one and stop_after_first use no trigger: none is refused.
  EXPECT_NE(output.Constraint(TagSpec(R"({"format": {"type": "triggered_tags",
                "triggers": ["<", "["], "at_least_one": true, "stop_after_first": true,
                "tags": [{"begin": "<x>", "content": {"type": "const_string", "value": "a"},
                          "end": "</x>"}]}})")),
            nullptr);
  // Token triggers: a trigger token that is no tag's begin token, given by text or by id.
  const auto token_tag = [&](const std::string& triggers) {
    return StrCat(R"({"format": {"type": "token_triggered_tags", "trigger_tokens": )", triggers,
                  R"(, "tags": [{"begin": {"token": "<x>"}, "content": {"type": "const_string",
                  "value": "a"}, "end": "</x>"}]}})");
  };
  EXPECT_EQ(error(token_tag(R"(["<x>", "red"])")),
            R"(the structural tag's format.trigger_tokens[1] "red" begins no tag (each trigger )"
            "token must be some tag's begin token)");
  EXPECT_THAT(error(token_tag(StrCat("[", id["red"], "]"))),
              HasSubstr(StrCat("format.trigger_tokens[0] ", id["red"], " begins no tag")));
  auto c = output.Constraint(TagSpec(token_tag(StrCat("[", id["<x>"], "]"))))->Start();
  ASSERT_TRUE(AcceptAll(*c, id, {"red", "<x>", "a", "</x>"}));
  // A token text not in the vocabulary is XGrammar's to name.
  EXPECT_THAT(error(token_tag(R"(["<nope>"])")), HasSubstr("<nope>"));

  // No error, XGrammar's own included, shows the C++ condition of a failed check.
  for (const std::string tag : {
           R"({"format": {"type": "or", "elements": []}})",
           R"({"format": {"type": "sequence", "elements": []}})",
           R"({"format": {"type": "triggered_tags", "triggers": "<", "tags": []}})",
           R"({"format": {"type": "tag", "begin": "<x>", "end": "</x>"}})",
           R"({"format": {"elements": [{"type": "nonsense"}]}})",
       }) {
    const std::string e = error(tag);
    EXPECT_THAT(e, HasSubstr("the structural tag cannot be compiled: ")) << tag;
    EXPECT_THAT(e, ::testing::Not(HasSubstr("heck failed"))) << e;
    EXPECT_THAT(e, ::testing::Not(HasSubstr("is false"))) << e;
  }
}

}  // namespace
}  // namespace latent
