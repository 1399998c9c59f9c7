// Read-only memory-mapped file. Weights stay in the page cache and are shared between processes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer {

class MappedFile {
 public:
  static StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace deepinfer
