#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <limits>
#include <queue>

#include "tokenizer/unicode.h"

namespace latent::tokenizer {

namespace {

constexpr const char* kBpeModel = "BPE model";

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Token ids in latent are int32; tokenizer.json stores u32. Ids beyond 2^24 would only make the
// id -> token table huge for no real vocabulary.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

uint32_t FirstCodePoint(std::string_view s) {
  if (s.empty() || !IsValidUtf8(s)) return kReplacementChar;
  size_t pos = 0;
  return NextCodePoint(s, pos);
}

uint32_t LastCodePoint(std::string_view s) {
  if (s.empty() || !IsValidUtf8(s)) return kReplacementChar;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xc0) == 0x80) --start;
  return NextCodePoint(s, start);
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::FromJson(const Json& j) {
  if (!j.is_object()) Fail("tokenizer.json: \"model\" must be an object");
  // Old files may omit "type"; HF then tries each model, and BPE is the one with merges.
  std::string type = j.contains("type") ? TypeOf(j, "model") : (j.contains("merges") ? "BPE" : "");
  if (type != "BPE") {
    Fail("tokenizer.json: unsupported model type '", type,
         "' (supported: BPE; WordPiece, WordLevel and Unigram models are not)");
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  const double dropout = FieldOr<double>(j, "dropout", 0.0, kBpeModel);
  if (dropout != 0.0) {
    Fail("tokenizer.json: BPE model: dropout ", dropout,
         " is not supported (it makes encoding random; inference uses none)");
  }
  if (j.contains("unk_token") && !j["unk_token"].is_null()) {
    m->unk_token_ = Field<std::string>(j, "unk_token", kBpeModel);
  }
  m->continuing_subword_prefix_ = FieldOr<std::string>(j, "continuing_subword_prefix", "", kBpeModel);
  m->end_of_word_suffix_ = FieldOr<std::string>(j, "end_of_word_suffix", "", kBpeModel);
  m->fuse_unk_ = FieldOr<bool>(j, "fuse_unk", false, kBpeModel);
  m->byte_fallback_ = FieldOr<bool>(j, "byte_fallback", false, kBpeModel);
  m->ignore_merges_ = FieldOr<bool>(j, "ignore_merges", false, kBpeModel);

  auto vocab_it = j.find("vocab");
  if (vocab_it == j.end() || !vocab_it->is_object()) {
    Fail("tokenizer.json: BPE model: \"vocab\" must be an object of token -> id");
  }
  m->vocab_.reserve(vocab_it->size());
  int64_t max_id = -1;
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxTokenId) {
      Fail("tokenizer.json: BPE model: token '", it.key(), "' has a bad id ", it->dump());
    }
    const int64_t id = it->get<int64_t>();
    m->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  m->id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : m->vocab_) {
    m->id_to_token_[id] = &token;
    size_t pos = 0;
    if (!token.empty() && IsValidUtf8(token)) {
      const uint32_t cp = NextCodePoint(token, pos);
      if (pos == token.size()) m->char_ids_.Set(cp, id);
    }
  }

  m->byte_fallback_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = m->TokenToId(name)) m->byte_fallback_ids_[b] = *id;
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs. A merge's result is a + b with b's
  // continuing_subword_prefix removed. A repeated pair keeps its last rank, like HF's map.
  const Json& merges = ArrayField(j, "merges", kBpeModel);
  m->merges_.Reserve(merges.size());
  const size_t prefix_len = m->continuing_subword_prefix_.size();
  uint32_t rank = 0;
  std::string merged;
  for (const Json& entry : merges) {
    std::string a, b;
    if (entry.is_string()) {
      const std::string& line = entry.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        Fail("tokenizer.json: BPE model: merge ", rank + 1, " '", line,
             "' is not two tokens separated by one space");
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      a = entry[0].get<std::string>();
      b = entry[1].get<std::string>();
    } else {
      Fail("tokenizer.json: BPE model: merge ", rank + 1, " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto a_id = m->TokenToId(a), b_id = m->TokenToId(b);
    if (!a_id || !b_id) {
      Fail("tokenizer.json: BPE model: merge ", rank + 1, " uses '", !a_id ? a : b,
           "', which is not in the vocabulary");
    }
    if (b.size() < prefix_len) {
      Fail("tokenizer.json: BPE model: merge ", rank + 1, " '", b,
           "' is shorter than continuing_subword_prefix");
    }
    merged.assign(a).append(b, prefix_len, std::string::npos);
    const auto new_id = m->TokenToId(merged);
    if (!new_id) {
      Fail("tokenizer.json: BPE model: the result '", merged, "' of merge ", rank + 1,
           " is not in the vocabulary");
    }
    m->merges_.Set(PairKey(*a_id, *b_id), MergeValue{rank, *new_id});
    m->merge_seams_.Set(
        PairKey(static_cast<int32_t>(LastCodePoint(a)), static_cast<int32_t>(FirstCodePoint(b))),
        true);
    ++rank;
  }
  // Without affixes a merged token is a + b, so its first and last characters are those of the
  // characters it started from; with ignore_merges, splitting would change which whole pieces
  // are looked up.
  m->can_segment_ = prefix_len == 0 && m->end_of_word_suffix_.empty() && !m->ignore_merges_;
  return m;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  return id_to_token_[id];
}

const BpeModel::MergeValue* BpeModel::FindMerge(int32_t a, int32_t b) const {
  return merges_.Find(PairKey(a, b));
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = TokenToId(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() >= WordCache::kMaxWordBytes && can_segment_) {
    TokenizeLong(word, out);
    return;
  }
  TokenizeCached(word, out);
}

// A long word (sentencepiece-style models see whole lines) is cut between two known characters
// that no merge joins; the pieces merge independently, so encoding them one by one (through the
// cache) gives the same ids as merging the whole word, in far less time.
void BpeModel::TokenizeLong(std::string_view word, std::vector<int32_t>& out) const {
  size_t piece_start = 0, pos = 0;
  uint32_t prev = 0;
  bool prev_known = false;
  while (pos < word.size()) {
    const size_t start = pos;
    const size_t len = Utf8Length(static_cast<uint8_t>(word[start]));
    if (start + len > word.size()) break;  // cannot happen on valid UTF-8
    const uint32_t cp = NextCodePoint(word, pos);
    const bool known = char_ids_.Find(cp) != nullptr;
    if (prev_known && known &&
        merge_seams_.Find(PairKey(static_cast<int32_t>(prev), static_cast<int32_t>(cp))) ==
            nullptr) {
      TokenizeCached(word.substr(piece_start, start - piece_start), out);
      piece_start = start;
    }
    prev = cp;
    prev_known = known;
  }
  TokenizeCached(word.substr(piece_start), out);
}

void BpeModel::TokenizeCached(std::string_view word, std::vector<int32_t>& out) const {
  if (cache_.Lookup(word, out)) return;
  const size_t first = out.size();
  MergeWord(word, out);
  cache_.Insert(word, std::span<const int32_t>(out).subspan(first));
}

// HF's BPE::merge_word: one symbol per character (with prefix/suffix where configured), unknown
// characters through byte fallback or the unk token, then all merges.
void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  const auto add = [&](int32_t id) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, true});
  };
  std::optional<int32_t> pending_unk;  // HF's `unk`: its id, flushed before the next known symbol
  const bool affixes = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  std::string buffer;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    pos += Utf8Length(static_cast<uint8_t>(word[start]));
    if (pos > word.size()) pos = word.size();  // cannot happen on valid UTF-8; stay in bounds
    std::string_view s = word.substr(start, pos - start);
    if (!affixes) {
      // The common case: a single character, looked up by code point.
      size_t next = start;
      const int32_t* id = s.size() == Utf8Length(static_cast<uint8_t>(s[0]))
                              ? char_ids_.Find(NextCodePoint(word, next))
                              : nullptr;
      if (id != nullptr) {
        if (pending_unk) {
          add(*pending_unk);
          pending_unk.reset();
        }
        add(*id);
        continue;
      }
    } else {
      buffer.clear();
      if (start > 0) buffer += continuing_subword_prefix_;
      buffer.append(s);
      if (pos == word.size()) buffer += end_of_word_suffix_;
      s = buffer;
    }
    if (auto it = affixes ? vocab_.find(s) : vocab_.end(); it != vocab_.end()) {
      if (pending_unk) {
        add(*pending_unk);
        pending_unk.reset();
      }
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : s) add(byte_fallback_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_token_) {
      const auto unk_id = TokenToId(*unk_token_);
      if (!unk_id) Fail("tokenizer: unk_token '", *unk_token_, "' is not in the vocabulary");
      if (pending_unk && !fuse_unk_) add(*pending_unk);
      if (!pending_unk || !fuse_unk_) pending_unk = *unk_id;
    }
    // Without an unk token an unknown character is dropped, as in HF.
  }
  if (pending_unk) add(*pending_unk);
  MergeAll(symbols);
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

// HF's Word::merge_all without dropout. Queue entries can go stale when a neighbour merged first;
// they are recognised because the pair at their position no longer produces their result.
void BpeModel::MergeAll(std::vector<Symbol>& symbols) const {
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // the queue pops the lowest rank, then position
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeValue* m = FindMerge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next == -1) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    const MergeValue* current = FindMerge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;
    left.id = top.new_id;
    left.next = right.next;
    symbols[right_pos].alive = false;
    if (right.next != -1) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeValue* m = FindMerge(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next != -1) {
      if (const MergeValue* m = FindMerge(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
}

}  // namespace latent::tokenizer
