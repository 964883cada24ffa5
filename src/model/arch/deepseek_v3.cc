// DeepSeek V3 / R1 / Kimi K2: rotary pairs interleaved or split per `rope_interleave`, sigmoid
// router with e_score_correction_bias and group-limited (noaux_tc) top-k.
#include "model/arch/architectures.h"
#include "model/deepseek_model.h"

namespace latent::model {

std::unique_ptr<Model> CreateDeepseekV3(ModelConfig config, weights::Checkpoint ckpt,
                                        const LoadOptions& options) {
  DeepseekVariant variant;
  variant.rope_interleaved = config.rope_interleave;
  variant.route = ops::RouteSigmoidNoauxTc;
  return std::make_unique<DeepseekModel>(std::move(config), std::move(ckpt), variant, options);
}

}  // namespace latent::model
