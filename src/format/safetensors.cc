#include "format/safetensors.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace deepinfer {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;

DType DTypeFromSafetensors(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  if (s == "I32") return DType::kI32;
  if (s == "I64") return DType::kI64;
  // Raw bytes: U8, and DeepSeek-V4's packed MXFP4 experts (I8, two e2m1 codes a byte) and E8M0 exponent scales
  // (F8_E8M0), which the loader reinterprets where a family declares them.
  if (s == "U8" || s == "I8" || s == "F8_E8M0") return DType::kU8;
  return DType::kInvalid;
}

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    default: return nullptr;
  }
}

}  // namespace

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  DI_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  DI_ASSIGN_OR_RETURN(auto st, Parse(file->data(), file->size(), path));
  st->file_ = std::move(file);
  return st;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 8) return DataLoss(name + ": file too small to be safetensors (" + std::to_string(size) + " bytes)");
  uint64_t n;
  std::memcpy(&n, data, 8);
  if (n > kMaxHeader || n > size - 8)
    return DataLoss(name + ": header length " + std::to_string(n) + " exceeds the file (truncated or not safetensors)");
  nlohmann::json header = nlohmann::json::parse(data + 8, data + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return DataLoss(name + ": header is not a JSON object");
  const uint8_t* base = data + 8 + n;
  const uint64_t data_size = size - 8 - n;
  auto st = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  for (auto& [key, e] : header.items()) {
    if (key == "__metadata__") continue;
    const std::string where = name + ": tensor '" + key + "'";
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return DataLoss(where + ": entry needs dtype, shape and data_offsets");
    auto& jd = e["dtype"];
    auto& js = e["shape"];
    auto& jo = e["data_offsets"];
    if (!jd.is_string() || !js.is_array() || !jo.is_array() || jo.size() != 2 || !jo[0].is_number_unsigned() ||
        !jo[1].is_number_unsigned())
      return DataLoss(where + ": malformed dtype/shape/data_offsets");
    TensorView t;
    t.dtype = DTypeFromSafetensors(jd.get<std::string>());
    if (t.dtype == DType::kInvalid) return Unimplemented(where + ": unsupported dtype " + jd.get<std::string>());
    uint64_t numel = 1;
    if (js.size() > 8) return DataLoss(where + ": too many dimensions");
    for (auto& d : js) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) return DataLoss(where + ": bad shape");
      uint64_t v = d.get<uint64_t>();
      if (v && numel > (1ull << 62) / v) return DataLoss(where + ": shape overflows");
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    uint64_t b = jo[0].get<uint64_t>(), en = jo[1].get<uint64_t>();
    if (b > en || en > data_size)
      return DataLoss(where + ": data offsets [" + std::to_string(b) + ", " + std::to_string(en) +
                      ") run past the end of the data (" + std::to_string(data_size) + " bytes); truncated or corrupt");
    if (en - b != DTypeBytes(t.dtype, numel))
      return DataLoss(where + ": byte size " + std::to_string(en - b) + " does not match shape " + t.ShapeString());
    t.data = base + b;
    t.nbytes = en - b;
    st->tensors_.emplace(key, std::move(t));
  }
  return st;
}

StatusOr<std::unique_ptr<SafetensorsModel>> SafetensorsModel::OpenDir(const std::string& dir) {
  namespace fs = std::filesystem;
  auto m = std::unique_ptr<SafetensorsModel>(new SafetensorsModel());
  std::vector<std::string> shards;
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return DataLoss(index.string() + ": not a valid safetensors index (needs a weight_map object)");
    std::set<std::string> seen;
    for (auto& [k, v] : j["weight_map"].items()) {
      if (!v.is_string()) return DataLoss(index.string() + ": weight_map['" + k + "'] is not a file name");
      auto f = v.get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        return DataLoss(index.string() + ": shard name '" + f + "' escapes the model directory");
      if (seen.insert(f).second) shards.push_back(f);
    }
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    shards.push_back("model.safetensors");
  } else {
    return NotFound(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  for (auto& s : shards) {
    DI_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open((fs::path(dir) / s).string()));
    for (auto& [k, v] : f->tensors())
      if (!m->tensors_.emplace(k, v).second) return DataLoss(dir + ": tensor '" + k + "' appears in two shards");
    m->files_.push_back(std::move(f));
  }
  return m;
}

const TensorView* SafetensorsModel::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (auto& t : tensors) {
    const char* dn = t.st_dtype ? t.st_dtype : SafetensorsDTypeName(t.dtype);
    if (!dn) return InvalidArgument(std::string("safetensors cannot store ") + DTypeName(t.dtype));
    header[t.name] = {{"dtype", dn}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return IoError(path + ": cannot create");
  uint64_t n = h.size();
  bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (auto& t : tensors) ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IoError(path + ": write failed");
  }
  return Status::Ok();
}

}  // namespace deepinfer
