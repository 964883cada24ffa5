// Fuzzes loading tokenizer.json: the input is the file's content. A file that loads is then used
// to encode and decode a few fixed texts, token by token too. Bad files must fail with
// latent::Error only; anything else (another exception, a crash, a sanitizer report, a hang, text
// that is not UTF-8) is a bug. Seeds: tests/fuzz/tokenizer_seeds/*.json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using latent::tokenizer::IsValidUtf8;
using latent::tokenizer::StreamingDetokenizer;
using latent::tokenizer::Tokenizer;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void Exercise(const Tokenizer& tok) {
  static const std::vector<std::string> texts = {
      "",
      "Hello, world! It's 2024-06-01.",
      "  a  b\t\n\nc ",
      "héllo wörld 中文字符 😀👨‍👩‍👧",
      "<s>x</s> <|endoftext|><|im_start|>",
      "12345678901 abc-ab--c|b",
      "bad \xff\xe4\xb8 utf8"};
  for (const std::string& text : texts) {
    for (bool special : {true, false}) {
      const std::vector<int32_t> ids = tok.Encode(text, special);
      for (bool skip : {false, true}) {
        Check(IsValidUtf8(tok.Decode(ids, skip)));
        StreamingDetokenizer stream(tok, skip);
        for (int32_t id : ids) Check(IsValidUtf8(stream.Push(id)));
        Check(IsValidUtf8(stream.Finish()));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const Tokenizer tok = Tokenizer::FromJson(input);
    Exercise(tok);
  } catch (const latent::Error&) {
  }
  return 0;
}
