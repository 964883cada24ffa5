#include "tokenizer/post_processors.h"

#include <limits>
#include <string>
#include <unordered_map>

namespace latent::tokenizer {

namespace {

class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return ids;
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    return ids;
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class IdentityProcessor : public PostProcessor {
 public:
  std::vector<int32_t> Process(std::vector<int32_t> ids, bool) const override { return ids; }
};

// TemplateProcessing's "single" template: special tokens (each maybe several ids) around $A.
class TemplateProcessor : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;  // for a special token
  };
  explicit TemplateProcessor(std::vector<Item> items) : items_(std::move(items)) {}
  std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return ids;
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Item& item : items_) {
      if (item.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
    }
    return out;
  }

 private:
  std::vector<Item> items_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps)
      : steps_(std::move(steps)) {}
  std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) ids = step->Process(std::move(ids), add_special_tokens);
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

int32_t TokenIdField(const Json& pair, std::string_view what, const char* key) {
  // Bert/Roberta store ["[CLS]", 101].
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer() ||
      pair[1].get<int64_t>() < 0 || pair[1].get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    Fail("tokenizer.json: ", what, ": \"", key, "\" must be [token, id]");
  }
  return static_cast<int32_t>(pair[1].get<int64_t>());
}

std::unique_ptr<PostProcessor> MakeTemplate(const Json& j, const std::string& what) {
  std::unordered_map<std::string, std::vector<int32_t>> specials;
  auto st = j.find("special_tokens");
  if (st != j.end() && !st->is_null()) {
    if (!st->is_object()) Fail("tokenizer.json: ", what, ": \"special_tokens\" must be an object");
    for (auto it = st->begin(); it != st->end(); ++it) {
      std::vector<int32_t> ids;
      for (const Json& id : ArrayField(*it, "ids", what)) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
          Fail("tokenizer.json: ", what, ": special token '", it.key(), "' has a bad id");
        }
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
      specials[it.key()] = std::move(ids);
    }
  }
  std::vector<TemplateProcessor::Item> items;
  for (const Json& piece : ArrayField(j, "single", what)) {
    if (!piece.is_object() || piece.size() != 1) {
      Fail("tokenizer.json: ", what,
           ": a template piece must be {\"SpecialToken\": ...} or "
           "{\"Sequence\": ...}");
    }
    const std::string kind = piece.begin().key();
    const Json& body = piece.begin().value();
    if (kind == "Sequence") {
      const std::string id = Field<std::string>(body, "id", what);
      if (id != "A")
        Fail("tokenizer.json: ", what, ": the single template uses sequence '", id, "'");
      items.push_back({true, {}});
    } else if (kind == "SpecialToken") {
      const std::string id = Field<std::string>(body, "id", what);
      auto it = specials.find(id);
      if (it == specials.end()) {
        Fail("tokenizer.json: ", what, ": special token '", id, "' is not in special_tokens");
      }
      items.push_back({false, it->second});
    } else {
      Fail("tokenizer.json: ", what, ": unknown template piece '", kind, "'");
    }
  }
  return std::make_unique<TemplateProcessor>(std::move(items));
}

}  // namespace

std::unique_ptr<PostProcessor> MakeAffixProcessor(std::vector<int32_t> prefix,
                                                  std::vector<int32_t> suffix) {
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> MakePostProcessor(const Json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "post-processor");
  const std::string what = type + " post-processor";
  if (type == "TemplateProcessing") return MakeTemplate(j, what);
  if (type == "ByteLevel") return std::make_unique<IdentityProcessor>();
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return MakeAffixProcessor({TokenIdField(j.value("cls", Json()), what, "cls")},
                              {TokenIdField(j.value("sep", Json()), what, "sep")});
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const Json& step : ArrayField(j, "processors", what)) {
      if (auto p = MakePostProcessor(step)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  Fail("tokenizer.json: unsupported post-processor type '", type,
       "' (supported: TemplateProcessing, ByteLevel, BertProcessing, RobertaProcessing, "
       "Sequence)");
}

}  // namespace latent::tokenizer
