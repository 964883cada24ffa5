#include "tokenizer/byte_level.h"

#include <algorithm>
#include <array>

#include "tokenizer/utf8.h"

namespace latent::tokenizer {

namespace {

// bytes_char() of HF tokenizers: printable Latin-1 bytes stand for themselves; the other 68 bytes
// take the code points 256, 257, ... in byte order.
struct Tables {
  std::array<uint32_t, 256> char_of_byte{};
  std::array<std::array<char, 2>, 256> utf8_of_byte{};  // every character here is 1 or 2 bytes
  std::array<uint8_t, 256> utf8_length{};
  std::array<int16_t, 512> byte_of_char{};
  Tables() {
    byte_of_char.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      char_of_byte[b] = printable ? b : next++;
      std::string utf8;
      AppendUtf8(char_of_byte[b], utf8);
      utf8_length[b] = static_cast<uint8_t>(utf8.size());
      std::copy(utf8.begin(), utf8.end(), utf8_of_byte[b].begin());
      byte_of_char[char_of_byte[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

void AppendByteLevel(std::string_view bytes, std::string& out) {
  const Tables& t = GetTables();
  size_t n = out.size();
  out.resize(n + 2 * bytes.size());
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    out[n] = t.utf8_of_byte[b][0];
    out[n + 1] = t.utf8_of_byte[b][1];
    n += t.utf8_length[b];
  }
  out.resize(n);
}

int ByteOfByteLevelChar(uint32_t cp) { return cp < 512 ? GetTables().byte_of_char[cp] : -1; }

}  // namespace latent::tokenizer
