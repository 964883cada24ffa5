#include "model/arch/registry.h"

#include <algorithm>
#include <utility>

#include "base/error.h"

namespace latent::model {
namespace {

std::vector<std::pair<int, Arch>>& Registered() {
  static std::vector<std::pair<int, Arch>> registered;
  return registered;
}

}  // namespace

ArchRegistration::ArchRegistration(int order, Arch (*make)()) {
  auto& registered = Registered();
  auto at = std::find_if(registered.begin(), registered.end(),
                         [&](const auto& entry) { return entry.first > order; });
  registered.insert(at, {order, make()});
}

const std::vector<Arch>& Archs() {
  // Built on first use, after every static registration has run.
  static const std::vector<Arch> archs = [] {
    std::vector<Arch> out;
    for (const auto& [order, arch] : Registered()) out.push_back(arch);
    return out;
  }();
  return archs;
}

const Arch* FindArch(const std::string& model_type) {
  for (const Arch& arch : Archs()) {
    for (const std::string& type : arch.model_types) {
      if (type == model_type) return &arch;
    }
  }
  return nullptr;
}

bool IsWrapperModelType(const std::string& model_type) {
  for (const Arch& arch : Archs()) {
    for (const std::string& type : arch.wrapper_model_types) {
      if (type == model_type) return true;
    }
  }
  return false;
}

const Arch& ArchOf(const ModelConfig& config) {
  for (const Arch& arch : Archs()) {
    if (arch.name == config.architecture) return arch;
  }
  Fail("no registered model family '", config.architecture, "' (supported model_types: ",
       SupportedModelTypes(), ")");
}

std::string ToolCallFormatFor(const std::string& model_type) {
  const Arch* arch = FindArch(model_type);
  if (arch == nullptr) return "";
  for (const auto& [type, format] : arch->tool_call_formats) {
    if (type == model_type) return format;
  }
  return "";
}

std::string SupportedModelTypes() {
  std::string out;
  for (const Arch& arch : Archs()) {
    for (const std::string& type : arch.model_types) out += (out.empty() ? "" : ", ") + type;
  }
  return out;
}

std::unique_ptr<Model> LoadModel(const std::string& dir, const LoadOptions& options) {
  ModelConfig config = ModelConfig::Load(dir);
  weights::Checkpoint ckpt = OpenCheckpoint(config, dir);
  const Arch& arch = ArchOf(config);
  return arch.create(std::move(config), std::move(ckpt), options);
}

}  // namespace latent::model
