// The list of model families and the lookups over it; the typed config readers the families use.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/arch/arch.h"

namespace deepinfer {

const std::vector<const ArchSpec*>& AllArchs() {
  // One line per family. Order matters only for lookups by a shared name (first match wins).
  static const std::vector<const ArchSpec*> kAll = {
      &LlamaArch(), &MistralArch(), &Qwen2Arch(), &Qwen3Arch(), &Qwen3MoeArch(), &DeepseekArch(),
      &MixtralArch(), &Qwen2MoeArch(), &Olmo2Arch(), &SmolLM3Arch(), &Gemma3Arch(), &GptOssArch(),
      &DeepseekV4Arch(),
  };
  return kAll;
}

const ArchSpec& GetArch(Arch arch) {
  for (const ArchSpec* a : AllArchs())
    if (a->arch == arch) return *a;
  std::fprintf(stderr, "deepinfer: architecture %d is not registered\n", static_cast<int>(arch));
  std::abort();
}

const ArchSpec* FindArchByHfName(const std::string& name) {
  for (const ArchSpec* a : AllArchs())
    for (const std::string& n : a->hf_names)
      if (n == name) return a;
  return nullptr;
}

const ArchSpec* FindArchByGguf(const std::string& gguf_arch, bool has_experts) {
  if (has_experts)
    for (const ArchSpec* a : AllArchs())
      if (a->gguf_arch_with_experts && gguf_arch == a->gguf_arch_with_experts) return a;
  for (const ArchSpec* a : AllArchs())
    if (gguf_arch == a->gguf_arch) return a;
  return nullptr;
}

const ArchSpec* FindArchByAnyName(const std::string& name) {
  for (const ArchSpec* a : AllArchs())
    if (name == a->name) return a;
  if (const ArchSpec* a = FindArchByHfName(name)) return a;
  return FindArchByGguf(name, false);
}

const ArchSpec* FindHfLayout(const ArchSpec& family, const std::string& layout) {
  if (family.hf_layout && layout == family.hf_layout) return &family;
  if (family.hf_alt_layout && layout == family.hf_alt_layout().hf_layout) return &family.hf_alt_layout();
  return nullptr;
}

std::string SupportedArchNames(bool gguf) {
  std::string out;
  for (const ArchSpec* a : AllArchs()) {
    const std::string n = gguf ? a->gguf_arch : a->hf_names.front();
    if (out.find(n) != std::string::npos) continue;  // families sharing a GGUF architecture
    out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

const char* ArchName(Arch a) { return GetArch(a).name; }

bool ArchFromName(const std::string& name, Arch* out) {
  const ArchSpec* a = FindArchByAnyName(name);
  if (a) *out = a->arch;
  return a != nullptr;
}

std::vector<bool> SwaLayerPattern(int layers, int period) {
  std::vector<bool> out(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) out[static_cast<size_t>(l)] = period == 0 || l % period < period - 1;
  return out;
}

StatusOr<bool> ReadHfLayerTypes(const HfConfigReader& j, ModelConfig* c) {
  const nlohmann::json& js = j.json();
  if (!js.contains("layer_types") || !js["layer_types"].is_array()) return false;
  const nlohmann::json& types = js["layer_types"];
  if (static_cast<int>(types.size()) != c->n_layers)
    return j.Invalid("layer_types has " + std::to_string(types.size()) + " entries for " + std::to_string(c->n_layers) + " layers");
  c->swa_layers.clear();
  for (const auto& t : types) {
    if (t != "sliding_attention" && t != "full_attention") return j.Invalid("layer_types entries must be sliding_attention or full_attention");
    c->swa_layers.push_back(t == "sliding_attention");
  }
  return true;
}

void WriteGgufExpertCounts(const std::string& prefix, int experts, int used, int expert_ffn, GgufWriter& w) {
  w.SetU32(prefix + "expert_count", experts);
  w.SetU32(prefix + "expert_used_count", used);
  w.SetU32(prefix + "expert_feed_forward_length", expert_ffn);
}

// ------------------------------------------------------------------------------------------- config readers

StatusOr<int64_t> HfConfigReader::Int(const char* k, int64_t def) const {
  if (!j_.contains(k) || j_[k].is_null()) {
    if (def < 0) return NotFound(path_ + ": missing '" + k + "'");
    return def;
  }
  if (!j_[k].is_number_integer()) return InvalidArgument(path_ + ": '" + k + "' must be an integer");
  return j_[k].get<int64_t>();
}

StatusOr<double> HfConfigReader::Number(const char* k, double def) const {
  if (!j_.contains(k) || j_[k].is_null()) return def;
  if (!j_[k].is_number()) return InvalidArgument(path_ + ": '" + k + "' must be a number");
  return j_[k].get<double>();
}

int64_t HfConfigReader::IntOr(const char* k, int64_t def) const {
  return j_.contains(k) && j_[k].is_number_integer() ? j_[k].get<int64_t>() : def;
}

bool HfConfigReader::BoolOr(const char* k, bool def) const {
  return j_.contains(k) && j_[k].is_boolean() ? j_[k].get<bool>() : def;
}

std::string HfConfigReader::StringOr(const char* k, const std::string& def) const {
  return j_.contains(k) && j_[k].is_string() ? j_[k].get<std::string>() : def;
}

std::vector<int> HfConfigReader::IntList(const char* k) const {
  std::vector<int> out;
  if (j_.contains(k) && j_[k].is_array())
    for (const auto& v : j_[k])
      if (v.is_number_integer()) out.push_back(v.get<int>());
  return out;
}

StatusOr<int64_t> GgufConfigReader::Int(const char* k, int64_t def, bool required) const {
  auto v = g_.GetInt(arch_ + "." + k);
  if (v.ok()) return v;
  if (v.status().code() != StatusCode::kNotFound || required) return v.status();
  return def;
}

bool GgufConfigReader::Has(const char* k) const { return g_.Find(arch_ + "." + k) != nullptr; }
StatusOr<double> GgufConfigReader::Float(const char* k) const { return g_.GetFloat(arch_ + "." + k); }
StatusOr<std::string> GgufConfigReader::String(const char* k) const { return g_.GetString(arch_ + "." + k); }
StatusOr<std::vector<double>> GgufConfigReader::Numbers(const char* k) const {
  const GgufValue* v = g_.Find(arch_ + "." + k);
  if (!v) return NotFound(path_ + ": missing metadata '" + arch_ + "." + k + "'");
  if (v->is_array()) {
    if (v->array_type == GgufType::kString || v->array_type == GgufType::kArray) return Invalid(std::string(k) + " must hold numbers");
    return v->numbers;
  }
  DI_ASSIGN_OR_RETURN(double x, g_.GetFloat(arch_ + "." + k));
  return std::vector<double>{x};
}

bool GgufConfigReader::Bool(const char* k, bool def) const {
  const GgufValue* v = g_.Find(arch_ + "." + k);
  if (!v || v->is_array()) return def;
  if (auto* b = std::get_if<bool>(&v->scalar)) return *b;
  if (auto* i = std::get_if<int64_t>(&v->scalar)) return *i != 0;
  return def;
}

StatusOr<bool> GgufConfigReader::Yarn(YarnParams* y) const {
  auto t = String("rope.scaling.type");
  if (!t.ok() || *t != "yarn") return false;
  auto f = Float("rope.scaling.factor");
  DI_ASSIGN_OR_RETURN(int64_t oc, Int("rope.scaling.original_context_length", 0, true));
  if (!f.ok() || !(*f >= 1 && *f < 1e6) || oc <= 0) return Invalid("rope.scaling yarn needs factor >= 1 and original_context_length");
  y->factor = *f;
  y->original_ctx = static_cast<double>(oc);
  return true;
}

}  // namespace deepinfer
