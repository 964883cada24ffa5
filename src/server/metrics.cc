#include "server/metrics.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace latent::server {
namespace {

// The shortest text that reads back as `v` (0.1, not 0.10000000000000001).
std::string Number(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void Header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + "{" + labels + "} " + Number(value) + "\n";
}

void Metric(std::string& out, const std::string& name, const char* type, const char* help,
            const std::string& labels, double value) {
  Header(out, name, type, help);
  Sample(out, name, labels, value);
}

constexpr std::array kKnownPaths = {
    "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
    "/tokenize",       "/detokenize",          "/ping",      "/version"};
// Every model id's path counts under one label (a label per id would let clients grow /metrics).
constexpr std::string_view kModelIdPrefix = "/v1/models/";

}  // namespace

std::string PrometheusLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) +
           "\n";
  }
  out += name + "_sum{" + labels + "} " + Number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    // vLLM's buckets, so dashboards built for it read these the same way.
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
            20.0, 40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

void ServerMetrics::CountFinished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++finished_[reason];
}

void ServerMetrics::CountResponse(const std::string& path, int status) {
  const bool known = std::find(kKnownPaths.begin(), kKnownPaths.end(), path) != kKnownPaths.end();
  const bool model = path.size() > kModelIdPrefix.size() && path.starts_with(kModelIdPrefix);
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[{known ? path : model ? "/v1/models/{id}" : "other", status}];
}

void ServerMetrics::AddInFlight(int delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_flight_ += delta;
}

std::string ServerMetrics::Render(const std::string& model_name,
                                  const engine::EngineMetrics* engine) const {
  const std::string model = "model_name=\"" + PrometheusLabel(model_name) + "\"";
  std::string out;
  if (engine) {
    const engine::EngineMetrics& m = *engine;
    Metric(out, "latent_num_requests_running", "gauge", "Sequences in the running batch.", model,
           m.running);
    Metric(out, "latent_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.", model,
           m.waiting);
    Metric(out, "latent_cache_usage_ratio", "gauge",
           "Fraction of cache blocks held by requests (0 to 1).", model,
           m.total_blocks ? static_cast<double>(m.used_blocks) / m.total_blocks : 0.0);
    Metric(out, "latent_cache_blocks_used", "gauge", "Cache blocks held by requests.", model,
           m.used_blocks);
    Metric(out, "latent_cache_blocks_cached", "gauge",
           "Cache blocks nobody holds that still serve prefix hits.", model, m.cached_blocks);
    Metric(out, "latent_cache_blocks_total", "gauge", "Cache blocks.", model, m.total_blocks);
    Metric(out, "latent_cache_block_tokens", "gauge", "Tokens per cache block.", model,
           m.block_tokens);
    Metric(out, "latent_cache_bytes_per_token", "gauge", "Cache bytes per token, all layers.",
           model, static_cast<double>(m.cache_bytes_per_token));
    Metric(out, "latent_cache_layer_bytes_per_token", "gauge",
           "Cache bytes per token of the widest layer (656 for a DeepSeek V3 layer in fp8 rows).",
           model, static_cast<double>(m.cache_layer_bytes_per_token));
    Metric(out, "latent_prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.", model,
           static_cast<double>(m.prompt_tokens));
    Metric(out, "latent_prefix_cache_hits_total", "counter",
           "Prompt tokens served from the prefix cache.", model,
           static_cast<double>(m.prefix_hit_tokens));
    Metric(out, "latent_prefix_cache_hit_rate", "gauge",
           "Prefix cache hits over prompt tokens since start (0 to 1).", model,
           m.prompt_tokens ? static_cast<double>(m.prefix_hit_tokens) / m.prompt_tokens : 0.0);
    Metric(out, "latent_num_preemptions_total", "counter", "Sequences preempted for cache blocks.",
           model, static_cast<double>(m.preemptions));
    Metric(out, "latent_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
           model, static_cast<double>(m.prompt_tokens));
    Metric(out, "latent_generation_tokens_total", "counter", "Generated tokens.", model,
           static_cast<double>(m.generated_tokens));
    Metric(out, "latent_engine_requests_finished_total", "counter",
           "Engine requests finished (all samples ended).", model,
           static_cast<double>(m.requests_finished));
    Metric(out, "latent_engine_steps_total", "counter", "Engine steps run.", model,
           static_cast<double>(m.steps));
    Metric(out, "latent_spec_decode_num_draft_tokens_total", "counter",
           "Speculative decoding: draft tokens run.", model, static_cast<double>(m.draft_tokens));
    Metric(out, "latent_spec_decode_num_accepted_tokens_total", "counter",
           "Speculative decoding: draft tokens that proved right.", model,
           static_cast<double>(m.accepted_draft_tokens));
    Metric(out, "latent_engine_busy_seconds_total", "counter", "Time spent in engine steps.", model,
           m.busy_seconds);
  }
  Header(out, "latent_time_to_first_token_seconds", "histogram",
         "Time from a request's arrival to its first token, per prompt.");
  ttft_.Render("latent_time_to_first_token_seconds", model, out);
  Header(out, "latent_inter_token_latency_seconds", "histogram",
         "Time between consecutive tokens of a choice.");
  itl_.Render("latent_inter_token_latency_seconds", model, out);
  Header(out, "latent_e2e_request_latency_seconds", "histogram",
         "Time from a generation request's arrival to its last token.");
  e2e_.Render("latent_e2e_request_latency_seconds", model, out);

  std::lock_guard<std::mutex> lock(mutex_);
  Metric(out, "latent_http_requests_in_flight", "gauge", "Generation requests being served.", model,
         static_cast<double>(in_flight_));
  Header(out, "latent_request_success_total", "counter",
         "Choices finished, by finish reason (stop, length, tool_calls, abort, error).");
  for (const char* reason : {"stop", "length", "tool_calls", "abort", "error"}) {
    auto it = finished_.find(reason);
    Sample(out, "latent_request_success_total", model + ",finished_reason=\"" + reason + "\"",
           it == finished_.end() ? 0 : it->second);
  }
  Header(out, "latent_http_responses_total", "counter", "HTTP responses, by route and status.");
  for (const auto& [key, count] : responses_) {
    Sample(out, "latent_http_responses_total",
           model + ",path=\"" + PrometheusLabel(key.first) + "\",status=\"" +
               std::to_string(key.second) + "\"",
           static_cast<double>(count));
  }
  return out;
}

}  // namespace latent::server
