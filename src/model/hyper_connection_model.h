#pragma once
// The decoder of the families whose residual is N hyper-connection streams per token (hy_v4,
// glm5_next; ops/hyper_connections.h): around each block a hyper-connection collapses the
// streams into the block's input and writes the block's output back. Attention is MLA (with the
// DSA indexer where the layer has one) or, on a hybrid's linear-attention layers, KDA
// (DeepseekModel::EnableKda). The head collapses the streams with its learned weights (hc_head)
// or, without them, takes their mean (GLM-5-Next). The config says which hyper-connection form:
// hc_sinkhorn_iters > 0 is mHC (comb mixing the streams, Sinkhorn-normalised; no eps on post).

#include "model/deepseek_model.h"
#include "ops/hyper_connections.h"

namespace latent::model {

// The hyper-connections' dims from the config.
ops::HyperConnectionDims HyperConnectionDimsOf(const ModelConfig& config);

class HyperConnectionModel : public DeepseekModel {
 public:
  void Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
               ForwardTrace* trace) const override;

 protected:
  HyperConnectionModel(ModelConfig config, weights::Checkpoint ckpt, DeepseekTensorList tensors,
                       const LoadOptions& options);

 private:
  // x [T, D] = the block input the hyper-connection `w` collapses from streams [T, N, D]; its gates.
  ops::HyperGates Collapse(const ops::HyperConnectionWeights& w, const float* streams,
                           int64_t tokens, float* x) const;
  // streams <- post * branch [T, D] + the residual (the streams, or mHC's comb^T streams).
  void Expand(const ops::HyperGates& gates, const float* branch, int64_t tokens,
              float* streams) const;

  ops::HyperConnectionDims hc_;
};

}  // namespace latent::model
