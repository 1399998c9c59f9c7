#include "tokenizer/gguf_vocab_export.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// GGUF token types (llama.cpp's llama_token_type).
enum : int32_t { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

StatusOr<json> ReadJson(const fs::path& p, bool required) {
  std::ifstream in(p);
  if (!in) {
    if (required) return NotFound(p.string() + ": cannot open");
    return json();
  }
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return DataLoss(p.string() + ": not valid JSON");
  return j;
}

// Added tokens some models leave unmarked although they are control tokens (llama.cpp's list).
bool LooksSpecial(const std::string& t) {
  auto wraps = [&](const std::string& a, const std::string& b) {
    return t.size() >= a.size() + b.size() && t.compare(0, a.size(), a) == 0 && t.compare(t.size() - b.size(), b.size(), b) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wraps("<unused", ">");
}

// tokenizer_config's "bos_token" etc.: a string or {"content": ...}.
std::string SpecialContent(const json& cfg, const std::string& key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& e = cfg[key];
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].get<std::string>();
  return "";
}

// Split regexes of the pre-tokenizer and whether a ByteLevel step applies its own regex; false if not byte-level.
Status CollectPreTokenizer(const json& pre, std::vector<std::string>* regexes, bool* byte_level, bool* byte_regex) {
  if (pre.is_null()) return Status::Ok();
  const std::string type = pre.value("type", "");
  if (type == "Sequence") {
    for (const json& p : pre.value("pretokenizers", json::array())) DI_RETURN_IF_ERROR(CollectPreTokenizer(p, regexes, byte_level, byte_regex));
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    *byte_level = true;
    *byte_regex = pre.value("use_regex", true);
    return Status::Ok();
  }
  if (type == "Split" && pre.contains("pattern") && pre["pattern"].contains("Regex") && pre["pattern"]["Regex"].is_string() &&
      pre.value("behavior", "") == "Isolated" && !pre.value("invert", false)) {
    regexes->push_back(pre["pattern"]["Regex"].get<std::string>());
    return Status::Ok();
  }
  if (type == "Digits" || type == "Split")
    return Unimplemented("pre-tokenizer step '" + pre.dump().substr(0, 120) + "' has no GGUF equivalent here");
  return Unimplemented("pre-tokenizer '" + type + "' has no GGUF equivalent here");
}

}  // namespace

Status ExportHfTokenizerToGguf(const std::string& dir, int vocab_size, GgufWriter& gw) {
  const fs::path d(dir);
  DI_ASSIGN_OR_RETURN(json tok, ReadJson(d / "tokenizer.json", true));
  DI_ASSIGN_OR_RETURN(json cfg, ReadJson(d / "tokenizer_config.json", false));
  DI_ASSIGN_OR_RETURN(json model_cfg, ReadJson(d / "config.json", false));
  const std::string where = (d / "tokenizer.json").string();
  if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object())
    return InvalidArgument(where + ": no \"model\" object");
  const json& m = tok["model"];
  if (m.value("type", "") != "BPE" || !m.contains("vocab") || !m["vocab"].is_object())
    return Unimplemented(where + ": only BPE tokenizers can be exported to GGUF (model type '" + m.value("type", "") + "')");

  std::vector<std::string> regexes;
  bool byte_level = false, byte_regex = false;
  if (Status s = CollectPreTokenizer(tok.value("pre_tokenizer", json()), &regexes, &byte_level, &byte_regex); !s.ok())
    return Status(s.code(), where + ": " + s.message());
  if (!byte_level)
    return Unimplemented(where + ": only byte-level BPE (GPT-2 style) tokenizers can be exported to GGUF yet; "
                         "SentencePiece-style vocabularies are not supported");
  auto pre = GgufPreForHfPreTokenizer(regexes, byte_regex);
  if (!pre.ok()) return Status(pre.status().code(), where + ": " + pre.status().message());

  // Ids -> text: the BPE vocabulary, then added tokens (which may extend it or re-declare ids).
  int max_id = -1;
  std::map<int, std::string> text;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) return InvalidArgument(where + ": vocab id of '" + it.key() + "' is not an integer");
    const int id = it.value().get<int>();
    if (id < 0 || id >= (1 << 24)) return InvalidArgument(where + ": vocab id out of range");
    text[id] = it.key();
    max_id = std::max(max_id, id);
  }
  struct Added { std::string content; bool special; };
  std::map<int, Added> added;
  for (const json& a : tok.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      return InvalidArgument(where + ": malformed added_tokens entry");
    const int id = a["id"].get<int>();
    if (id < 0 || id >= (1 << 24)) return InvalidArgument(where + ": added token id out of range");
    added[id] = {a["content"].get<std::string>(), a.value("special", false)};
    text[id] = added[id].content;
    max_id = std::max(max_id, id);
  }
  if (max_id >= vocab_size)
    return InvalidArgument(where + ": token id " + std::to_string(max_id) + " does not fit the model's " +
                           std::to_string(vocab_size) + " embedding rows");
  std::vector<std::string> tokens(vocab_size);
  std::vector<int32_t> types(vocab_size, kNormal);
  for (int i = 0; i < vocab_size; ++i) {
    auto t = text.find(i);
    if (t == text.end()) {
      tokens[i] = "[PAD" + std::to_string(i) + "]";
      types[i] = kUnused;
      continue;
    }
    tokens[i] = t->second;
    if (auto a = added.find(i); a != added.end()) types[i] = a->second.special || LooksSpecial(t->second) ? kControl : kUserDefined;
  }
  std::vector<std::string> merges;
  for (const json& mg : m.value("merges", json::array())) {
    if (mg.is_string()) merges.push_back(mg.get<std::string>());
    else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string())
      merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
    else return InvalidArgument(where + ": malformed merge entry");
  }

  // Special tokens: tokenizer_config names them by content; config.json by id as a fallback.
  auto id_of = [&](const std::string& content) -> int {
    if (content.empty()) return -1;
    for (const auto& [id, a] : added)
      if (a.content == content) return id;
    return -1;
  };
  std::map<std::string, int> special;
  for (const char* typ : {"bos", "eos", "unk", "pad"}) {
    int id = id_of(SpecialContent(cfg, std::string(typ) + "_token"));
    const std::string key = std::string(typ) + "_token_id";
    if (id < 0 && model_cfg.is_object() && model_cfg.contains(key)) {
      const json& v = model_cfg[key];
      if (v.is_number_integer()) id = v.get<int>();
      else if (v.is_array() && !v.empty() && v[0].is_number_integer()) id = v[0].get<int>();
    }
    if (id >= 0 && id < vocab_size) special[typ] = id;
  }
  // add_bos / add_eos: the post-processor template first, then tokenizer_config's explicit flags.
  // Written only when the tokenizer says so (llama.cpp's converter leaves the keys out otherwise, and llama.cpp
  // then applies its per-vocabulary default).
  std::optional<bool> add_bos, add_eos;
  const json& post = tok.value("post_processor", json());
  if (post.is_object()) {
    json procs = post.contains("processors") ? post["processors"] : json::array({post});
    for (const json& p : procs) {
      if (p.value("type", "") != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array()) continue;
      const json& single = p["single"];
      if (single.size() < 2) continue;
      auto special_id = [&](const json& e) { return e.contains("SpecialToken") ? e["SpecialToken"].value("id", "") : ""; };
      const std::string first = special_id(single.front()), last = special_id(single.back());
      if (!first.empty() && special.count("bos") && tokens[special["bos"]] == first) add_bos = true;
      if (!last.empty() && special.count("eos") && tokens[special["eos"]] == last) add_eos = true;
    }
  }
  if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) add_bos = cfg["add_bos_token"].get<bool>();
  if (cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) add_eos = cfg["add_eos_token"].get<bool>();

  std::string chat_template;
  if (cfg.is_object() && cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    chat_template = cfg["chat_template"].get<std::string>();
  } else if (std::ifstream jt(d / "chat_template.jinja"); jt) {
    std::stringstream ss;
    ss << jt.rdbuf();
    chat_template = ss.str();
  }

  gw.SetString("tokenizer.ggml.model", "gpt2");
  gw.SetString("tokenizer.ggml.pre", *pre);
  gw.SetStringArray("tokenizer.ggml.tokens", tokens);
  gw.SetI32Array("tokenizer.ggml.token_type", types);
  gw.SetStringArray("tokenizer.ggml.merges", merges);
  static const std::map<std::string, std::string> kKey = {{"bos", "bos_token_id"}, {"eos", "eos_token_id"},
                                                          {"unk", "unknown_token_id"}, {"pad", "padding_token_id"}};
  for (const auto& [typ, id] : special) gw.SetU32("tokenizer.ggml." + kKey.at(typ), id);
  if (add_bos) gw.SetBool("tokenizer.ggml.add_bos_token", *add_bos);
  if (add_eos) gw.SetBool("tokenizer.ggml.add_eos_token", *add_eos);
  if (!chat_template.empty()) gw.SetString("tokenizer.chat_template", chat_template);
  return Status::Ok();
}

}  // namespace deepinfer
