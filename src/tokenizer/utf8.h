// UTF-8 helpers and GPT-2's byte <-> printable-character table, shared by the tokenizers.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace deepinfer::utf8 {

// Bytes in the UTF-8 sequence starting at s[i] (1 for a byte that cannot start one), clamped to the string.
inline size_t CharLen(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  return n < s.size() - i ? n : s.size() - i;
}

// The code point of the sequence starting at s[i]; *len receives its CharLen (no validation: continuation bytes
// contribute their low 6 bits, a lone byte is its own value).
inline uint32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t n = CharLen(s, i);
  uint32_t v = n == 1 ? c : c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return v;
}

inline std::string Encode(uint32_t cp) {
  std::string o;
  if (cp < 0x80) {
    o += static_cast<char>(cp);
  } else if (cp < 0x800) {
    o += static_cast<char>(0xC0 | (cp >> 6));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    o += static_cast<char>(0xE0 | (cp >> 12));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    o += static_cast<char>(0xF0 | (cp >> 18));
    o += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    o += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    o += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return o;
}

// GPT-2 byte-level alphabet: every byte maps to a printable character (printable bytes to themselves, the rest
// to U+0100 upward in byte order), so byte strings become valid text for BPE.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_char;
  std::unordered_map<std::string, uint8_t> char_to_byte;
  ByteLevelTable() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_char[b] = Encode(printable ? b : 256 + n++);
      char_to_byte[byte_to_char[b]] = static_cast<uint8_t>(b);
    }
  }
  static const ByteLevelTable& Get() {
    static const ByteLevelTable t;
    return t;
  }
};

}  // namespace deepinfer::utf8
