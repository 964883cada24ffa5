// DeepSeek V3.2: V3's MLA (always interleaved rotary pairs) and router, plus the DSA indexer
// with half-split rotary pairs on every layer.
#include "model/arch/architectures.h"
#include "model/deepseek_model.h"

namespace latent::model {

std::unique_ptr<Model> CreateDeepseekV32(ModelConfig config, weights::Checkpoint ckpt,
                                         const LoadOptions& options) {
  DeepseekVariant variant;
  variant.rope_interleaved = true;
  variant.route = ops::RouteSigmoidNoauxTc;
  variant.index_rope_interleaved = false;
  return std::make_unique<DeepseekModel>(std::move(config), std::move(ckpt), variant, options);
}

}  // namespace latent::model
