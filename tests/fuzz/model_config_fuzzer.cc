// Fuzzes config.json parsing (ModelConfig::FromJson): the input is the file's content. A config
// that parses must be one the rest of latent can size itself by: every size positive and bounded,
// one entry per layer in the per-layer lists, experts per token within the experts. Bad configs
// must fail with latent::Error only; anything else (another exception, a crash, a sanitizer
// report, a hang, a config that parses but breaks those rules) is a bug. Seeds:
// tests/fuzz/corpus/model_config_fuzzer (the presets of tools/make_tiny_model.py and real configs).
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "model/model_config.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Sizes a parsed config promises: positive, and small enough that products of two of them (a
// weight's element count) cannot overflow int64.
bool Sane(int64_t v) { return v > 0 && v <= (int64_t{1} << 31); }

void CheckInvariants(const latent::model::ModelConfig& c) {
  Check(Sane(c.vocab_size) && Sane(c.hidden_size) && Sane(c.num_hidden_layers) &&
        Sane(c.num_attention_heads) && Sane(c.max_position_embeddings));
  Check(Sane(c.kv_lora_rank) && Sane(c.qk_rope_head_dim) && Sane(c.v_head_dim));
  Check(c.qk_nope_head_dim >= 0 && c.qk_nope_head_dim <= (int64_t{1} << 31));
  Check(!c.q_lora_rank || Sane(*c.q_lora_rank));
  Check(c.qk_rope_head_dim % 2 == 0);
  Check(c.rms_norm_eps > 0);
  Check(static_cast<int64_t>(c.moe_layers.size()) == c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsMoeLayer(l)) {
      Check(c.n_routed_experts > 0 && c.num_experts_per_tok > 0 &&
            c.num_experts_per_tok <= c.n_routed_experts && Sane(c.moe_intermediate_size));
    }
  }
  Check(c.n_group > 0 && c.topk_group > 0 && c.topk_group <= c.n_group);
  if (c.n_routed_experts > 0) Check(c.n_routed_experts % c.n_group == 0);
  if (c.is_dsa()) {
    Check(static_cast<int64_t>(c.indexer_layers.size()) == c.num_hidden_layers);
    Check(c.index_n_heads > 0 && c.index_head_dim > 0);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) (void)c.HasIndexer(l);
  }
  if (c.quantization.fp8) Check(c.quantization.block_n > 0 && c.quantization.block_k > 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    CheckInvariants(latent::model::ModelConfig::FromJson(text, "config.json"));
  } catch (const latent::Error&) {
  }
  return 0;
}
