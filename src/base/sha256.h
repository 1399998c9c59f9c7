// SHA-256 of files and buffers (OpenSSL), as lowercase hex.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  void Update(const void* data, size_t n);
  std::string HexDigest();  // finalizes

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace deepinfer
