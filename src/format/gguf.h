// GGUF v2/v3 reader (mmap, every offset and length bounds-checked) and writer.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "base/mapped_file.h"
#include "deepinfer/status.h"
#include "tensor/tensor.h"

namespace deepinfer {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};

// One metadata value. Scalars of every integer type are widened to int64/uint64; arrays keep their element type.
struct GgufValue {
  GgufType type = GgufType::kU32;
  GgufType array_type = GgufType::kU32;  // element type when type == kArray
  std::variant<int64_t, double, bool, std::string> scalar;
  std::vector<std::string> strings;       // string arrays
  std::vector<double> numbers;            // numeric / bool arrays

  bool is_array() const { return type == GgufType::kArray; }
};

class GgufFile {
 public:
  // Opens and validates the whole file structure; errors name the file and the problem.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses from memory (used by the fuzzer); `data` must outlive the result.
  static StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* Find(const std::string& key) const;
  // Typed lookups: NotFound when missing, InvalidArgument when the type does not fit.
  StatusOr<int64_t> GetInt(const std::string& key) const;
  StatusOr<double> GetFloat(const std::string& key) const;
  StatusOr<std::string> GetString(const std::string& key) const;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const TensorView* FindTensor(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::string path_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::map<std::string, TensorView> tensors_;
};

// Streams a GGUF file: metadata first, then tensor infos, then aligned data.
class GgufWriter {
 public:
  void SetU32(const std::string& k, uint32_t v);
  void SetI32(const std::string& k, int32_t v);
  void SetF32(const std::string& k, float v);
  void SetBool(const std::string& k, bool v);
  void SetString(const std::string& k, const std::string& v);
  void SetStringArray(const std::string& k, const std::vector<std::string>& v);
  void SetF32Array(const std::string& k, const std::vector<float>& v);
  void SetI32Array(const std::string& k, const std::vector<int32_t>& v);
  // A value read by GgufFile, re-encoded with its own type (64-bit integer arrays pass through double).
  void SetValue(const std::string& k, const GgufValue& v);
  // shape is outermost-first (PyTorch order); the bytes are copied into the writer.
  void AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::vector<uint8_t> bytes);
  // A tensor produced while the file is written (one at a time, so a converter never holds the whole model):
  // `make` fills exactly DTypeBytes(dtype, elements) bytes.
  using TensorMaker = std::function<void(std::vector<uint8_t>* bytes)>;
  void AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, TensorMaker make);
  // progress (optional): called with (bytes written, total bytes) after every tensor.
  Status Write(const std::string& path, const std::function<void(size_t, size_t)>& progress = {}) const;

 private:
  template <typename T>
  void SetScalar(const std::string& k, uint32_t type, T v);
  template <typename T>
  void SetArray(const std::string& k, uint32_t elem_type, const std::vector<T>& v);

  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    TensorMaker make;  // set for tensors produced at write time
    size_t nbytes = 0;
  };
  std::vector<std::pair<std::string, std::vector<uint8_t>>> kv_;  // key -> encoded (type + value)
  std::vector<Tensor> tensors_;
};

// ggml type id <-> DType (kInvalid for types we do not support).
DType DTypeFromGgml(uint32_t ggml_type);
uint32_t GgmlFromDType(DType t);

}  // namespace deepinfer
