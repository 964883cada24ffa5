#pragma once
// The decoder of the KDA hybrids whose layers are a plain residual stream (kimi_linear,
// bailing_hybrid): each layer's attention is a KDA layer (per-sequence state) or MLA, then the
// family's FeedForward. Families differ only in their tensors, config and KDA gate form.

#include <utility>

#include "base/dump.h"
#include "base/profile.h"
#include "model/deepseek_model.h"
#include "model/kda_attention.h"

namespace latent::model {

class HybridKdaModel : public DeepseekModel {
 public:
  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override {
    LATENT_PROFILE_SCOPE(kStep);
    const ModelConfig& c = config();
    Activations a = Start(batch);
    Embed(batch, a.hidden.data());
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      RmsNorm(a.hidden.data(), a.tokens, layer(l).input_norm, a.normed.data());
      if (c.IsLinearAttentionLayer(l)) {
        KdaAttentionForward(kda_dims_, *layer(l).kda, gate_, static_cast<float>(c.rms_norm_eps), l,
                            batch, a.normed.data(), c.hidden_size, a.branch.data());
      } else {
        MlaAttention(l, batch, a.normed.data(), form, /*dsa=*/nullptr, a.branch.data());
      }
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      RmsNorm(a.hidden.data(), a.tokens, layer(l).post_attention_norm, a.normed.data());
      FeedForward(l, a.normed.data(), a.tokens, a.branch.data(), trace);
      AddResidual(a.hidden.data(), a.branch.data(), a.tokens);
      dump::Tensor("hidden", l, a.hidden.data(), a.tokens, c.hidden_size);
    }
    Head(batch, a.hidden.data(), logits);
  }

 protected:
  HybridKdaModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekTensorList tensors,
                 const LoadOptions& options, KdaForgetGateKind gate)
      : DeepseekModel(std::move(config), std::move(ckpt), tensors, options),
        kda_dims_{this->config().linear_num_heads, this->config().linear_head_dim,
                  this->config().linear_conv_kernel},
        gate_(gate) {}

 private:
  ops::KdaDims kda_dims_;
  KdaForgetGateKind gate_;
};

}  // namespace latent::model
