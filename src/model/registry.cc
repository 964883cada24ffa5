#include <map>

#include "model/arch/architectures.h"
#include "model/model.h"

namespace latent::model {
namespace {

using Factory = std::unique_ptr<Model> (*)(ModelConfig, weights::Checkpoint, const LoadOptions&);

const std::map<Architecture, Factory>& Registry() {
  static const std::map<Architecture, Factory> registry{
      {Architecture::kDeepseekV2, CreateDeepseekV2},
      {Architecture::kDeepseekV3, CreateDeepseekV3},
      {Architecture::kDeepseekV32, CreateDeepseekV32},
      {Architecture::kGlmMoeDsa, CreateGlmMoeDsa},
  };
  return registry;
}

}  // namespace

std::unique_ptr<Model> LoadModel(const std::string& dir, const LoadOptions& options) {
  ModelConfig config = ModelConfig::Load(dir);
  weights::Checkpoint ckpt = weights::Checkpoint::Open(dir);
  const Architecture arch = config.architecture;
  return Registry().at(arch)(std::move(config), std::move(ckpt), options);
}

}  // namespace latent::model
