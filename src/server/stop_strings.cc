#include "server/stop_strings.h"

#include <algorithm>
#include <utility>

namespace latent::server {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  std::erase(stops_, std::string());
}

std::string StopStringMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  if (stops_.empty()) return std::string(text);
  std::string buffer = std::move(held_);
  held_.clear();
  buffer.append(text);
  // The earliest occurrence of any stop string ends the output; one must end past the unmatched
  // text still held (it may start in it). At equal positions the first listed stop string is the
  // one reported.
  const size_t unmatched = std::exchange(held_unmatched_, 0);
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t from = unmatched >= stop.size() ? unmatched - stop.size() + 1 : 0;
    const size_t at = buffer.find(stop, from);
    if (at < first) {
      first = at;
      matched_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    buffer.resize(first + (include_stop_ ? matched_.size() : 0));
    return buffer;
  }
  return HoldBack(std::move(buffer));
}

std::string StopStringMatcher::PushUnmatched(std::string_view text) {
  if (stopped_) return "";
  std::string buffer = std::exchange(held_, std::string());
  buffer.append(text);
  std::string out = HoldBack(std::move(buffer));
  held_unmatched_ = held_.size();
  return out;
}

std::string StopStringMatcher::HoldBack(std::string buffer) {
  // The longest suffix that a stop string starts with. Stop strings and the text are valid UTF-8,
  // so the cut falls on a character boundary.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, buffer.size());
    for (size_t k = longest; k > hold; --k) {
      if (std::string_view(buffer).substr(buffer.size() - k) ==
          std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  held_ = buffer.substr(buffer.size() - hold);
  buffer.resize(buffer.size() - hold);
  return buffer;
}

std::string StopStringMatcher::Finish() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace latent::server
