#include "model/hyper_connection_model.h"

#include <utility>

#include "base/dump.h"
#include "base/profile.h"

namespace latent::model {

ops::HyperConnectionDims HyperConnectionDimsOf(const ModelConfig& c) {
  ops::HyperConnectionDims d;
  d.streams = c.hc_mult;
  d.hidden = c.hidden_size;
  d.norm_eps = static_cast<float>(c.rms_norm_eps);
  d.gate_eps = static_cast<float>(c.hc_eps);
  d.post_magnitude = static_cast<float>(c.hc_magnitude);
  if (c.hc_sinkhorn_iters > 0) {  // mHC
    d.post_gate_eps = false;
    d.mix_streams = true;
    d.sinkhorn_iters = c.hc_sinkhorn_iters;
  }
  return d;
}

HyperConnectionModel::HyperConnectionModel(ModelConfig config, weights::Checkpoint ckpt,
                                           DeepseekTensorList tensors, const LoadOptions& options)
    : DeepseekModel(std::move(config), std::move(ckpt), tensors, options,
                    /*index_rope_interleaved=*/false),
      hc_(HyperConnectionDimsOf(this->config())) {}

void HyperConnectionModel::Forward(const ForwardBatch& batch, AttentionForm form, float* logits,
                                   ForwardTrace* trace) const {
  LATENT_PROFILE_SCOPE(kStep);
  const ModelConfig& c = config();
  Activations a = Start(batch);
  const int64_t tokens = a.tokens;
  Embed(batch, a.hidden);
  float* streams = a.extra;  // [T, N, D] the residual streams
  ops::BroadcastStreams(hc_, a.hidden, tokens, streams);
  // [T] the positions each token attends to: from the layer's own indexer, or on a shared
  // layer the last full layer's.
  DsaSelection selection;
  if (trace != nullptr) trace->selected.assign(c.num_hidden_layers, {});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = layer(l);
    const ops::HyperGates attn_gates = Collapse(*w.attn_hc, streams, tokens, a.hidden);
    RmsNorm(a.hidden, tokens, w.input_norm, a.normed);
    Attention(l, batch, a.normed, form, &selection, a.branch, trace, /*query_scale=*/nullptr);
    Expand(attn_gates, a.branch, tokens, streams);
    const ops::HyperGates ffn_gates = Collapse(*w.ffn_hc, streams, tokens, a.hidden);
    RmsNorm(a.hidden, tokens, w.post_attention_norm, a.normed);
    FeedForward(l, a.normed, tokens, a.branch, trace);
    Expand(ffn_gates, a.branch, tokens, streams);
    dump::Tensor("hidden", l, streams, tokens, hc_.flat());
  }
  {
    LATENT_PROFILE_SCOPE(kResidual);
    if (weights().hc_head) {
      ops::HyperHeadCollapse(hc_, *weights().hc_head, streams, tokens, a.hidden);
    } else {
      ops::MeanCollapseStreams(hc_, streams, tokens, a.hidden);
    }
  }
  Head(batch, a.hidden, logits);
}

ops::HyperGates HyperConnectionModel::Collapse(const ops::HyperConnectionWeights& w,
                                               const float* streams, int64_t tokens,
                                               float* x) const {
  LATENT_PROFILE_SCOPE(kResidual);
  ops::HyperGates gates = ops::ComputeHyperGates(hc_, w, streams, tokens);
  ops::CollapseStreams(hc_, gates.pre.data(), streams, tokens, x);
  return gates;
}

void HyperConnectionModel::Expand(const ops::HyperGates& gates, const float* branch,
                                  int64_t tokens, float* streams) const {
  LATENT_PROFILE_SCOPE(kResidual);
  ops::ExpandStreams(hc_, gates, branch, tokens, streams);
}

}  // namespace latent::model
