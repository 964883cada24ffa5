// Prometheus metrics of the server (GET /metrics, text format 0.0.4): the engine's gauges and
// counters (requests running and waiting, cache usage, prefix cache hits, preemptions, tokens)
// and what the HTTP layer measures (time to first token, inter-token latency, request latency,
// finished choices, HTTP responses by route and status). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace latent::server {

// A histogram with fixed upper bounds (seconds); +Inf is implied.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the _bucket/_sum/_count lines of `name` with `labels` (`key="value"` list, may be
  // empty) to `out`.
  void Render(const std::string& name, const std::string& labels, std::string& out) const;
  uint64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;  // Per bucket, not cumulative; one more for +Inf.
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void ObserveTimeToFirstToken(double seconds) { ttft_.Observe(seconds); }
  void ObserveInterTokenLatency(double seconds) { itl_.Observe(seconds); }
  void ObserveRequestLatency(double seconds) { e2e_.Observe(seconds); }
  // A choice ended: "stop", "length", "abort" or "error".
  void CountFinished(const std::string& reason);
  // An HTTP response was sent. /v1/models/{id} counts under that label, unknown paths as
  // "other".
  void CountResponse(const std::string& path, int status);
  void AddInFlight(int delta);

  // The exposition text; `engine` is null while the model loads.
  std::string Render(const std::string& model_name, const engine::EngineMetrics* engine) const;

 private:
  Histogram ttft_, itl_, e2e_;
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> finished_;                   // By finish reason.
  std::map<std::pair<std::string, int>, int64_t> responses_;  // By (path, status).
  int64_t in_flight_ = 0;
};

// Escapes a label value (backslash, quote, newline).
std::string PrometheusLabel(const std::string& value);

}  // namespace latent::server
