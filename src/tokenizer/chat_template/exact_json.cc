#include "tokenizer/chat_template/exact_json.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace latent::tokenizer {
namespace {

using OrderedJson = nlohmann::ordered_json;

// nlohmann's SAX events built into an ordered_json as its own DOM parser builds it (a repeated
// key keeps its first place and its last value), with integers checked by their text (unless
// `check` is off), in time linear in the text: nlohmann's own builders are quadratic twice over
// (its callback parser scans an array for a dropped value at the end of each object in it, a
// 300 KB list of `{}` took 6 s; ordered_json finds each key by a linear scan, quadratic in a wide
// object), so an object's keys are indexed in a hash map while it is open.
class ExactIntegerBuilder {
 public:
  ExactIntegerBuilder(std::initializer_list<std::string_view> keep,
                      std::initializer_list<std::string_view> checked, bool check)
      : keep_(keep), checked_(checked), check_(check) {}

  OrderedJson& root() { return root_; }

  bool null() { return Put(nullptr); }
  bool boolean(bool v) { return Put(v); }
  bool number_integer(int64_t v) { return Put(v); }
  bool number_unsigned(uint64_t v) {
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) && Checked()) {
      throw JsonIntegerRangeError(std::to_string(v), Path());
    }
    return Put(v);
  }
  bool number_float(double v, const std::string& lexeme) {
    // Only an integer too large for int64 and uint64 reaches here without a fraction or exponent.
    if (lexeme.find_first_of(".eE") == std::string::npos && Checked()) {
      throw JsonIntegerRangeError(lexeme, Path());
    }
    return Put(v);
  }
  bool string(std::string& s) { return Put(std::move(s)); }
  bool binary(OrderedJson::binary_t& b) { return Put(OrderedJson::binary(std::move(b))); }
  bool start_object(size_t) { return Open(OrderedJson::object()); }
  bool start_array(size_t) { return Open(OrderedJson::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(std::string& k) {
    if (skip_depth_ > 0) return true;
    if (frames_.size() == 1) {
      drop_next_ = keep_.size() > 0 && std::find(keep_.begin(), keep_.end(), k) == keep_.end();
      member_checked_ = std::find(checked_.begin(), checked_.end(), k) != checked_.end();
    }
    frames_.back().key = std::move(k);
    return true;
  }
  template <typename Exception>
  bool parse_error(size_t, const std::string&, const Exception& ex) {
    throw ex;
  }

 private:
  struct Frame {
    OrderedJson* container;
    std::string key;   // an object's member being read
    size_t index = 0;  // an array's items stored so far
    std::unordered_map<std::string, size_t> places;  // an object's keys: their places in it
  };

  bool Skipping() const { return drop_next_ || skip_depth_ > 0; }

  // Whether the integer being read is to be checked: all are, unless `checked` names top-level
  // members.
  bool Checked() const {
    if (!check_ || Skipping()) return false;
    if (checked_.size() == 0) return true;
    return !frames_.empty() && frames_[0].container->is_object() && member_checked_;
  }

  // Stores a complete value where the parser is; the stored value, or nullptr when dropped.
  OrderedJson* Store(OrderedJson value) {
    if (skip_depth_ > 0) return nullptr;
    if (drop_next_) {
      drop_next_ = false;
      return nullptr;
    }
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.container->is_object()) {
      auto& members = f.container->get_ref<OrderedJson::object_t&>();
      const auto [at, added] = f.places.emplace(f.key, members.size());
      if (added) members.emplace_back(f.key, nullptr);
      OrderedJson& slot = members.begin()[at->second].second;  // ordered_map hides the vector's []
      slot = std::move(value);
      return &slot;
    }
    f.container->push_back(std::move(value));
    ++f.index;
    return &f.container->back();
  }

  bool Put(OrderedJson value) {
    Store(std::move(value));
    return true;
  }

  bool Open(OrderedJson empty) {
    if (skip_depth_ > 0 || drop_next_) {
      drop_next_ = false;
      ++skip_depth_;
      return true;
    }
    frames_.push_back({Store(std::move(empty)), {}, 0, {}});
    return true;
  }

  bool Close() {
    if (skip_depth_ > 0) {
      --skip_depth_;
    } else {
      frames_.pop_back();
    }
    return true;
  }

  // Where the scalar being read is: an outer array's item is its last one stored (the open
  // container), the innermost array's the next.
  std::string Path() const {
    std::string path;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.container->is_object()) {
        path += (path.empty() ? "" : ".") + f.key;
      } else {
        path += "[" + std::to_string(i + 1 < frames_.size() ? f.index - 1 : f.index) + "]";
      }
    }
    return path;
  }

  std::initializer_list<std::string_view> keep_;
  std::initializer_list<std::string_view> checked_;
  bool check_;
  OrderedJson root_;
  std::vector<Frame> frames_;  // the open containers, outermost first
  bool drop_next_ = false;     // the next value is a top-level member not kept
  int skip_depth_ = 0;         // open containers inside a dropped member
  bool member_checked_ = false;  // the top-level member being read is in `checked`
};

}  // namespace

JsonIntegerRangeError::JsonIntegerRangeError(const std::string& lexeme, std::string path)
    : Error(StrCat("integer ", lexeme, path.empty() ? "" : " at " + path,
                   " is too large (64-bit limit)")),
      path_(std::move(path)) {}

nlohmann::ordered_json ParseJsonExactIntegers(std::string_view text,
                                              std::initializer_list<std::string_view> keep,
                                              std::initializer_list<std::string_view> checked) {
  ExactIntegerBuilder builder(keep, checked, /*check=*/true);
  OrderedJson::sax_parse(text.begin(), text.end(), &builder);
  return std::move(builder.root());
}

nlohmann::ordered_json ParseJsonKeeping(std::string_view text,
                                        std::initializer_list<std::string_view> keep) {
  ExactIntegerBuilder builder(keep, {}, /*check=*/false);
  OrderedJson::sax_parse(text.begin(), text.end(), &builder);
  return std::move(builder.root());
}

}  // namespace latent::tokenizer
