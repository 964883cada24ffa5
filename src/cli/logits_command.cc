// `latent logits --model DIR --ids 1,2,3 [--attention auto|absorbed|expanded]`: f32 logits of
// every position of one prompt, as JSON {"logits": [[...], ...]}.
#include <cstdio>
#include <memory>

#include "cli/attention_form.h"
#include "cli/commands.h"
#include "cli/token_ids.h"
#include "model/contiguous_latent_cache.h"
#include "model/mla_attention.h"

namespace latent::cli {

namespace {

Runner RegisterLogits(CLI::App& app) {
  struct Options {
    std::string model_dir, ids, attention = "auto";
    bool experts = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("logits", "Print the logits of every position of a prompt");
  sub->add_option("--model", opt->model_dir, "Hugging Face checkpoint directory")->required();
  sub->add_option("--ids", opt->ids, "Prompt token ids, e.g. 1,2,3")->required();
  sub->add_option("--attention", opt->attention, "auto, absorbed or expanded");
  sub->add_flag("--experts", opt->experts,
                "Also print the routed experts of every MoE layer and token (\"experts\")");
  return [opt] {
    const model::AttentionForm form = ParseAttentionForm(opt->attention);
    const std::vector<int32_t> ids = ParseTokenIds(opt->ids);
    const std::unique_ptr<model::Model> m = model::LoadModel(opt->model_dir);
    const int64_t vocab = m->config().vocab_size;

    model::ForwardBatch batch;
    for (size_t i = 0; i < ids.size(); ++i) {
      batch.token_ids.push_back(ids[i]);
      batch.positions.push_back(static_cast<int64_t>(i));
      batch.seq_slots.push_back(0);
      batch.logits_rows.push_back(static_cast<int32_t>(i));
    }
    model::ContiguousLatentCache cache(model::MlaDimsOf(m->config()).row());
    std::vector<float> logits(ids.size() * vocab);
    model::ForwardTrace trace;
    m->Forward(batch, cache, form, logits.data(), opt->experts ? &trace : nullptr);

    // %.9g prints every f32 exactly enough to round-trip.
    std::string out = "{\"logits\": [";
    char buf[32];
    for (size_t i = 0; i < ids.size(); ++i) {
      out += i ? ", [" : "[";
      for (int64_t v = 0; v < vocab; ++v) {
        std::snprintf(buf, sizeof buf, v ? ", %.9g" : "%.9g", logits[i * vocab + v]);
        out += buf;
      }
      out += "]";
    }
    out += "]";
    if (opt->experts) {
      // "experts": per layer (null for dense ones), per token, the chosen expert ids.
      const int64_t k = m->config().num_experts_per_tok;
      out += ", \"experts\": [";
      for (size_t l = 0; l < trace.experts.size(); ++l) {
        out += l ? ", " : "";
        if (trace.experts[l].empty()) {
          out += "null";
          continue;
        }
        out += "[";
        for (size_t t = 0; t < ids.size(); ++t) {
          out += t ? ", [" : "[";
          for (int64_t j = 0; j < k; ++j) out += (j ? ", " : "") + std::to_string(trace.experts[l][t * k + j]);
          out += "]";
        }
        out += "]";
      }
      out += "]";
    }
    out += "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

}  // namespace

LATENT_COMMAND(30, RegisterLogits);

}  // namespace latent::cli
