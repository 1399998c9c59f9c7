#include "server/tool_grammar.h"

#include <map>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace deepinfer {
namespace {

using nlohmann::json;

// One call's text around its name and arguments, and what separates calls, per format (as each template writes
// an assistant turn's calls, and as tool_parse.cc reads them back).
struct CallSyntax {
  std::string before, open, name_to_args, close, between, after;
};

CallSyntax Syntax(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:  // <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
      return {"", "<tool_call>\n{\"name\": ", ", \"arguments\": ", "}\n</tool_call>", "\n", ""};
    case ToolFormat::kDeepSeekV3:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n",
              "\n```<｜tool▁call▁end｜>", "\n", "<｜tool▁calls▁end｜>"};
    case ToolFormat::kLlama3Json:  // {"name": "f", "parameters": {...}}; several joined by "; "
      return {"", "{\"name\": ", ", \"parameters\": ", "}", "; ", ""};
    case ToolFormat::kNone:
    case ToolFormat::kHarmony: break;  // refused in ToolCallGbnf
  }
  return {};
}

// Each allowed tool's argument rules (tI and its tI-... rules, into `rules`) and name, in `tools` order.
StatusOr<std::vector<std::pair<std::string, std::string>>> ToolArgRules(const json& tools, const std::string& only,
                                                                        grammar::JsonWhitespace ws,
                                                                        std::map<std::string, std::string>* rules) {
  if (!tools.is_array() || tools.empty()) return InvalidArgument("'tool_choice' needs a non-empty 'tools' list");
  std::vector<std::pair<std::string, std::string>> out;  // (name, argument rule)
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string field = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
        !t["function"]["name"].is_string())
      return InvalidArgument("'" + field + "' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    const json& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    // No parameters: the function takes none, so its arguments are {} (OpenAI's reading of an omitted schema).
    json schema = json{{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
    if (auto p = fn.find("parameters"); p != fn.end() && !p->is_null()) schema = *p;
    if (!schema.is_object()) return InvalidArgument("'" + field + ".function.parameters' must be a JSON Schema object");
    // Tool i's rules are tI-...; its arguments tI and its call cI, which no generated name can equal.
    const std::string id = std::to_string(i), prefix = "t" + id + "-";
    auto r = grammar::JsonSchemaRules(schema, prefix, "t" + id, ws);
    if (!r.ok()) return InvalidArgument("'" + field + ".function.parameters': " + r.status().message());
    for (auto& [k, v] : *r) (*rules)[k] = std::move(v);  // shared primitives have equal bodies
    out.push_back({name, "t" + id});
  }
  if (out.empty()) return InvalidArgument("'tool_choice' names function '" + only + "', which is not in 'tools'");
  return out;
}

}  // namespace

StatusOr<std::string> ToolCallGbnf(const json& tools, ToolFormat format, const std::string& only, bool parallel,
                                   grammar::JsonWhitespace ws) {
  if (format == ToolFormat::kNone)
    return InvalidArgument("'tools': this model's chat template has no tool-call format deepinfer can parse");
  // Harmony calls come after analysis messages the model writes freely: HarmonyToolCallGbnf's gated grammar.
  if (format == ToolFormat::kHarmony) return InvalidArgument("'tool_choice': Harmony calls need HarmonyToolCallGbnf");
  const CallSyntax s = Syntax(format);
  std::map<std::string, std::string> rules;
  DI_ASSIGN_OR_RETURN(const auto args, ToolArgRules(tools, only, ws, &rules));
  std::string alts;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& [name, arg] = args[i];
    const std::string c = "c" + arg.substr(1);
    // DeepSeek-V3 writes the name bare; the JSON formats as a JSON string.
    rules[c] = grammar::GbnfLiteral(s.open + (format == ToolFormat::kDeepSeekV3 ? name : json(name).dump()) +
                                    s.name_to_args) + " " + arg + " " + grammar::GbnfLiteral(s.close);
    alts += (alts.empty() ? "" : " | ") + c;
  }
  std::string root = (s.before.empty() ? "" : grammar::GbnfLiteral(s.before) + " ") + "call";
  if (parallel) root += " ( " + grammar::GbnfLiteral(s.between) + " call )*";
  if (!s.after.empty()) root += " " + grammar::GbnfLiteral(s.after);
  std::string out = "root ::= " + root + "\ncall ::= " + alts + "\n";
  for (const auto& [k, v] : rules) out += k + " ::= " + v + "\n";
  return out;
}

namespace {

// The markers a Harmony header holds, with their text (the header strings below write them so).
void HarmonyGateMarkers(const HarmonyTokens& t, GrammarGate* gate) {
  gate->header_begin = {t.start};
  gate->markers = {{t.channel, "<|channel|>"}, {t.message, "<|message|>"}};
  if (t.constrain >= 0) gate->markers.push_back({t.constrain, "<|constrain|>"});
}

}  // namespace

StatusOr<std::string> HarmonyToolCallGbnf(const json& tools, const std::string& only, grammar::JsonWhitespace ws,
                                          const HarmonyTokens& t, GrammarGate* gate) {
  std::map<std::string, std::string> rules;
  DI_ASSIGN_OR_RETURN(const auto args, ToolArgRules(tools, only, ws, &rules));
  HarmonyGateMarkers(t, gate);
  gate->feed_header = true;  // the header names the function, so the grammar reads it to pick the arguments' rule
  gate->open_headers.clear();
  // Reasoning and preambles (user-visible commentary) may come first, as OpenAI's harmony format allows.
  gate->free_headers = {"assistant<|channel|>analysis<|message|>", "assistant<|channel|>commentary<|message|>"};
  std::string alts;
  for (const auto& [name, arg] : args) {
    // The recipient in the channel header with <|constrain|>json, as the model writes a call (harmony docs), or
    // in the role, as gpt-oss's template renders earlier calls; HarmonyParser reads both.
    const std::string with = t.constrain >= 0 ? " <|constrain|>json" : " json";
    for (const std::string& h : {"assistant<|channel|>commentary to=functions." + name + with + "<|message|>",
                                 "assistant to=functions." + name + "<|channel|>commentary json<|message|>"}) {
      gate->open_headers.push_back(h);
      alts += (alts.empty() ? "" : " | ") + grammar::GbnfLiteral(h) + " " + arg;
    }
  }
  std::string out = "root ::= " + alts + "\n";
  for (const auto& [k, v] : rules) out += k + " ::= " + v + "\n";
  return out;
}

void HarmonyFinalGate(const HarmonyTokens& t, GrammarGate* gate) {
  HarmonyGateMarkers(t, gate);
  gate->feed_header = false;  // the grammar is the answer's alone
  gate->open_headers = {"assistant<|channel|>final<|message|>"};
  if (t.constrain >= 0) gate->open_headers.push_back("assistant<|channel|>final <|constrain|>json<|message|>");
  gate->free_headers = {"assistant<|channel|>analysis<|message|>"};
}

}  // namespace deepinfer
