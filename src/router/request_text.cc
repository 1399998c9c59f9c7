#include "router/request_text.h"

#include <nlohmann/json.hpp>

namespace deepinfer::router {

namespace {

// A message's content: a string, or a list of parts whose "text" fields count (images and the like do not).
void AppendContent(const nlohmann::json& content, std::string* out) {
  if (content.is_string()) {
    *out += content.get_ref<const std::string&>();
  } else if (content.is_array()) {
    for (const auto& part : content)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) *out += part["text"].get_ref<const std::string&>();
  }
}

}  // namespace

std::string PromptText(const nlohmann::json& body) {
  std::string out;
  if (!body.is_object()) return out;
  if (auto it = body.find("messages"); it != body.end() && it->is_array()) {
    // The rendered chat template would add the same framing to every replica's prompt; role + text is enough
    // for prefix matching and keeps the router free of templates.
    for (const auto& m : *it) {
      if (!m.is_object()) continue;
      if (m.contains("role") && m["role"].is_string()) out += m["role"].get_ref<const std::string&>();
      out += ": ";
      if (m.contains("content")) AppendContent(m["content"], &out);
      out += "\n";
    }
    return out;
  }
  if (auto it = body.find("prompt"); it != body.end()) {
    if (it->is_string()) return it->get<std::string>();
    if (it->is_array()) {
      for (const auto& p : *it) out += p.is_string() ? p.get<std::string>() : p.dump();
      return out;
    }
    return out;
  }
  if (auto it = body.find("instructions"); it != body.end() && it->is_string()) out += it->get<std::string>() + "\n";
  if (auto it = body.find("input"); it != body.end()) {
    if (it->is_string()) {
      out += it->get<std::string>();
    } else if (it->is_array()) {
      for (const auto& item : *it) {
        if (!item.is_object()) continue;
        if (item.contains("role") && item["role"].is_string()) out += item["role"].get_ref<const std::string&>() + ": ";
        if (item.contains("content")) AppendContent(item["content"], &out);
        out += "\n";
      }
    }
  }
  return out;
}

}  // namespace deepinfer::router
