// model::ExpandedPositions: which positions of a request's prompt run the expanded MLA form under
// --attention auto, expanded and absorbed.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <ostream>

#include "model/model.h"
#include "model/model_config.h"
#include "model/attention_dims.h"
#include "ops/mla_attention.h"

namespace latent::cache {
void PrintTo(const RegimeBounds& b, std::ostream* os) {
  *os << "{selected " << b.selected << ", causal " << b.causal << "}";
}
}  // namespace latent::cache

namespace latent::model {
namespace {

using cache::RegimeBounds;

// DeepSeek V3's attention dims; with index_topk, V3.2's DSA.
ModelConfig V3Attention(int64_t index_topk) {
  ModelConfig c;
  c.num_attention_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.index_topk = index_topk;
  c.index_n_heads = index_topk > 0 ? 64 : 0;
  c.index_head_dim = index_topk > 0 ? 128 : 0;
  return c;
}

// Expanded costs fewer FLOPs than absorbed from 171 prompt tokens at these dims
// (ops::PreferExpanded: 768 extra per attended token and query against 512 x 256 per attended
// token once).
TEST(ExpandedPositions, AutoExpandsLongPromptsWhole) {
  const ModelConfig c = V3Attention(0);
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 170), RegimeBounds::Both(0));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 171), RegimeBounds::Both(171));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 100000), RegimeBounds::Both(100000));
}

// Under DSA a position past index_topk attends the positions it selected: absorbed, as its decode
// steps do; the prompt's first index_topk positions attend causally and expand as a prompt of
// that length would.
TEST(ExpandedPositions, AutoExpandsOnlyTheCausalPositionsOfADsaPrompt) {
  const ModelConfig c = V3Attention(2048);
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 100), RegimeBounds::Both(0));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 1000), RegimeBounds::Both(1000));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 2048), RegimeBounds::Both(2048));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 8192), RegimeBounds::Both(2048));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 100000), RegimeBounds::Both(2048));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 2049), RegimeBounds::Both(2048));
  // A selection shorter than the expanded form's break-even: all absorbed.
  EXPECT_FALSE(ops::PreferExpanded(MlaDimsOf(c), 64));
  EXPECT_EQ(ExpandedPositions(V3Attention(64), AttentionForm::kAuto, 8192), RegimeBounds::Both(0));
}

// KPool (GLM-5-Next) selects from the first position that sees more complete pools than it keeps:
// with pools of 16 and index_topk 2048, position 2063 (2064 / 16 = 129 pools > 128).
TEST(ExpandedPositions, KPoolSelectsFromItsFirstPoolPastTopk) {
  ModelConfig c = V3Attention(2048);
  c.index_kpool = 16;
  EXPECT_EQ(FirstSelectingPosition(c), 2063);
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 8192), RegimeBounds::Both(2063));
  c.index_topk = 2040;  // 127 pools kept: selects from 128 pools, position 2047
  EXPECT_EQ(FirstSelectingPosition(c), 2047);
}

// A DSA model whose other layers attend causally throughout (dots3_note's full_attention and
// sliding-window layers) keeps a long prompt expanded there, and switches the selecting layers
// to the absorbed form where the selection starts, as every DSA model does.
TEST(ExpandedPositions, DsaCausalLayersKeepTheWholePromptExpanded) {
  ModelConfig c = V3Attention(2048);
  c.dsa_causal_layers = true;
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 8192), (RegimeBounds{2048, 8192}));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 1000), RegimeBounds::Both(1000));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 100), RegimeBounds::Both(0));
  // A selection shorter than the break-even: the selecting layers all absorbed, the others not.
  c.index_topk = 64;
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 8192), (RegimeBounds{0, 8192}));
  EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAuto, 100), RegimeBounds::Both(0));
  EXPECT_EQ((RegimeBounds{0, 8192}).For(/*selects=*/true), 0);
  EXPECT_EQ((RegimeBounds{0, 8192}).For(/*selects=*/false), 8192);
}

TEST(ExpandedPositions, ForcedFormsHoldForEveryPosition) {
  for (const int64_t topk : {0, 2048}) {
    const ModelConfig c = V3Attention(topk);
    EXPECT_EQ(ExpandedPositions(c, AttentionForm::kExpanded, 8192),
              RegimeBounds::Both(std::numeric_limits<int64_t>::max()));
    EXPECT_EQ(ExpandedPositions(c, AttentionForm::kAbsorbed, 8192), RegimeBounds::Both(0));
  }
}

}  // namespace
}  // namespace latent::model
