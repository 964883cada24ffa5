#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace latent::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string Pcre2Message(int rc) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(rc, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state, shared by all patterns: a one-pair match data block (only the whole
// match is needed) and a JIT stack big enough for very long pieces (the default 32 KiB is not).
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  ThreadMatchState() {
    if (data == nullptr || context == nullptr || jit_stack == nullptr) {
      Fail("tokenizer: out of memory allocating PCRE2 match state");
    }
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

// The characters Unicode 15.0 and 16.0 assigned (and U+1171E, which changed category), which the
// PCRE2 this is built with (Debian bookworm's 10.42: Unicode 14.0) sees as unassigned, while HF
// tokenizers' Oniguruma and tiktoken's regex split by 16.0: each range with a stand-in assigned by
// 14.0 of the same general category, UTF-8 length, Alphabetic, White_Space and Han script, written
// by tools/gen_unicode_additions.py: what tokenizer split patterns test (\p{L}, \p{N}, \s, \w,
// \p{Han}, ...), though not other scripts, case or emoji properties. A newer PCRE2 knows them;
// the stand-ins then change nothing.
struct AddedRange {
  uint32_t first, last, stand_in;
};
constexpr AddedRange kUnicode16Additions[] = {
#include "tokenizer/unicode_additions.inc"
};

// The stand-in of `cp`, or 0 when it is not an added character.
uint32_t StandIn(uint32_t cp) {
  const auto* end = std::end(kUnicode16Additions);
  const auto* it = std::upper_bound(std::begin(kUnicode16Additions), end, cp,
                                    [](uint32_t c, const AddedRange& r) { return c < r.first; });
  if (it == std::begin(kUnicode16Additions)) return 0;
  --it;
  return cp <= it->last ? it->stand_in : 0;
}

// `text` with every added character replaced by its stand-in, in `copy`, or `text` itself when it
// holds none (the common case: only lead bytes of 3- and 4-byte characters are looked at). The
// stand-in has the same length, so a match on the copy covers the same bytes of the text.
std::string_view WithStandIns(std::string_view text, std::string& copy) {
  constexpr uint32_t kFirstAdded = kUnicode16Additions[0].first;
  static_assert(kFirstAdded >= 0x800, "only 3- and 4-byte characters are looked at");
  bool copied = false;
  for (size_t pos = 0; pos < text.size();) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    if (lead < 0xe0) {
      ++pos;
      continue;
    }
    const size_t start = pos;
    if (start + Utf8Length(lead) > text.size()) break;  // a cut character: nothing to replace
    const uint32_t cp = NextCodePoint(text, pos);
    const uint32_t stand_in = cp >= kFirstAdded ? StandIn(cp) : 0;
    if (stand_in == 0) continue;
    if (!copied) {
      copy.assign(text);
      copied = true;
    }
    // Same length as cp's (the generator checks): 3 or 4 bytes.
    if (pos - start == 3) {
      copy[start] = static_cast<char>(0xe0 | (stand_in >> 12));
      copy[start + 1] = static_cast<char>(0x80 | ((stand_in >> 6) & 0x3f));
      copy[start + 2] = static_cast<char>(0x80 | (stand_in & 0x3f));
    } else {
      copy[start] = static_cast<char>(0xf0 | (stand_in >> 18));
      copy[start + 1] = static_cast<char>(0x80 | ((stand_in >> 12) & 0x3f));
      copy[start + 2] = static_cast<char>(0x80 | ((stand_in >> 6) & 0x3f));
      copy[start + 3] = static_cast<char>(0x80 | (stand_in & 0x3f));
    }
  }
  return copied ? std::string_view(copy) : text;
}

// Rewrites the escapes whose meaning differs between Oniguruma (what HF compiles tokenizer.json
// patterns with) and PCRE2: Oniguruma's \s is exactly Unicode White_Space (PCRE2's also takes
// U+180E), its \w is Unicode's word class (PCRE2's leaves out marks), and its \h is a hex digit
// (PCRE2's is horizontal space). Everything else means the same in both.
std::string TranslateOnigPattern(std::string_view pattern) {
  static constexpr std::string_view kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
  static constexpr std::string_view kHex = "0-9a-fA-F";
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      switch (e) {
        case 's':
          out += "\\p{White_Space}";
          break;
        case 'S':
          out += "\\P{White_Space}";
          break;
        case 'w':
          out += in_class ? std::string(kWord) : StrCat("[", kWord, "]");
          break;
        case 'W':
          if (in_class) {
            out += "\\W";  // no set difference inside a class; PCRE2's \W is close
          } else {
            out += StrCat("[^", kWord, "]");
          }
          break;
        case 'h':
          out += in_class ? std::string(kHex) : StrCat("[", kHex, "]");
          break;
        case 'H':
          out += in_class ? std::string("\\H") : StrCat("[^", kHex, "]");
          break;
        default:
          out += c;
          out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  if (literal && !pattern.empty()) {
    literal_fast_path_ = true;
    return;
  }
  // UCP makes \s, \w, \d and POSIX classes Unicode-aware, as they are in Oniguruma.
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  auto code = std::make_shared<Code>();
  const std::string source = literal ? std::string(pattern) : TranslateOnigPattern(pattern);
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options,
                             &error, &error_offset, nullptr);
  if (code->code == nullptr) {
    Fail("tokenizer: regex '", pattern, "' does not compile at offset ", error_offset, ": ",
         Pcre2Message(error));
  }
  code->jit = pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE) == 0;
  code_ = std::move(code);
}

void Regex::FindAll(std::string_view text, std::vector<Span>& out) const {
  if (literal_fast_path_) {
    size_t pos = 0;
    while ((pos = text.find(pattern_, pos)) != std::string_view::npos) {
      out.emplace_back(pos, pos + pattern_.size());
      pos += pattern_.size();
    }
    return;
  }
  ThreadMatchState& state = MatchState();
  // Matched with Unicode 16.0's characters as PCRE2 knows them (kUnicode16Additions).
  thread_local std::string stand_ins;
  text = WithStandIns(text, stand_ins);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Oniguruma's FindMatches: search from the end of the previous match; an empty match right where
  // the previous match ended is skipped by searching again one character further on.
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), last_end, PCRE2_NO_UTF_CHECK,
                         state.data, state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // A pathological piece: the interpreter keeps its backtracking frames on the heap.
      rc = pcre2_match(code_->code, subject, text.size(), last_end,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, state.data, state.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      Fail("tokenizer: regex '", pattern_, "' failed on a piece of ", text.size(),
           " bytes: ", Pcre2Message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t start = ovector[0], end = ovector[1];
    if (start == end && have_last && last_match_end == end) {
      last_end += last_end < text.size() ? Utf8Length(static_cast<uint8_t>(text[last_end])) : 1;
      continue;
    }
    last_end = end;
    last_match_end = end;
    have_last = true;
    out.emplace_back(start, end);
  }
}

const Regex& Gpt2Regex() {
  static const Regex regex(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false);
  return regex;
}

}  // namespace latent::tokenizer
