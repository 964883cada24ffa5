// DeepSeek V2 / V2-Lite: rotary through the complex form (adjacent pairs, f32), softmax router
// with greedy or group-limited top-k, no renormalisation.
#include "model/arch/architectures.h"
#include "model/deepseek_model.h"

namespace latent::model {

std::unique_ptr<Model> CreateDeepseekV2(ModelConfig config, weights::Checkpoint ckpt,
                                        const LoadOptions& options) {
  DeepseekVariant variant;
  variant.rope_interleaved = true;
  variant.route = config.topk_method == TopkMethod::kGroupLimitedGreedy
                      ? ops::RouteSoftmaxGroupLimited
                      : ops::RouteSoftmaxGreedy;
  return std::make_unique<DeepseekModel>(std::move(config), std::move(ckpt), variant, options);
}

}  // namespace latent::model
