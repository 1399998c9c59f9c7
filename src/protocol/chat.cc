#include "protocol/chat.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "format/gguf.h"
#include "protocol/tool_parse.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Used when a model ships no template (llama.cpp falls back to ChatML as well).
constexpr const char* kChatMl =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// Messages -> the list templates expect: content flattened to a string (text parts joined). Ordered JSON keeps
// the client's key order, which templates show when they dump tools or tool-call arguments with tojson.
// arguments_as_objects: tool-call arguments sent as JSON text (OpenAI's shape) are parsed into objects, for
// templates that dump them with tojson or iterate them (Llama-3.1: `arguments | tojson`); others (DeepSeek-V3's
// string concatenation) need the text.
// keep_null: whether null content stays null in a tool-calling assistant turn (templates that test it).
// developer_as_system: the template has no `developer` role of its own, so OpenAI's developer messages are read
// as system messages (as OpenAI does for models without the role, llama.cpp and vLLM too); the system messages
// are then merged into one first message, since most templates allow a system turn only at the start.
StatusOr<ordered_json> NormalizeMessages(const ordered_json& msgs, bool arguments_as_objects, bool keep_null,
                                         bool developer_as_system) {
  using json = ordered_json;
  if (!msgs.is_array() || msgs.empty()) return InvalidArgument("'messages' must be a non-empty list");
  json out = json::array();
  bool mapped_developer = false;
  for (const auto& m : msgs) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return InvalidArgument("each message must be an object with a string 'role'");
    json n = m;
    const json c = m.value("content", json(nullptr));
    if (c.is_array()) {
      std::string text;
      for (const auto& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          return InvalidArgument("only text content parts are supported");
        text += part["text"].get<std::string>();
      }
      n["content"] = text;
    } else if (c.is_null()) {
      // An assistant turn that only calls tools keeps content null where the template tests for it (DeepSeek-V3
      // renders the calls only under `content is none`). Elsewhere templates concatenate or search content
      // (Qwen3: `'</think>' in message.content`, then `+ content`), so null becomes "".
      const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
      n["content"] = calls && keep_null ? json(nullptr) : json("");
    } else if (!c.is_string()) {
      return InvalidArgument("message 'content' must be a string or a list of text parts");
    }
    if (arguments_as_objects && n.contains("tool_calls") && n["tool_calls"].is_array())
      for (auto& call : n["tool_calls"])
        if (call.is_object() && call.contains("function") && call["function"].is_object())
          if (auto a = call["function"].find("arguments"); a != call["function"].end() && a->is_string()) {
            json parsed = json::parse(a->get<std::string>(), nullptr, false);
            if (!parsed.is_discarded()) *a = std::move(parsed);
          }
    if (developer_as_system && n["role"] == "developer") {
      n["role"] = "system";
      mapped_developer = true;
    }
    out.push_back(std::move(n));
  }
  if (!mapped_developer) return out;
  json merged = json::array();
  std::string system;
  for (auto& m : out) {
    if (m["role"] != "system") {
      merged.push_back(std::move(m));
      continue;
    }
    if (!m["content"].is_string()) return InvalidArgument("a system or developer message must have text content");
    system += (system.empty() ? "" : "\n\n") + m["content"].get<std::string>();
  }
  merged.insert(merged.begin(), json{{"role", "system"}, {"content", system}});
  return merged;
}

// gpt-oss's template reads an assistant turn's reasoning from `thinking`; OpenAI clients send it back as
// reasoning_content. With tool calls the template takes the analysis text from content or thinking but refuses
// both, so content goes (llama.cpp's common_chat_params_init_gpt_oss does the same).
void HarmonyMessages(ordered_json* msgs) {
  for (auto& m : *msgs) {
    if (m.value("role", "") != "assistant") continue;
    auto r = m.find("reasoning_content");
    if (r == m.end() || !r->is_string()) continue;
    m["thinking"] = *r;
    if (auto c = m.find("tool_calls"); c != m.end() && c->is_array() && !c->empty()) m.erase("content");
  }
}

}  // namespace

std::string ModelChatTemplate(const Model& model) {
  namespace fs = std::filesystem;
  if (model.format == "gguf") {
    auto g = GgufFile::Open(model.source);
    if (g.ok()) {
      auto t = (*g)->GetString("tokenizer.chat_template");
      if (t.ok()) return *t;
    }
    return "";
  }
  std::ifstream in(fs::path(model.source) / "tokenizer_config.json");
  if (!in) return "";
  json cfg = json::parse(in, nullptr, false);
  if (cfg.is_discarded() || !cfg.contains("chat_template")) return "";
  const json& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())  // named templates: use "default"
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

ChatFormatter::ChatFormatter(const Model& model, const std::string& template_source) : tok_(*model.tokenizer) {
  std::string src = template_source.empty() ? ModelChatTemplate(model) : template_source;
  if (src.empty()) {
    DI_LOG_WARN("the model has no chat template: chat messages use ChatML");
    src = kChatMl;
    fallback_ = true;
  }
  auto t = jinja::Template::Parse(src);
  if (!t.ok()) {
    DI_LOG_WARN("the chat template does not parse (%s): using ChatML", t.status().ToString().c_str());
    t = jinja::Template::Parse(kChatMl);
    fallback_ = true;
  }
  tmpl_ = std::move(*t);
  source_ = fallback_ ? std::string(kChatMl) : src;
  for (const char* test : {"['content'] is none", "message.content is none", "['content'] is not none",
                           "message.content is not none", "[\"content\"] is none", "[\"content\"] is not none"})
    template_tests_null_content_ = template_tests_null_content_ || source_.find(test) != std::string::npos;
  template_has_developer_ = source_.find("'developer'") != std::string::npos || source_.find("\"developer\"") != std::string::npos;
}

StatusOr<std::string> ChatFormatter::Render(const json& messages, bool add_generation_prompt) const {
  ordered_json request = {{"messages", ordered_json::parse(messages.dump())}};
  return RenderRequest(request, add_generation_prompt);
}

StatusOr<std::string> ChatFormatter::RenderRequest(const ordered_json& request, bool add_generation_prompt) const {
  if (!request.is_object()) return InvalidArgument("the request body must be a JSON object");
  auto m = request.find("messages");
  const ToolFormat format = DetectToolFormat(source_);
  // Harmony's template dumps arguments with tojson too (as an object, else it is double-encoded); DeepSeek's DSML
  // templates iterate them (`args.items()`, after a `from_json` of text that our Jinja and @huggingface/jinja lack).
  DI_ASSIGN_OR_RETURN(ordered_json msgs, NormalizeMessages(m == request.end() ? ordered_json() : *m,
                                                           format == ToolFormat::kLlama3Json || format == ToolFormat::kHarmony ||
                                                               format == ToolFormat::kDeepSeekDsml,
                                                           template_tests_null_content_, !template_has_developer_));
  if (format == ToolFormat::kHarmony) HarmonyMessages(&msgs);
  // continue_final_message (vLLM's field): the last assistant message is an unfinished answer the model goes on
  // with, so its turn is left open. It implies add_generation_prompt false; asking for both is an error, as in vLLM.
  bool continue_final = false;
  if (auto c = request.find("continue_final_message"); c != request.end() && !c->is_null()) {
    if (!c->is_boolean()) return InvalidArgument("'continue_final_message' must be true or false");
    continue_final = c->get<bool>();
  }
  std::string final_content;
  if (continue_final) {
    if (auto g = request.find("add_generation_prompt"); g != request.end() && g->is_boolean() && g->get<bool>())
      return InvalidArgument("'continue_final_message' and 'add_generation_prompt' cannot both be true");
    add_generation_prompt = false;
    const ordered_json& last = msgs.back();
    if (last["role"] != "assistant")
      return InvalidArgument("'continue_final_message' needs the last message to be an assistant message");
    if (!last["content"].is_string() || last["content"].get<std::string>().empty())
      return InvalidArgument("'continue_final_message': the last assistant message has no text to continue");
    final_content = last["content"].get<std::string>();
  }
  ordered_json ctx = ordered_json::object();
  // chat_template_kwargs first (Qwen3's enable_thinking and the like), so they cannot replace what follows.
  if (auto k = request.find("chat_template_kwargs"); k != request.end() && !k->is_null()) {
    if (!k->is_object()) return InvalidArgument("'chat_template_kwargs' must be an object");
    ctx = *k;
  }
  // The OpenAI `reasoning_effort` field reaches the template as its kwarg (gpt-oss writes "Reasoning: <effort>"
  // into the system message), over chat_template_kwargs, as llama.cpp's server does; "none" asks for no
  // reasoning: the template's default effort stays and the templates' thinking switches turn off.
  if (auto e = request.find("reasoning_effort"); e != request.end() && !e->is_null()) {
    if (!e->is_string()) return InvalidArgument("'reasoning_effort' must be a string");
    if (*e == "none") {
      ctx.erase("reasoning_effort");
      ctx["enable_thinking"] = false;
    } else if (!e->get<std::string>().empty()) {
      ctx["reasoning_effort"] = *e;
    }
  }
  if (auto t = request.find("tools"); t != request.end() && !t->is_null()) {
    if (!t->is_array()) return InvalidArgument("'tools' must be a list");
    for (const auto& tool : *t)
      if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object() ||
          !tool["function"].contains("name") || !tool["function"]["name"].is_string())
        return InvalidArgument("each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    if (!t->empty()) ctx["tools"] = *t;
  }
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = tok_.bos_id() >= 0 ? tok_.piece(tok_.bos_id()) : "";
  ctx["eos_token"] = tok_.eos_id() >= 0 ? tok_.piece(tok_.eos_id()) : "";
  auto text = tmpl_->Render(ctx.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
  if (!text.ok()) return InvalidArgument("chat template: " + text.status().message());
  if (format == ToolFormat::kHarmony && !add_generation_prompt && !continue_final) {
    // gpt-oss's template ends a conversation's last final answer with <|return|> (a finished training sample);
    // a prompt goes on from there, so it gets <|end|> as every earlier message (llama.cpp, issue 15417).
    if (const size_t at = text->rfind("<|return|>"); at != std::string::npos) text->replace(at, 10, "<|end|>");
  }
  if (continue_final) {
    // The rendering ends with the final message's text and then its end-of-turn markers: cut after the text (as
    // transformers' continue_final_message does, trying the text stripped of surrounding whitespace second,
    // since templates often trim it).
    size_t at = text->rfind(final_content), len = final_content.size();
    if (at == std::string::npos) {
      const size_t b = final_content.find_first_not_of(" \t\r\n"), e = final_content.find_last_not_of(" \t\r\n");
      const std::string stripped = b == std::string::npos ? "" : final_content.substr(b, e - b + 1);
      at = stripped.empty() ? std::string::npos : text->rfind(stripped);
      len = stripped.size();
    }
    if (at == std::string::npos)
      return InvalidArgument("'continue_final_message': the chat template does not write the last assistant message's "
                             "text as given, so it cannot be continued");
    text->resize(at + len);
  }
  return text;
}

StatusOr<std::vector<int32_t>> ChatFormatter::Tokenize(const std::string& text) const {
  const bool bos = tok_.add_bos() && tok_.bos_id() >= 0 && text.rfind(tok_.piece(tok_.bos_id()), 0) != 0;
  std::vector<int32_t> ids = tok_.EncodeWithSpecials(text, bos);  // the template's markers are control tokens
  if (ids.empty()) return InvalidArgument("the rendered chat prompt is empty");
  return ids;
}

StatusOr<std::vector<int32_t>> ChatFormatter::EncodeRequest(const ordered_json& request, bool add_generation_prompt) const {
  DI_ASSIGN_OR_RETURN(std::string text, RenderRequest(request, add_generation_prompt));
  return Tokenize(text);
}

StatusOr<std::vector<int32_t>> ChatFormatter::Encode(const json& messages, bool add_generation_prompt) const {
  DI_ASSIGN_OR_RETURN(std::string text, Render(messages, add_generation_prompt));
  return Tokenize(text);
}

}  // namespace deepinfer
