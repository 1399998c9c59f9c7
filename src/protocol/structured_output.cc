#include "protocol/structured_output.h"

#include <nlohmann/json.hpp>

#include "grammar/compile.h"

namespace deepinfer {

namespace {

using nlohmann::json;

// A schema given as an object or as a JSON string holding one (vLLM accepts both).
StatusOr<json> SchemaValue(const json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    try {
      return json::parse(v.get<std::string>());
    } catch (const std::exception& e) {
      return InvalidArgument("'" + field + "' is not valid JSON: " + e.what());
    }
  }
  return InvalidArgument("'" + field + "' must be a JSON Schema object");
}

StatusOr<std::vector<std::string>> Choices(const json& v, const std::string& field) {
  if (!v.is_array()) return InvalidArgument("'" + field + "' must be a list of strings");
  std::vector<std::string> out;
  for (const auto& c : v) {
    if (!c.is_string()) return InvalidArgument("'" + field + "' must be a list of strings");
    out.push_back(c.get<std::string>());
  }
  return out;
}

struct Constraint {
  std::string field;  // where it came from, for errors
  enum Kind { kSchema, kObject, kRegex, kChoice, kGrammar } kind;
  json value;
};

Status Collect(const json& b, std::vector<Constraint>* out) {
  if (auto it = b.find("response_format"); it != b.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string())
      return InvalidArgument("'response_format' must be an object with a 'type'");
    const std::string type = (*it)["type"].get<std::string>();
    if (type == "json_object") {
      out->push_back({"response_format", Constraint::kObject, json()});
    } else if (type == "json_schema") {
      const json* js = it->contains("json_schema") ? &(*it)["json_schema"] : nullptr;
      if (!js || !js->is_object() || !js->contains("schema"))
        return InvalidArgument("'response_format.json_schema.schema' is required for type json_schema");
      if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null())
        return InvalidArgument("'response_format.json_schema.strict' must be true or false");
      // strict or not, the output is constrained to the schema (strict only tells OpenAI to reject schemas it
      // cannot enforce exactly, and unsupported keywords are errors here either way).
      out->push_back({"response_format.json_schema.schema", Constraint::kSchema, (*js)["schema"]});
    } else if (type != "text") {
      return InvalidArgument("'response_format.type' must be text, json_object or json_schema, not '" + type + "'");
    }
  }
  auto add = [&](const json& obj, const char* key, const std::string& field, Constraint::Kind kind) {
    if (auto it = obj.find(key); it != obj.end() && !it->is_null()) out->push_back({field, kind, *it});
  };
  if (auto it = b.find("structured_outputs"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument("'structured_outputs' must be an object");
    add(*it, "json", "structured_outputs.json", Constraint::kSchema);
    add(*it, "regex", "structured_outputs.regex", Constraint::kRegex);
    add(*it, "choice", "structured_outputs.choice", Constraint::kChoice);
    add(*it, "grammar", "structured_outputs.grammar", Constraint::kGrammar);
    if (it->value("json_object", false)) out->push_back({"structured_outputs.json_object", Constraint::kObject, json()});
    for (const char* k : {"structural_tag", "whitespace_pattern"})
      if (it->contains(k)) return InvalidArgument(std::string("'structured_outputs.") + k + "' is not supported");
  }
  add(b, "guided_json", "guided_json", Constraint::kSchema);
  add(b, "guided_regex", "guided_regex", Constraint::kRegex);
  add(b, "guided_choice", "guided_choice", Constraint::kChoice);
  add(b, "guided_grammar", "guided_grammar", Constraint::kGrammar);
  return Status::Ok();
}

}  // namespace

StatusOr<grammar::JsonWhitespace> JsonWhitespaceOf(const json& b) {
  auto so = b.is_object() ? b.find("structured_outputs") : b.end();
  if (!b.is_object() || so == b.end() || !so->is_object()) return grammar::JsonWhitespace::kCompact;
  auto d = so->find("disable_any_whitespace");
  if (d == so->end() || d->is_null()) return grammar::JsonWhitespace::kCompact;
  if (!d->is_boolean()) return InvalidArgument("'structured_outputs.disable_any_whitespace' must be true or false");
  return d->get<bool>() ? grammar::JsonWhitespace::kCompact : grammar::JsonWhitespace::kFlexible;
}

Status ParseStructuredOutput(const json& b, RequestParams* p) {
  if (!b.is_object()) return Status::Ok();
  std::vector<Constraint> cs;
  DI_RETURN_IF_ERROR(Collect(b, &cs));
  DI_ASSIGN_OR_RETURN(const grammar::JsonWhitespace ws, JsonWhitespaceOf(b));
  if (cs.empty()) return Status::Ok();
  if (cs.size() > 1)
    return InvalidArgument("only one structured output constraint per request: got '" + cs[0].field + "' and '" +
                           cs[1].field + "'");
  const Constraint& c = cs[0];
  StatusOr<std::shared_ptr<const grammar::Grammar>> g = InvalidArgument("unreachable");
  std::string gbnf;
  switch (c.kind) {
    case Constraint::kSchema: {
      auto schema = SchemaValue(c.value, c.field);
      if (!schema.ok()) return schema.status();
      g = grammar::CompileJsonSchema(*schema, &gbnf, ws);
      break;
    }
    case Constraint::kObject: g = grammar::CompileJsonObject(&gbnf, ws); break;
    case Constraint::kRegex:
      if (!c.value.is_string()) return InvalidArgument("'" + c.field + "' must be a string");
      g = grammar::CompileRegex(c.value.get<std::string>(), &gbnf);
      break;
    case Constraint::kChoice: {
      auto choices = Choices(c.value, c.field);
      if (!choices.ok()) return choices.status();
      g = grammar::CompileChoice(*choices, &gbnf);
      break;
    }
    case Constraint::kGrammar:
      if (!c.value.is_string()) return InvalidArgument("'" + c.field + "' must be a GBNF string");
      g = grammar::CompileGbnf(c.value.get<std::string>(), &gbnf);
      break;
  }
  if (!g.ok()) return InvalidArgument("'" + c.field + "': " + g.status().message());
  p->compiled_grammar = *g;
  p->grammar = std::move(gbnf);
  return Status::Ok();
}

}  // namespace deepinfer
