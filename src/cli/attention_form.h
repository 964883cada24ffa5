#pragma once

#include <string>

#include "base/error.h"
#include "model/model.h"

namespace latent::cli {

inline model::AttentionForm ParseAttentionForm(const std::string& name) {
  if (name == "auto") return model::AttentionForm::kAuto;
  if (name == "absorbed") return model::AttentionForm::kAbsorbed;
  if (name == "expanded") return model::AttentionForm::kExpanded;
  Fail("--attention: unknown form '", name, "' (supported: auto, absorbed, expanded)");
}

}  // namespace latent::cli
