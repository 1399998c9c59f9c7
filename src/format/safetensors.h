// safetensors reader (single file or sharded via model.safetensors.index.json; mmap) and writer.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "deepinfer/status.h"
#include "tensor/tensor.h"

namespace deepinfer {

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses from memory (fuzzer entry point); `data` must outlive the result.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const uint8_t* data, size_t size, const std::string& name);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of an HF checkpoint directory: model.safetensors, or the shards named by the index.
class SafetensorsModel {
 public:
  static StatusOr<std::unique_ptr<SafetensorsModel>> OpenDir(const std::string& dir);
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  // The safetensors dtype to record when it is not dtype's own: raw bytes (kU8) written as "I8" or "F8_E8M0".
  const char* st_dtype = nullptr;
};
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors);

}  // namespace deepinfer
