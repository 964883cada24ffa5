// The ops' dims of a config's attention blocks (ops/mla_attention.h, ops/dsa_indexer.h): the ops
// never see ModelConfig, the model builds their dims here.
#pragma once

#include "model/model_config.h"
#include "ops/dsa_indexer.h"
#include "ops/mla_attention.h"

namespace latent::model {

using ops::DsaDims;
using ops::DsaLayer;
using ops::DsaSelection;
using ops::MlaDims;
using ops::MlaLayerOptions;

// The MLA dims of the config's common shape (a family with per-layer shapes builds its own).
MlaDims MlaDimsOf(const ModelConfig& config);
// The DSA indexer's dims of the config.
DsaDims DsaDimsOf(const ModelConfig& config);

}  // namespace latent::model
