// Python str operations on UTF-8 strings: Python indexes, measures and splits strings by code
// point and treats Unicode whitespace as whitespace, so these work on code points too. Case
// mapping covers ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth Latin letters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace latent::tokenizer::jinja {

// UTF-8 <-> code points. Input strings are valid UTF-8 (templates and JSON are checked on the way
// in); a stray byte decodes as U+FFFD rather than failing.
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view s);
void AppendCodePoint(char32_t c, std::string& out);
size_t CodePointCount(std::string_view s);
// Byte offset of code point index `i` (clamped to the end).
size_t ByteOffset(std::string_view s, int64_t i);
// Byte length of the UTF-8 sequence starting at s[0] (1 for a stray byte).
size_t CharLen(std::string_view s);

bool IsSpace(char32_t c);      // str.isspace
bool IsLineBreak(char32_t c);  // str.splitlines separators
bool IsAlpha(char32_t c);
bool IsDigit(char32_t c);
bool IsUpper(char32_t c);
bool IsLower(char32_t c);
char32_t ToUpper(char32_t c);
char32_t ToLower(char32_t c);

std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string Capitalize(std::string_view s);  // str.capitalize
std::string Title(std::string_view s);       // str.title
std::string SwapCase(std::string_view s);

// str.strip/lstrip/rstrip: whitespace when `chars` is empty optional, else those characters.
std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
// str.split / str.rsplit (maxsplit < 0: no limit); sep nullopt splits on whitespace runs.
std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit);
std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit);
std::vector<std::string> SplitLines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0 replaces all.
std::string Replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// str.find / str.rfind over s[start:end] (Python slice bounds, code points); -1 when absent.
int64_t Find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
             std::optional<int64_t> end, bool reverse);
int64_t Count(std::string_view s, std::string_view sub, std::optional<int64_t> start,
              std::optional<int64_t> end);
// str.center / ljust / rjust with a one-character fill.
std::string Pad(std::string_view s, int64_t width, std::string_view fill, int align);

// Python's repr of a str: quotes chosen like Python, non-printable characters escaped.
std::string StrRepr(std::string_view s);

// Whether the string is valid UTF-8 without surrogates; the byte offset of the first bad byte.
bool ValidUtf8(std::string_view s, size_t* bad_offset);

}  // namespace latent::tokenizer::jinja
