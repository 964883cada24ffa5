// The --attention flag (auto|absorbed|expanded) for the CLI and the Python module.
#pragma once

#include <string>

#include "base/error.h"
#include "model/model.h"

namespace latent::generate {

inline model::AttentionForm ParseAttentionForm(const std::string& name) {
  if (name == "auto") return model::AttentionForm::kAuto;
  if (name == "absorbed") return model::AttentionForm::kAbsorbed;
  if (name == "expanded") return model::AttentionForm::kExpanded;
  Fail("--attention: unknown form '", name, "' (supported: auto, absorbed, expanded)");
}

}  // namespace latent::generate
