#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

using nlohmann::json;

namespace {

// The JSON building blocks, llama.cpp's json-schema-to-grammar spellings (bounded digits and whitespace); the
// whitespace between tokens is PrimitiveBody's choice.
const std::map<std::string, std::string>& Primitives() {
  static const std::map<std::string, std::string> p = {
      {"space", "| \" \" | \"\\n\" [ \\t]{0,20}"},
      {"boolean", "(\"true\" | \"false\") space"},
      {"null", "\"null\" space"},
      {"integral-part", "[0] | [1-9] [0-9]{0,15}"},
      {"decimal-part", "[0-9]{1,16}"},
      {"integer", "(\"-\"? integral-part) space"},
      {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space"},
      {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
      {"string", "\"\\\"\" char* \"\\\"\" space"},
      {"value", "object | array | string | number | boolean | null"},
      {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space"},
      {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space"},
  };
  return p;
}

// Which primitives each one needs.
const std::map<std::string, std::vector<std::string>>& PrimitiveDeps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"boolean", {"space"}}, {"null", {"space"}}, {"integer", {"integral-part", "space"}},
      {"number", {"integral-part", "decimal-part", "space"}}, {"string", {"char", "space"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"space", "string", "value"}}, {"array", {"space", "value"}},
  };
  return d;
}

const std::set<std::string>& Unsupported() {
  static const std::set<std::string> u = {"not", "if", "then", "else", "patternProperties", "dependentRequired",
                                          "dependentSchemas", "dependencies", "uniqueItems", "multipleOf", "contains",
                                          "minContains", "maxContains", "minProperties", "maxProperties",
                                          "propertyNames", "unevaluatedProperties", "unevaluatedItems",
                                          "additionalItems", "$dynamicRef", "$recursiveRef"};
  return u;
}

// A primitive's body under the whitespace policy. Compact: at most one space where JSON allows whitespace (the
// `{"a": 1, "b": [2, 3]}` that json.dumps writes, or none), so a model cannot spend its tokens on blanks.
// Flexible: llama.cpp's json-schema-to-grammar rule, a space or a newline with up to 20 spaces/tabs of indent.
std::string PrimitiveBody(const std::string& name, JsonWhitespace ws) {
  if (name == "space") return ws == JsonWhitespace::kCompact ? "| \" \"" : "| \" \" | \"\\n\" [ \\t]{0,20}";
  return Primitives().at(name);
}

std::string Digits(int64_t v) { return std::to_string(v); }

// Decimal strings a..b of equal length.
std::string RangeSameLen(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a == b) return GbnfLiteral(a);
  if (a[0] == b[0]) {
    const std::string rest = RangeSameLen(a.substr(1), b.substr(1));
    return GbnfLiteral(a.substr(0, 1)) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = a.size() - 1;
  const std::string any = n ? " [0-9]{" + std::to_string(n) + "}" : "";
  const std::string zeros(n, '0'), nines(n, '9');
  std::vector<std::string> alts;
  char lo_first = a[0], hi_first = b[0];
  if (a.substr(1) != zeros) {
    alts.push_back(GbnfLiteral(a.substr(0, 1)) + " " + RangeSameLen(a.substr(1), nines));
    ++lo_first;
  }
  if (b.substr(1) != nines) --hi_first;
  if (lo_first <= hi_first) alts.push_back(std::string("[") + lo_first + "-" + hi_first + "]" + any);
  if (b.substr(1) != nines) alts.push_back(GbnfLiteral(b.substr(0, 1)) + " " + RangeSameLen(zeros, b.substr(1)));
  std::string o = "(";
  for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
  return o + ")";
}

int64_t Pow10(int d) {
  int64_t v = 1;
  while (d-- > 0) v *= 10;
  return v;
}

// Non-negative integers in [lo, hi] without leading zeros; hi < 0 means unbounded (up to 16 digits).
std::string NonNegRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  const int dl = static_cast<int>(Digits(lo).size());
  const int dh = hi < 0 ? dl : static_cast<int>(Digits(hi).size());
  for (int d = dl; d <= dh; ++d) {
    const int64_t a = std::max(lo, d == 1 ? 0 : Pow10(d - 1));
    const int64_t b = hi < 0 ? Pow10(d) - 1 : std::min(hi, Pow10(d) - 1);
    if (a <= b) alts.push_back(RangeSameLen(Digits(a), Digits(b)));
  }
  if (hi < 0 && dl < 16) alts.push_back("[1-9] [0-9]{" + std::to_string(dl) + ",15}");
  std::string o = "(";
  for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + alts[i];
  return o + ")";
}

constexpr double kIntLimit = 1e15;

class Converter {
 public:
  Converter(const json& root, std::string prefix, JsonWhitespace ws) : root_(root), prefix_(std::move(prefix)), ws_(ws) {}

  // The rules, the top one named `top`; empty bodies spelled "" (GBNF has no empty alternative on its own).
  StatusOr<std::map<std::string, std::string>> Rules(const std::string& top) {
    const std::string body = Visit(root_, prefix_ + "root", 0);
    if (!err_.ok()) return err_;
    std::map<std::string, std::string> out = rules_;
    for (auto& [name, b] : out)
      if (b.empty()) b = "\"\"";
    out[top] = body;
    return out;
  }

 private:
  void Fail(const std::string& m) {
    if (err_.ok()) err_ = InvalidArgument("json schema: " + m);
  }
  std::string Prim(const std::string& name) {
    if (rules_.count(name)) return name;
    rules_[name] = PrimitiveBody(name, ws_);
    auto d = PrimitiveDeps().find(name);
    if (d != PrimitiveDeps().end())
      for (const auto& dep : d->second) Prim(dep);
    return name;
  }
  std::string NewRule(const std::string& hint, const std::string& body) {
    std::string base;
    for (char c : hint) base += isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty() || Primitives().count(base) || base == "root") base = "r-" + base;
    base = prefix_ + base;
    std::string name = base;
    for (int i = 2; rules_.count(name); ++i) name = base + "-" + std::to_string(i);
    rules_[name] = body;
    return name;
  }
  static std::string Alts(const std::vector<std::string>& v) {
    if (v.size() == 1) return v[0];
    std::string o = "(";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? " | " : "") + v[i];
    return o + ")";
  }

  std::string Ref(const std::string& ref, int depth) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.rfind("#", 0) != 0) return Fail("only local $ref (#/...) is supported, got '" + ref + "'"), "";
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(ref.substr(1));
    } catch (const std::exception&) {
      return Fail("bad $ref '" + ref + "'"), "";
    }
    if (!root_.contains(ptr)) return Fail("$ref '" + ref + "' does not resolve"), "";
    const std::string name = NewRule("ref-" + ref.substr(ref.rfind('/') + 1), "");
    refs_[ref] = name;  // before visiting: recursive schemas refer back to the rule
    const std::string body = Visit(root_.at(ptr), name, depth + 1);
    rules_[name] = body;
    return name;
  }

  std::string Visit(const json& s, const std::string& name, int depth) {
    if (!err_.ok()) return "";
    if (depth > 64) return Fail("schema nested deeper than 64 levels"), "";
    if (s.is_boolean()) return s.get<bool>() ? Prim("value") : (Fail("schema 'false' accepts nothing"), "");
    if (!s.is_object()) return Fail("a schema must be an object or a boolean"), "";
    for (const auto& [k, v] : s.items())
      if (Unsupported().count(k)) return Fail("unsupported keyword '" + k + "'"), "";
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return Fail("$ref must be a string"), "";
      return Ref(s["$ref"].get<std::string>(), depth);
    }
    if (s.value("nullable", false)) {
      json rest = s;
      rest.erase("nullable");
      return Alts({Visit(rest, name, depth + 1), Prim("null")});
    }
    if (s.contains("const")) return GbnfLiteral(s["const"].dump()) + " " + Prim("space");
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return Fail("enum must be a non-empty array"), "";
      std::vector<std::string> alts;
      for (const auto& v : s["enum"]) alts.push_back(GbnfLiteral(v.dump()));
      return Alts(alts) + " " + Prim("space");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) return Fail(std::string(key) + " must be a non-empty array"), "";
      std::vector<std::string> alts;
      for (size_t i = 0; i < s[key].size(); ++i) alts.push_back(Visit(s[key][i], name + "-" + std::to_string(i), depth + 1));
      return Alts(alts);
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1) return Fail("allOf is supported with one schema only"), "";
      return Visit(s["allOf"][0], name, depth + 1);
    }
    if (s.contains("type") && s["type"].is_array()) {
      std::vector<std::string> alts;
      for (const auto& t : s["type"]) {
        json one = s;
        one["type"] = t;
        alts.push_back(Visit(one, name, depth + 1));
      }
      if (alts.empty()) return Fail("empty type list"), "";
      return Alts(alts);
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) return Fail("type must be a string or an array of strings"), "";
      type = s["type"].get<std::string>();
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems")) {
      type = "array";
    } else {
      return Prim("value");
    }
    if (type == "object") return Object(s, name, depth);
    if (type == "array") return Array(s, name, depth);
    if (type == "string") return String(s, name);
    if (type == "integer" || type == "number") return Number(s, type == "integer");
    if (type == "boolean") return Prim("boolean");
    if (type == "null") return Prim("null");
    return Fail("unknown type '" + type + "'"), "";
  }

  std::string Object(const json& s, const std::string& name, int depth) {
    std::vector<std::pair<std::string, bool>> props;  // key, required
    std::vector<std::string> values;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Fail("required must be an array"), "";
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return Fail("required entries must be strings"), "";
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return Fail("properties must be an object"), "";
      // nlohmann::json iterates keys sorted, so properties are generated in that order (any order is valid).
      for (const auto& [k, v] : s["properties"].items()) {
        props.push_back({k, required.count(k) > 0});
        values.push_back(Visit(v, name + "-" + k, depth + 1));
      }
    }
    for (const auto& r : required) {
      bool found = false;
      for (const auto& p : props) found |= p.first == r;
      if (!found) return Fail("required property '" + r + "' is not in properties"), "";
    }
    std::string addl;  // the rule for one extra key/value pair, empty when none are allowed
    const bool has_addl = s.contains("additionalProperties");
    if ((!has_addl && props.empty()) || (has_addl && s["additionalProperties"].is_boolean() && s["additionalProperties"].get<bool>())) {
      addl = NewRule(name + "-kv", Prim("string") + " \":\" " + Prim("space") + " " + Prim("value"));
    } else if (has_addl && s["additionalProperties"].is_object()) {
      const std::string v = Visit(s["additionalProperties"], name + "-additional", depth + 1);
      addl = NewRule(name + "-kv", Prim("string") + " \":\" " + Prim("space") + " " + v);
    } else if (has_addl && !s["additionalProperties"].is_boolean()) {
      return Fail("additionalProperties must be a boolean or a schema"), "";
    }
    if (!err_.ok()) return "";
    const std::string sp = Prim("space");
    // a[k]: properties k.. with nothing written yet; b[k]: the same after something was written (comma first).
    const size_t n = props.size();
    std::vector<std::string> a(n + 1), b(n + 1);
    b[n] = NewRule(name + "-rest", addl.empty() ? "" : "( \",\" " + sp + " " + addl + " )*");
    a[n] = NewRule(name + "-tail", addl.empty() ? "" : "( " + addl + " ( \",\" " + sp + " " + addl + " )* )?");
    for (size_t k = n; k-- > 0;) {
      const std::string kv = GbnfLiteral(json(props[k].first).dump()) + " " + sp + " \":\" " + sp + " " + values[k];
      if (props[k].second) {
        b[k] = NewRule(name + "-b", "\",\" " + sp + " " + kv + " " + b[k + 1]);
        a[k] = NewRule(name + "-a", kv + " " + b[k + 1]);
      } else {
        b[k] = NewRule(name + "-b", "( \",\" " + sp + " " + kv + " )? " + b[k + 1]);
        a[k] = NewRule(name + "-a", kv + " " + b[k + 1] + " | " + a[k + 1]);
      }
    }
    return "\"{\" " + sp + " " + a[0] + " \"}\" " + sp;
  }

  std::string Array(const json& s, const std::string& name, int depth) {
    const std::string sp = Prim("space");
    const int64_t min_items = s.value("minItems", int64_t{0});
    const int64_t max_items = s.contains("maxItems") ? s["maxItems"].get<int64_t>() : -1;
    if (min_items < 0 || (max_items >= 0 && max_items < min_items)) return Fail("minItems/maxItems out of order"), "";
    if (min_items > 4096 || max_items > 4096) return Fail("minItems/maxItems over 4096"), "";
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return Fail("prefixItems must be an array"), "";
      if (s.contains("items") && !(s["items"].is_boolean() && !s["items"].get<bool>()))
        return Fail("prefixItems with more items is not supported"), "";
      std::string body = "\"[\" " + sp;
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        body += (i ? " \",\" " + sp + " " : " ") + Visit(s["prefixItems"][i], name + "-" + std::to_string(i), depth + 1);
      return body + " \"]\" " + sp;
    }
    const std::string item = s.contains("items") ? Visit(s["items"], name + "-item", depth + 1) : Prim("value");
    if (!err_.ok()) return "";
    const std::string it = NewRule(name + "-item", item);
    const std::string more = "( \",\" " + sp + " " + it + " )";
    std::string list;
    if (max_items == 0) return "\"[\" " + sp + " \"]\" " + sp;
    const int64_t rest_min = std::max<int64_t>(min_items - 1, 0);
    list = it + " " + more + "{" + std::to_string(rest_min) + "," + (max_items < 0 ? "" : std::to_string(max_items - 1)) + "}";
    if (min_items == 0) list = "( " + list + " )?";
    return "\"[\" " + sp + " " + list + " \"]\" " + sp;
  }

  std::string String(const json& s, const std::string& name) {
    const std::string q = "\"\\\"\"";
    const std::string sp = Prim("space");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::string content;
    if (s.contains("pattern") || s.contains("format")) {
      if (lengths) return Fail("minLength/maxLength together with pattern or format is not supported"), "";
      std::string re;
      if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) return Fail("pattern must be a string"), "";
        re = s["pattern"].get<std::string>();
        if (!re.empty() && re.back() == '$') re.pop_back();
      } else {
        const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
        static const std::string date = "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8])))";
        static const std::string time = "(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))";
        if (f == "date") re = date;
        else if (f == "time") re = time;
        else if (f == "date-time") re = date + "T" + time;
        else if (f == "uuid") re = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
        else if (f == "email") re = "[a-zA-Z0-9_+-]{1,32}(\\.[a-zA-Z0-9_+-]{1,32}){0,2}@([a-zA-Z0-9]([a-zA-Z0-9-]{0,20}[a-zA-Z0-9])?\\.){1,3}[a-zA-Z]{2,8}";
        else return Fail("unsupported string format '" + f + "'"), "";
      }
      auto g = RegexToGbnf(re, true);
      if (!g.ok()) return Fail("pattern: " + g.status().message()), "";
      content = *g;
    } else {
      const int64_t lo = s.value("minLength", int64_t{0});
      const int64_t hi = s.contains("maxLength") ? s["maxLength"].get<int64_t>() : -1;
      if (lo < 0 || (hi >= 0 && hi < lo)) return Fail("minLength/maxLength out of order"), "";
      if (lo > 4096 || hi > 4096) return Fail("minLength/maxLength over 4096"), "";
      Prim("char");
      content = lengths ? "char{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}" : "char*";
    }
    return NewRule(name + "-string", q + " " + content + " " + q + " " + sp);
  }

  std::string Number(const json& s, bool integer) {
    // Integer bounds: the smallest/largest integers inside; bounds past 1e15 are dropped (16 digits fit anyway).
    std::optional<int64_t> a, b;
    auto tighten = [](std::optional<int64_t>* v, int64_t x, bool lower) {
      if (!v->has_value() || (lower ? x > **v : x < **v)) *v = x;
    };
    const bool draft4_lo = s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
    const bool draft4_hi = s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k) || s[k].is_boolean()) continue;
      if (!s[k].is_number()) return Fail(std::string(k) + " must be a number"), "";
      const double d = s[k].get<double>();
      const std::string key = k;
      const bool lower = key.find("inimum") != std::string::npos;
      const bool excl = key.rfind("exclusive", 0) == 0 || (key == "minimum" && draft4_lo) || (key == "maximum" && draft4_hi);
      if (lower && d >= kIntLimit) return Fail("minimum beyond 1e15 is not supported"), "";
      if (!lower && d <= -kIntLimit) return Fail("maximum beyond -1e15 is not supported"), "";
      if (lower && d > -kIntLimit) tighten(&a, static_cast<int64_t>(excl ? std::floor(d) + 1 : std::ceil(d)), true);
      if (!lower && d < kIntLimit) tighten(&b, static_cast<int64_t>(excl ? std::ceil(d) - 1 : std::floor(d)), false);
    }
    if (!a && !b) return Prim(integer ? "integer" : "number");
    if (a && b && *a > *b)
      return Fail(integer ? "no integer satisfies the bounds" : "number bounds without an integer inside are not supported"), "";
    std::vector<std::string> alts;
    if (!a || *a < 0) {  // negatives -x, x in [x_min, x_max]
      const int64_t x_min = b && *b < 0 ? -*b : 1;
      const int64_t x_max = a ? -*a : -1;
      alts.push_back("\"-\" " + NonNegRange(x_min, x_max));
    }
    if (!b || *b >= 0) alts.push_back(NonNegRange(a ? std::max<int64_t>(*a, 0) : 0, b ? *b : -1));
    return Alts(alts) + " " + Prim("space");
  }

  const json& root_;
  const std::string prefix_;  // on every rule name but the primitives'
  const JsonWhitespace ws_;  // the whitespace the primitives allow
  Status err_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

StatusOr<std::string> JsonSchemaToGbnf(const json& schema, JsonWhitespace ws) {
  DI_ASSIGN_OR_RETURN(auto rules, Converter(schema, "", ws).Rules("root"));
  std::string out = "root ::= " + rules["root"] + "\n";
  for (const auto& [name, body] : rules)
    if (name != "root") out += name + " ::= " + body + "\n";
  return out;
}

StatusOr<std::map<std::string, std::string>> JsonSchemaRules(const json& schema, const std::string& prefix,
                                                              const std::string& top, JsonWhitespace ws) {
  return Converter(schema, prefix, ws).Rules(top);
}

std::string JsonObjectGbnf(JsonWhitespace ws) {
  std::string out = "root ::= object\n";
  for (const char* r : {"space", "boolean", "null", "integral-part", "decimal-part", "number", "char", "string",
                        "value", "object", "array"})
    out += std::string(r) + " ::= " + PrimitiveBody(r, ws) + "\n";
  return out;
}

std::string ChoiceGbnf(const std::vector<std::string>& choices) {
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) out += (i ? " | " : "") + GbnfLiteral(choices[i]);
  return out + "\n";
}

}  // namespace deepinfer::grammar
