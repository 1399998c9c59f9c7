#include "base/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <vector>

namespace deepinfer {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) { EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr); }
Sha256::~Sha256() = default;
void Sha256::Update(const void* data, size_t n) { EVP_DigestUpdate(impl_->ctx, data, n); }

std::string Sha256::HexDigest() {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &len);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

StatusOr<std::string> Sha256File(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return IoError(path + ": cannot open");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.Update(buf.data(), n);
  std::fclose(f);
  return h.HexDigest();
}

}  // namespace deepinfer
