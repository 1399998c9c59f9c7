#include "server/tool_grammar.h"

#include <algorithm>
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
    case ToolFormat::kDeepSeekDsml:  // DsmlToolCallGbnf: parameters are elements, not a JSON object
    case ToolFormat::kHarmony: break;  // refused in ToolCallGbnf
  }
  return {};
}

struct AllowedTool {
  size_t index;  // in `tools`
  std::string name;
  json schema;   // its `parameters`
};

// The tools a call may name (`only`, or all), validated, in `tools` order.
StatusOr<std::vector<AllowedTool>> AllowedTools(const json& tools, const std::string& only) {
  if (!tools.is_array() || tools.empty()) return InvalidArgument("'tool_choice' needs a non-empty 'tools' list");
  std::vector<AllowedTool> out;
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
    out.push_back({i, name, std::move(schema)});
  }
  if (out.empty()) return InvalidArgument("'tool_choice' names function '" + only + "', which is not in 'tools'");
  return out;
}

// Each allowed tool's argument rules (tI and its tI-... rules, into `rules`) and name, in `tools` order.
StatusOr<std::vector<std::pair<std::string, std::string>>> ToolArgRules(const json& tools, const std::string& only,
                                                                        grammar::JsonWhitespace ws,
                                                                        std::map<std::string, std::string>* rules) {
  DI_ASSIGN_OR_RETURN(const auto allowed, AllowedTools(tools, only));
  std::vector<std::pair<std::string, std::string>> out;  // (name, argument rule)
  for (const AllowedTool& t : allowed) {
    // Tool i's rules are tI-...; its arguments tI and its call cI, which no generated name can equal.
    const std::string id = std::to_string(t.index), prefix = "t" + id + "-";
    auto r = grammar::JsonSchemaRules(t.schema, prefix, "t" + id, ws);
    if (!r.ok()) return InvalidArgument("'tools[" + id + "].function.parameters': " + r.status().message());
    for (auto& [k, v] : *r) (*rules)[k] = std::move(v);  // shared primitives have equal bodies
    out.push_back({t.name, "t" + id});
  }
  return out;
}

// DeepSeek-V3.2 / V4 DSML calls (tool_stream.h). The arguments are not one JSON value but parameter elements, so
// each property of the function's (object) schema gets its own element rule, the string attribute implied by its
// type as the template teaches ("true" for string values, written raw; "false" for the rest, as JSON compiled
// from the property's schema). What the grammar cannot express exactly is refused or narrowed, never loosened:
//   - properties come in the schema's key order (nlohmann::json's, i.e. sorted), each at most once; the required
//     ones must all appear; additional properties are never written;
//   - a raw string cannot hold U+FF5C (｜), so it cannot hold the closing tag `</｜DSML｜parameter>`; raw values
//     honor enum / const / minLength / maxLength; a string property with any other constraint (pattern, format,
//     ...) is written string="false" as a JSON string its schema constrains (the parser reads that as the same
//     argument);
//   - a JSON value could in principle spell `</｜DSML｜parameter>` inside a string and cut itself short (the JSON
//     Schema compiler's strings do not exclude it);
//   - a top-level schema that is not a plain object with `properties` (anyOf, $ref, ...) is refused.
// Both block names are allowed (V4's tool_calls, V3.2's function_calls): the format does not say which template.
const std::string kDsml = "｜DSML｜";

// A string property written raw (string="true"): its value rule, or "" when it must go as JSON.
std::string RawStringRule(const json& prop) {
  auto all_strings = [](const json& v) {
    return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); });
  };
  if (auto c = prop.find("const"); c != prop.end()) return c->is_string() ? grammar::GbnfLiteral(c->get<std::string>()) : "";
  if (auto e = prop.find("enum"); e != prop.end()) {
    if (!all_strings(*e)) return "";
    std::string alts;
    for (const json& v : *e) alts += (alts.empty() ? "" : " | ") + grammar::GbnfLiteral(v.get<std::string>());
    return "( " + alts + " )";
  }
  if (prop.value("type", json()) != "string") return "";
  for (const auto& [k, v] : prop.items()) {
    if (k == "minLength" || k == "maxLength") {
      if (!v.is_number_unsigned()) return "";
    } else if (k != "type" && k != "description" && k != "title" && k != "default" && k != "examples") {
      return "";
    }
  }
  const uint64_t lo = prop.value("minLength", uint64_t{0});
  if (lo > 4096 || prop.value("maxLength", uint64_t{0}) > 4096) return "";  // GBNF's repetition limit
  if (!prop.contains("maxLength")) return lo > 0 ? "dsml-char{" + std::to_string(lo) + ",}" : "dsml-char*";
  const uint64_t hi = prop["maxLength"].get<uint64_t>();
  if (hi < lo) return "";  // unsatisfiable: the JSON compiler's verdict
  return "dsml-char{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

StatusOr<std::string> DsmlToolCallGbnf(const json& tools, const std::string& only, bool parallel,
                                       grammar::JsonWhitespace ws) {
  DI_ASSIGN_OR_RETURN(const auto allowed, AllowedTools(tools, only));
  std::map<std::string, std::string> rules;
  std::string alts;
  for (const AllowedTool& t : allowed) {
    const std::string id = std::to_string(t.index), field = "'tools[" + id + "].function.parameters'";
    // The parser reads a name up to the first of these (tool_stream_dsml.cc, kName): a name holding one would be
    // forced by the grammar and then not read as a call.
    if (t.name.empty() || t.name.find_first_of("\"<>\n") != std::string::npos)
      return InvalidArgument("'tools[" + id + "].function.name' cannot be written in a DSML invoke tag (empty, or holds '\"', '<', '>' or a newline)");
    const json& schema = t.schema;
    for (const char* k : {"anyOf", "oneOf", "allOf", "$ref", "not", "if", "patternProperties"})
      if (schema.contains(k))
        return InvalidArgument(field + ": DSML tool calls need a plain object schema ('" + k + "' is not supported)");
    if (schema.contains("type") && schema["type"] != "object")
      return InvalidArgument(field + ": DSML tool calls need \"type\": \"object\"");
    const json props = schema.value("properties", json::object());
    if (!props.is_object()) return InvalidArgument(field + ": 'properties' must be an object");
    std::vector<std::string> required;
    if (auto r = schema.find("required"); r != schema.end() && r->is_array())
      for (const json& x : *r)
        if (x.is_string()) required.push_back(x.get<std::string>());
    for (const std::string& r : required)
      if (!props.contains(r)) return InvalidArgument(field + ": required property '" + r + "' has no schema");
    std::vector<std::pair<std::string, bool>> params;  // (element rule, required)
    int j = 0;
    for (const auto& [key, prop] : props.items()) {
      if (key.find('"') != std::string::npos || key.find(kDsml) != std::string::npos)
        return InvalidArgument(field + ": property name '" + key + "' cannot be written in a DSML parameter tag");
      const std::string elem = "d" + id + "-" + std::to_string(j), head = "<" + kDsml + "parameter name=\"" + key;
      const std::string close = grammar::GbnfLiteral("</" + kDsml + "parameter>\n");
      std::string raw = prop.is_object() ? RawStringRule(prop) : "";
      if (!raw.empty()) {
        rules[elem] = grammar::GbnfLiteral(head + "\" string=\"true\">") + " " + raw + " " + close;
      } else {
        // The property's schema compiled as a document of its own, with the root's definitions for its $refs.
        json sub = prop;
        for (const char* defs : {"$defs", "definitions"})
          if (schema.contains(defs) && sub.is_object() && !sub.contains(defs)) sub[defs] = schema[defs];
        const std::string top = "t" + id + "-p" + std::to_string(j);
        auto r = grammar::JsonSchemaRules(sub, top + "-", top, ws);
        if (!r.ok()) return InvalidArgument(field + " property '" + key + "': " + r.status().message());
        for (auto& [k, v] : *r) rules[k] = std::move(v);
        rules[elem] = grammar::GbnfLiteral(head + "\" string=\"false\">") + " " + top + " " + close;
      }
      params.push_back({elem, std::find(required.begin(), required.end(), key) != required.end()});
      ++j;
    }
    // The parameters: the template writes a bare "\n" when there are none.
    std::string seq;
    const bool any_required = std::any_of(params.begin(), params.end(), [](const auto& p) { return p.second; });
    if (params.empty()) {
      seq = grammar::GbnfLiteral("\n");
    } else if (any_required) {
      for (const auto& [elem, req] : params) seq += (seq.empty() ? "" : " ") + (req ? elem : "( " + elem + " )?");
    } else {  // all optional: none ("\n"), or the first one written is k
      seq = grammar::GbnfLiteral("\n");
      for (size_t k = 0; k < params.size(); ++k) {
        seq += " | " + params[k].first;
        for (size_t m = k + 1; m < params.size(); ++m) seq += " ( " + params[m].first + " )?";
      }
      seq = "( " + seq + " )";
    }
    const std::string c = "c" + id;
    rules[c] = grammar::GbnfLiteral("<" + kDsml + "invoke name=\"" + t.name + "\">\n") + " " + seq + " " +
               grammar::GbnfLiteral("</" + kDsml + "invoke>\n");
    alts += (alts.empty() ? "" : " | ") + c;
  }
  const std::string calls = parallel ? "call+" : "call";
  std::string root;
  for (const char* block : {"tool_calls", "function_calls"})
    root += (root.empty() ? "" : " | ") + grammar::GbnfLiteral("<" + kDsml + block + ">\n") + " " + calls + " " +
            grammar::GbnfLiteral("</" + kDsml + block + ">");
  std::string out = "root ::= " + root + "\ncall ::= " + alts + "\ndsml-char ::= [^｜]\n";
  for (const auto& [k, v] : rules) out += k + " ::= " + v + "\n";
  return out;
}

}  // namespace

StatusOr<std::string> ToolCallGbnf(const json& tools, ToolFormat format, const std::string& only, bool parallel,
                                   grammar::JsonWhitespace ws) {
  if (format == ToolFormat::kNone)
    return InvalidArgument("'tools': this model's chat template has no tool-call format deepinfer can parse");
  // Harmony calls come after analysis messages the model writes freely: HarmonyToolCallGbnf's gated grammar.
  if (format == ToolFormat::kHarmony) return InvalidArgument("'tool_choice': Harmony calls need HarmonyToolCallGbnf");
  if (format == ToolFormat::kDeepSeekDsml) return DsmlToolCallGbnf(tools, only, parallel, ws);
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

std::string AfterReasoningGbnf(const std::string& call_gbnf) {
  static const std::string kRoot = "root ::= ";
  if (call_gbnf.compare(0, kRoot.size(), kRoot) != 0) return call_gbnf;
  return "root ::= [ \n]{0,4} tool-root\ntool-" + call_gbnf;
}

}  // namespace deepinfer
