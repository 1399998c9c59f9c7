#include "server/http_encoding.h"

#include <zlib.h>

#include <cctype>
#include <cstdlib>
#include <random>

namespace deepinfer {

bool AcceptsGzip(const std::string& v) {
  bool gzip = false, star = false, gzip_listed = false;
  size_t i = 0;
  while (i < v.size()) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    std::string item = v.substr(i, j - i);
    i = j + 1;
    // Codings and parameter names are case-insensitive (RFC 9110): "gzip;Q=0" refuses gzip as "gzip;q=0" does.
    for (char& ch : item) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string coding = item.substr(0, item.find(';'));
    auto trim = [](std::string s) {
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
      return s;
    };
    coding = trim(coding);
    double q = 1;
    if (size_t qp = item.find("q="); qp != std::string::npos && item.find(';') != std::string::npos && qp > item.find(';'))
      q = std::strtod(item.c_str() + qp + 2, nullptr);
    if (coding == "gzip" || coding == "x-gzip") {
      gzip_listed = true;
      gzip = q > 0;
    } else if (coding == "*") {
      star = q > 0;
    }
  }
  return gzip_listed ? gzip : star;
}

std::string Gzip(const std::string& data) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

std::string RequestIdFor(const std::string* client_id) {
  if (client_id && !client_id->empty() && client_id->size() <= 128) {
    bool printable = true;
    for (unsigned char ch : *client_id) printable = printable && ch > 0x20 && ch < 0x7f;
    if (printable) return *client_id;
  }
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int i = 0; i < 2; ++i) {
    uint64_t x = rng();
    for (int k = 0; k < 16; ++k, x >>= 4) id[i * 16 + k] = kHex[x & 15];
  }
  return id;
}

}  // namespace deepinfer
