// The DeepSeek-family decoder (V2, V3, Kimi K2): embeddings, MLA + MLP/MoE layers, final norm,
// LM head. The architecture files (arch/) supply only what differs: rotary pairing and router.
#pragma once

#include <memory>

#include "model/deepseek_moe.h"
#include "model/deepseek_weights.h"
#include "model/mla_attention.h"
#include "model/model.h"
#include "ops/rope.h"
#include "weights/checkpoint.h"

namespace latent::model {

struct DeepseekVariant {
  bool rope_interleaved = true;  // Rotary pairs adjacent (V2 complex form, V3 rope_interleave).
  RouteFn route = nullptr;       // Router of the MoE layers.
  bool index_rope_interleaved = false;  // DSA indexer pairing (V3.2 half-split, GLM-5 adjacent).
};

class DeepseekModel : public Model {
 public:
  DeepseekModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekVariant variant,
                const LoadOptions& options = {});

  const ModelConfig& config() const override { return config_; }
  void Forward(const ForwardBatch& batch, AttentionForm form,
               float* logits, ForwardTrace* trace) const override;

 private:
  ModelConfig config_;
  weights::Checkpoint ckpt_;  // Owns the mapped files the weight views point into.
  DeepseekVariant variant_;
  DeepseekWeights weights_;
  MlaDims dims_;
  ops::Rope rope_;
  ops::Rope index_rope_;  // DSA models only.
};

}  // namespace latent::model
