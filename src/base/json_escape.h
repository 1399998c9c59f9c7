// JSON string escaping as JSON.stringify does it (quotes, backslash, control characters; every other byte, UTF-8
// included, as it is), byte by byte: escaping a text in pieces gives the bytes of escaping it whole, which the
// streaming tool-call parser relies on. Shared by Jinja's tojson and the DSML tool-call parser.
#pragma once
#include <string>
#include <string_view>

namespace deepinfer {

// Appends the inside of a JSON string literal holding `s` (no surrounding quotes).
inline void AppendJsonEscaped(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += kHex[c >> 4];
          *out += kHex[c & 0xf];
        } else {
          *out += ch;
        }
    }
  }
}

}  // namespace deepinfer
