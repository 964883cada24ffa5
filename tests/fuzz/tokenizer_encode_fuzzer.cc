// Fuzzes encoding arbitrary bytes (invalid UTF-8 included) with the seed tokenizers
// (tests/fuzz/tokenizer_seeds/*.json: byte-level with added tokens and regex splits,
// sentencepiece-style with byte fallback, and the other components), or with the tokenizer in
// $LATENT_FUZZ_TOKENIZER_DIR when set (e.g. a real checkpoint's). Input: one byte choosing the
// tokenizer, then the text. Properties: encoding never throws; decoding gives valid UTF-8; the
// streaming detokenizer, fed token by token, gives exactly the one-shot decoding, in pieces of
// whole characters.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

std::vector<Tokenizer>& Tokenizers() {
  static std::vector<Tokenizer> tokenizers;
  return tokenizers;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("LATENT_FUZZ_TOKENIZER_DIR")) {
    Tokenizers().push_back(Tokenizer::FromDir(dir));
    return 0;
  }
  std::vector<std::filesystem::path> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(LATENT_TOKENIZER_SEEDS_DIR)) {
    if (entry.path().extension() == ".json") seeds.push_back(entry.path());
  }
  std::sort(seeds.begin(), seeds.end());
  for (const auto& path : seeds) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream json;
    json << in.rdbuf();
    Tokenizers().push_back(Tokenizer::FromJson(json.str()));
  }
  Check(!Tokenizers().empty());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  const Tokenizer& tok = Tokenizers()[data[0] % Tokenizers().size()];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (bool special : {true, false}) {
    const std::vector<int32_t> ids = tok.Encode(text, special);
    for (bool skip : {false, true}) {
      const std::string decoded = tok.Decode(ids, skip);
      Check(IsValidUtf8(decoded));
      StreamingDetokenizer stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = stream.Push(id);
        Check(IsValidUtf8(piece));
        streamed += piece;
      }
      streamed += stream.Finish();
      Check(streamed == decoded);
    }
  }
  return 0;
}
