// GLM-5 (glm_moe_dsa): DeepSeek V3.2's layout with interleaved rotary pairs in the indexer too,
// and IndexShare: layers marked "shared" have no indexer and reuse the previous selection.
#include "model/arch/architectures.h"
#include "model/deepseek_model.h"

namespace latent::model {

std::unique_ptr<Model> CreateGlmMoeDsa(ModelConfig config, weights::Checkpoint ckpt,
                                       const LoadOptions& options) {
  DeepseekVariant variant;
  variant.rope_interleaved = true;
  variant.route = ops::RouteSigmoidNoauxTc;
  variant.index_rope_interleaved = true;
  return std::make_unique<DeepseekModel>(std::move(config), std::move(ckpt), variant, options);
}

}  // namespace latent::model
