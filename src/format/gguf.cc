#include "format/gguf.h"

#include <cstdio>
#include <cstring>
#include <limits>

namespace deepinfer {

void TensorView::RowToF32(int64_t r, float* out) const {
  const int64_t k = cols();
  DequantizeRow(dtype, row(r), out, static_cast<size_t>(k));
  if (block_scale) {
    const float* sc = block_scale + ((scale_row0 + r) / kFp8Block) * scale_cols;
    for (int64_t c = 0; c < k; ++c) out[c] *= sc[c / kFp8Block];
  }
}

std::string TensorView::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

DType DTypeFromGgml(uint32_t t) {
  switch (t) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 9: return DType::kQ8_1;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 15: return DType::kQ8_K;
    case 20: return DType::kIQ4_NL;
    case 23: return DType::kIQ4_XS;
    case 39: return DType::kMXFP4;
    case 26: return DType::kI32;
    case 30: return DType::kBF16;
    default: return DType::kInvalid;
  }
}

uint32_t GgmlFromDType(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 6;
    case DType::kQ5_1: return 7;
    case DType::kQ8_0: return 8;
    case DType::kQ8_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 12;
    case DType::kQ5_K: return 13;
    case DType::kQ6_K: return 14;
    case DType::kQ8_K: return 15;
    case DType::kIQ4_NL: return 20;
    case DType::kIQ4_XS: return 23;
    case DType::kMXFP4: return 39;
    case DType::kI32: return 26;
    case DType::kBF16: return 30;
    default: return 0xffffffffu;
  }
}

namespace {

// ggml's names of the types deepinfer does not read, for error messages (ggml.h's enum ggml_type).
const char* UnsupportedGgmlTypeName(uint32_t t) {
  switch (t) {
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 24: return "i8";
    case 25: return "i16";
    case 27: return "i64";
    case 28: return "f64";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    case 39: return "mxfp4";
    case 40: return "nvfp4";
    default: return nullptr;
  }
}

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxStringLen = 1u << 30;

// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  template <typename T>
  bool Read(T* out) {
    if (n_ - pos_ < sizeof(T)) return false;
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* out) {
    uint64_t len;
    if (!Read(&len) || len > kMaxStringLen || len > n_ - pos_) return false;
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }
  size_t remaining() const { return n_ - pos_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    default: return 0;
  }
}

// double -> int64 without undefined behaviour for NaN, infinities or out-of-range values (they become 0 / clamp).
int64_t SafeToInt(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return INT64_MAX;
  if (v <= -9.2e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}

bool ReadNumber(Cursor& c, GgufType t, double* d, int64_t* i) {
  union {
    uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32; uint64_t u64; int64_t i64; double f64;
  } v{};
  bool ok = false;
  switch (t) {
    case GgufType::kU8: case GgufType::kBool: ok = c.Read(&v.u8); *i = v.u8; break;
    case GgufType::kI8: ok = c.Read(&v.i8); *i = v.i8; break;
    case GgufType::kU16: ok = c.Read(&v.u16); *i = v.u16; break;
    case GgufType::kI16: ok = c.Read(&v.i16); *i = v.i16; break;
    case GgufType::kU32: ok = c.Read(&v.u32); *i = v.u32; break;
    case GgufType::kI32: ok = c.Read(&v.i32); *i = v.i32; break;
    case GgufType::kU64: ok = c.Read(&v.u64); *i = static_cast<int64_t>(v.u64); break;
    case GgufType::kI64: ok = c.Read(&v.i64); *i = v.i64; break;
    case GgufType::kF32: ok = c.Read(&v.f32); *d = v.f32; *i = SafeToInt(v.f32); return ok;
    case GgufType::kF64: ok = c.Read(&v.f64); *d = v.f64; *i = SafeToInt(v.f64); return ok;
    default: return false;
  }
  *d = static_cast<double>(*i);
  return ok;
}

Status ReadValue(Cursor& c, GgufType t, GgufValue* out, const std::string& where) {
  out->type = t;
  if (t == GgufType::kString) {
    std::string s;
    if (!c.ReadString(&s)) return DataLoss(where + ": string runs past the end of the file");
    out->scalar = std::move(s);
    return Status::Ok();
  }
  if (t == GgufType::kArray) {
    uint32_t et;
    uint64_t n;
    if (!c.Read(&et) || !c.Read(&n)) return DataLoss(where + ": truncated array header");
    auto etype = static_cast<GgufType>(et);
    out->array_type = etype;
    if (etype == GgufType::kString) {
      if (n > c.remaining() / 8) return DataLoss(where + ": array length " + std::to_string(n) + " exceeds the file");
      out->strings.resize(n);
      for (uint64_t k = 0; k < n; ++k)
        if (!c.ReadString(&out->strings[k])) return DataLoss(where + ": string array element runs past the end");
      return Status::Ok();
    }
    size_t es = ScalarSize(etype);
    if (es == 0) return DataLoss(where + ": unsupported array element type " + std::to_string(et));
    if (n > c.remaining() / es) return DataLoss(where + ": array length " + std::to_string(n) + " exceeds the file");
    out->numbers.resize(n);
    for (uint64_t k = 0; k < n; ++k) {
      int64_t iv;
      ReadNumber(c, etype, &out->numbers[k], &iv);
      if (etype != GgufType::kF32 && etype != GgufType::kF64) out->numbers[k] = static_cast<double>(iv);
    }
    return Status::Ok();
  }
  double d = 0;
  int64_t i = 0;
  if (ScalarSize(t) == 0) return DataLoss(where + ": unknown value type " + std::to_string(static_cast<uint32_t>(t)));
  if (!ReadNumber(c, t, &d, &i)) return DataLoss(where + ": truncated value");
  if (t == GgufType::kF32 || t == GgufType::kF64) out->scalar = d;
  else if (t == GgufType::kBool) out->scalar = (i != 0);
  else out->scalar = i;
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  DI_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  DI_ASSIGN_OR_RETURN(auto g, Parse(file->data(), file->size(), path));
  g->file_ = std::move(file);
  return g;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* data, size_t size, const std::string& name) {
  auto g = std::unique_ptr<GgufFile>(new GgufFile());
  g->path_ = name;
  Cursor c(data, size);
  uint32_t magic = 0;
  if (!c.Read(&magic)) return DataLoss(name + ": file too small to be GGUF (" + std::to_string(size) + " bytes)");
  if (magic != kMagic) return DataLoss(name + ": bad magic (not a GGUF file)");
  if (!c.Read(&g->version_)) return DataLoss(name + ": truncated header");
  if (g->version_ < 2 || g->version_ > 3)
    return Unimplemented(name + ": GGUF version " + std::to_string(g->version_) + " (supported: 2, 3)");
  uint64_t n_tensors, n_kv;
  if (!c.Read(&n_tensors) || !c.Read(&n_kv)) return DataLoss(name + ": truncated header");
  // Every entry needs at least a few bytes, so counts beyond the file size are corrupt.
  if (n_kv > size / 12 || n_tensors > size / 24) return DataLoss(name + ": tensor/metadata counts exceed the file size");
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    uint32_t type;
    if (!c.ReadString(&key) || !c.Read(&type)) return DataLoss(name + ": truncated metadata entry " + std::to_string(k));
    GgufValue v;
    DI_RETURN_IF_ERROR(ReadValue(c, static_cast<GgufType>(type), &v, name + ": metadata '" + key + "'"));
    g->kv_[key] = std::move(v);
  }
  uint64_t alignment = 32;
  if (auto* a = g->Find("general.alignment")) {
    if (a->is_array() || !std::holds_alternative<int64_t>(a->scalar)) return DataLoss(name + ": general.alignment has the wrong type");
    alignment = static_cast<uint64_t>(std::get<int64_t>(a->scalar));
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment > 65536) return DataLoss(name + ": bad general.alignment");
  }
  struct Info {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset;
    uint64_t nbytes;
  };
  std::vector<Info> infos;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Info info;
    uint32_t n_dims, type;
    if (!c.ReadString(&info.name) || !c.Read(&n_dims)) return DataLoss(name + ": truncated tensor info " + std::to_string(k));
    if (n_dims == 0 || n_dims > kMaxDims) return DataLoss(name + ": tensor '" + info.name + "' has " + std::to_string(n_dims) + " dims");
    std::vector<uint64_t> ne(n_dims);
    uint64_t numel = 1;
    for (auto& d : ne) {
      if (!c.Read(&d)) return DataLoss(name + ": truncated tensor info for '" + info.name + "'");
      if (d == 0 || d > (1ull << 40) || numel > (std::numeric_limits<uint64_t>::max() >> 1) / d)
        return DataLoss(name + ": tensor '" + info.name + "' has an invalid dimension");
      numel *= d;
    }
    if (!c.Read(&type) || !c.Read(&info.offset)) return DataLoss(name + ": truncated tensor info for '" + info.name + "'");
    info.dtype = DTypeFromGgml(type);
    if (info.dtype == DType::kInvalid)
    {
      const char* tn = UnsupportedGgmlTypeName(type);
      return Unimplemented(name + ": tensor '" + info.name + "' has unsupported ggml type " + std::to_string(type) +
                           (tn ? std::string(" (") + tn + ")" : std::string(" (unknown)")) +
                           "; supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, "
                           "iq4_nl, iq4_xs, mxfp4");
    }
    const auto& ti = GetDTypeInfo(info.dtype);
    if (ne[0] % ti.block_elems)
      return DataLoss(name + ": tensor '" + info.name + "' row size " + std::to_string(ne[0]) + " is not a multiple of " +
                      ti.name + "'s block size " + std::to_string(ti.block_elems));
    info.nbytes = numel / ti.block_elems * ti.block_bytes;
    for (size_t d = n_dims; d-- > 0;) info.shape.push_back(static_cast<int64_t>(ne[d]));
    if (info.offset % alignment) return DataLoss(name + ": tensor '" + info.name + "' data offset is not aligned");
    infos.push_back(std::move(info));
  }
  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  for (auto& info : infos) {
    if (data_start > size || info.offset > size - data_start || info.nbytes > size - data_start - info.offset)
      return DataLoss(name + ": tensor '" + info.name + "' data (offset " + std::to_string(info.offset) + ", " +
                      std::to_string(info.nbytes) + " bytes) runs past the end of the file (" + std::to_string(size) +
                      " bytes); the file is truncated or corrupt");
    TensorView t;
    t.dtype = info.dtype;
    t.shape = info.shape;
    t.data = data + data_start + info.offset;
    t.nbytes = info.nbytes;
    if (!g->tensors_.emplace(info.name, std::move(t)).second)
      return DataLoss(name + ": duplicate tensor name '" + info.name + "'");
  }
  return g;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorView* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  auto* v = Find(key);
  if (!v) return NotFound(path_ + ": missing metadata '" + key + "'");
  if (!v->is_array()) {
    if (auto* i = std::get_if<int64_t>(&v->scalar)) return *i;
    if (auto* d = std::get_if<double>(&v->scalar)) return SafeToInt(*d);
  }
  return InvalidArgument(path_ + ": metadata '" + key + "' is not an integer");
}

StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  auto* v = Find(key);
  if (!v) return NotFound(path_ + ": missing metadata '" + key + "'");
  if (!v->is_array()) {
    if (auto* d = std::get_if<double>(&v->scalar)) return *d;
    if (auto* i = std::get_if<int64_t>(&v->scalar)) return static_cast<double>(*i);
  }
  return InvalidArgument(path_ + ": metadata '" + key + "' is not a number");
}

StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  auto* v = Find(key);
  if (!v) return NotFound(path_ + ": missing metadata '" + key + "'");
  if (auto* s = std::get_if<std::string>(&v->scalar); s && !v->is_array()) return *s;
  return InvalidArgument(path_ + ": metadata '" + key + "' is not a string");
}

// ---------------------------------------------------------------------------------------------------- writer

namespace {
template <typename T>
void Put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
void PutString(std::vector<uint8_t>& b, const std::string& s) {
  Put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
}  // namespace

template <typename T>
void GgufWriter::SetScalar(const std::string& k, uint32_t type, T v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, type);
  Put(b, v);
  kv_.emplace_back(k, std::move(b));
}

void GgufWriter::SetU32(const std::string& k, uint32_t v) { SetScalar(k, 4, v); }
void GgufWriter::SetI32(const std::string& k, int32_t v) { SetScalar(k, 5, v); }
void GgufWriter::SetF32(const std::string& k, float v) { SetScalar(k, 6, v); }
void GgufWriter::SetBool(const std::string& k, bool v) { SetScalar<uint8_t>(k, 7, v ? 1 : 0); }
void GgufWriter::SetString(const std::string& k, const std::string& v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, 8);
  PutString(b, v);
  kv_.emplace_back(k, std::move(b));
}
void GgufWriter::SetStringArray(const std::string& k, const std::vector<std::string>& v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, 9);
  Put<uint32_t>(b, 8);
  Put<uint64_t>(b, v.size());
  for (auto& s : v) PutString(b, s);
  kv_.emplace_back(k, std::move(b));
}
template <typename T>
void GgufWriter::SetArray(const std::string& k, uint32_t elem_type, const std::vector<T>& v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, 9);
  Put<uint32_t>(b, elem_type);
  Put<uint64_t>(b, v.size());
  for (T x : v) Put(b, x);
  kv_.emplace_back(k, std::move(b));
}

void GgufWriter::SetF32Array(const std::string& k, const std::vector<float>& v) { SetArray(k, 6, v); }
void GgufWriter::SetI32Array(const std::string& k, const std::vector<int32_t>& v) { SetArray(k, 5, v); }

namespace {
// One scalar of GGUF type t, from the widened value the reader keeps.
void PutTyped(std::vector<uint8_t>& b, GgufType t, double f, int64_t i) {
  switch (t) {
    case GgufType::kU8: Put<uint8_t>(b, static_cast<uint8_t>(i)); break;
    case GgufType::kI8: Put<int8_t>(b, static_cast<int8_t>(i)); break;
    case GgufType::kU16: Put<uint16_t>(b, static_cast<uint16_t>(i)); break;
    case GgufType::kI16: Put<int16_t>(b, static_cast<int16_t>(i)); break;
    case GgufType::kU32: Put<uint32_t>(b, static_cast<uint32_t>(i)); break;
    case GgufType::kI32: Put<int32_t>(b, static_cast<int32_t>(i)); break;
    case GgufType::kU64: Put<uint64_t>(b, static_cast<uint64_t>(i)); break;
    case GgufType::kI64: Put<int64_t>(b, i); break;
    case GgufType::kF32: Put<float>(b, static_cast<float>(f)); break;
    case GgufType::kF64: Put<double>(b, f); break;
    case GgufType::kBool: Put<uint8_t>(b, i ? 1 : 0); break;
    default: break;
  }
}
}  // namespace

void GgufWriter::SetValue(const std::string& k, const GgufValue& v) {
  std::vector<uint8_t> b;
  Put<uint32_t>(b, static_cast<uint32_t>(v.type));
  if (v.is_array()) {
    Put<uint32_t>(b, static_cast<uint32_t>(v.array_type));
    if (v.array_type == GgufType::kString) {
      Put<uint64_t>(b, v.strings.size());
      for (const auto& x : v.strings) PutString(b, x);
    } else {
      Put<uint64_t>(b, v.numbers.size());
      for (double x : v.numbers) PutTyped(b, v.array_type, x, static_cast<int64_t>(x));
    }
  } else if (v.type == GgufType::kString) {
    PutString(b, std::get<std::string>(v.scalar));
  } else {
    double f = 0;
    int64_t i = 0;
    if (const auto* p = std::get_if<int64_t>(&v.scalar)) f = static_cast<double>(i = *p);
    if (const auto* p = std::get_if<double>(&v.scalar)) i = static_cast<int64_t>(f = *p);
    if (const auto* p = std::get_if<bool>(&v.scalar)) f = static_cast<double>(i = *p ? 1 : 0);
    PutTyped(b, v.type, f, i);
  }
  kv_.emplace_back(k, std::move(b));
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::vector<uint8_t> bytes) {
  const size_t n = bytes.size();
  tensors_.push_back({name, dtype, shape, std::move(bytes), nullptr, n});
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, TensorMaker make) {
  int64_t elems = 1;
  for (int64_t d : shape) elems *= d;
  tensors_.push_back({name, dtype, shape, {}, std::move(make), DTypeBytes(dtype, static_cast<size_t>(elems))});
}

Status GgufWriter::Write(const std::string& path, const std::function<void(size_t, size_t)>& progress) const {
  constexpr uint64_t kAlign = 32;
  std::vector<uint8_t> head;
  Put<uint32_t>(head, kMagic);
  Put<uint32_t>(head, 3);
  Put<uint64_t>(head, tensors_.size());
  Put<uint64_t>(head, kv_.size());
  for (auto& [k, v] : kv_) {
    PutString(head, k);
    head.insert(head.end(), v.begin(), v.end());
  }
  uint64_t offset = 0;
  for (auto& t : tensors_) {
    PutString(head, t.name);
    Put<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) Put<uint64_t>(head, static_cast<uint64_t>(t.shape[d]));
    Put<uint32_t>(head, GgmlFromDType(t.dtype));
    Put<uint64_t>(head, offset);
    offset = (offset + t.nbytes + kAlign - 1) / kAlign * kAlign;
  }
  head.resize((head.size() + kAlign - 1) / kAlign * kAlign, 0);
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return IoError(path + ": cannot create");
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  static const uint8_t kZeros[kAlign] = {};
  std::vector<uint8_t> made;
  size_t written = 0;
  for (auto& t : tensors_) {
    const std::vector<uint8_t>* bytes = &t.bytes;
    if (t.make) {
      made.assign(t.nbytes, 0);
      t.make(&made);
      if (made.size() != t.nbytes) {
        std::fclose(f);
        std::remove(tmp.c_str());
        return Internal(path + ": tensor '" + t.name + "' produced " + std::to_string(made.size()) + " bytes, expected " +
                        std::to_string(t.nbytes));
      }
      bytes = &made;
    }
    ok = ok && std::fwrite(bytes->data(), 1, bytes->size(), f) == bytes->size();
    size_t pad = (kAlign - bytes->size() % kAlign) % kAlign;
    ok = ok && std::fwrite(kZeros, 1, pad, f) == pad;
    written += bytes->size();
    if (progress) progress(written, static_cast<size_t>(offset));
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IoError(path + ": write failed");
  }
  return Status::Ok();
}

}  // namespace deepinfer
