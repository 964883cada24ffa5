#include "model/deepseek_model.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "base/profile.h"
#include "kernels/kernel_table.h"
#include "kernels/linear.h"

namespace latent::model {

DeepseekModel::DeepseekModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekVariant variant,
                             const LoadOptions& options)
    : config_(std::move(config)),
      ckpt_(std::move(ckpt)),
      variant_(variant),
      weights_(LoadDeepseekWeights(config_, ckpt_, options)),
      dims_(MlaDimsOf(config_)),
      rope_(ops::Rope::FromConfig(config_.rope, config_.qk_rope_head_dim, config_.qk_head_dim(),
                                  variant.rope_interleaved, /*round_bf16=*/false)),
      index_rope_(ops::Rope::FromConfig(config_.rope, config_.qk_rope_head_dim,
                                        config_.qk_head_dim(), variant.index_rope_interleaved,
                                        /*round_bf16=*/false)) {}

void DeepseekModel::Forward(const ForwardBatch& batch, AttentionForm form,
                            float* logits, ForwardTrace* trace) const {
  LATENT_PROFILE_SCOPE(kStep);
  const auto& k = kernels::BestKernels();
  const int64_t tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t d = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  batch.Validate();

  std::vector<float> hidden(tokens * d), normed(tokens * d), branch(tokens * d);  // [T, D]
  for (int64_t t = 0; t < tokens; ++t) {
    LATENT_PROFILE_SCOPE(kEmbed);
    const int32_t id = batch.token_ids[t];
    if (id < 0 || id >= config_.vocab_size) {
      Fail("token id ", id, " is outside the vocabulary (size ", config_.vocab_size, ")");
    }
    k.dequant_row(weights_.embed, id, &hidden[t * d]);
  }

  DsaSelection selection;  // Carried across layers: GLM's shared layers reuse the last one.
  if (trace != nullptr && config_.is_dsa()) trace->selected.assign(config_.num_hidden_layers, {});
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const LayerWeights& layer = weights_.layers[l];
    {
      LATENT_PROFILE_SCOPE(kNorm);
      k.rms_norm(hidden.data(), tokens, d, layer.input_norm.data, layer.input_norm.dtype, eps,
                 normed.data());
    }
    DsaLayer dsa;
    if (config_.is_dsa()) {
      dsa.indexer = layer.indexer ? &*layer.indexer : nullptr;
      dsa.rope = &index_rope_;
      dsa.dims = {config_.index_n_heads, config_.index_head_dim, config_.index_topk};
      dsa.selection = &selection;
    }
    MlaAttentionForward(dims_, layer.attention, rope_, l, batch, normed.data(), d, form,
                        config_.is_dsa() ? &dsa : nullptr, branch.data());
    if (trace != nullptr && config_.is_dsa()) trace->selected[l] = selection;
    {
      LATENT_PROFILE_SCOPE(kResidual);
      for (int64_t i = 0; i < tokens * d; ++i) hidden[i] += branch[i];
    }
    {
      LATENT_PROFILE_SCOPE(kNorm);
      k.rms_norm(hidden.data(), tokens, d, layer.post_attention_norm.data,
                 layer.post_attention_norm.dtype, eps, normed.data());
    }
    if (layer.moe) {
      std::vector<int32_t>* chosen = nullptr;
      if (trace != nullptr) {
        trace->experts.resize(config_.num_hidden_layers);
        chosen = &trace->experts[l];
      }
      MoeForward(config_, *layer.moe, variant_.route, normed.data(), tokens, branch.data(), chosen);
    } else {
      LATENT_PROFILE_SCOPE(kDenseMlp);
      MlpForward(*layer.dense, normed.data(), tokens, branch.data());
    }
    LATENT_PROFILE_SCOPE(kResidual);
    for (int64_t i = 0; i < tokens * d; ++i) hidden[i] += branch[i];
  }

  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  std::vector<float> last(rows * d);  // [R, D]
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = batch.logits_rows[r];
    LATENT_CHECK(t >= 0 && t < tokens);
    std::copy(&hidden[t * d], &hidden[(t + 1) * d], &last[r * d]);
  }
  {
    LATENT_PROFILE_SCOPE(kNorm);
    k.rms_norm(last.data(), rows, d, weights_.final_norm.data, weights_.final_norm.dtype, eps,
               last.data());
  }
  LATENT_PROFILE_SCOPE(kLmHead);
  kernels::Linear(last.data(), rows, weights_.lm_head, logits);
}

}  // namespace latent::model
