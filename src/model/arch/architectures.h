// Factories of the supported architectures; model/registry.cc maps config.json's
// model_type to them.
#pragma once

#include <memory>

#include "model/model.h"
#include "weights/checkpoint.h"

namespace latent::model {

std::unique_ptr<Model> CreateDeepseekV2(ModelConfig config, weights::Checkpoint ckpt,
                                        const LoadOptions& options);
std::unique_ptr<Model> CreateDeepseekV3(ModelConfig config, weights::Checkpoint ckpt,
                                        const LoadOptions& options);
std::unique_ptr<Model> CreateDeepseekV32(ModelConfig config, weights::Checkpoint ckpt,
                                         const LoadOptions& options);
std::unique_ptr<Model> CreateGlmMoeDsa(ModelConfig config, weights::Checkpoint ckpt,
                                       const LoadOptions& options);

}  // namespace latent::model
