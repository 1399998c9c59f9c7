// Jinja interpreter: scopes, control flow, operators, filters, tests and the string/list/dict methods chat
// templates use. Rendering of values follows @huggingface/jinja (the reference the tests compare with):
// none/undefined print nothing, booleans print true/false, lists and dicts print as JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "base/json_escape.h"
#include "template/jinja.h"
#include "template/jinja_ast.h"

namespace deepinfer::jinja {
namespace {

using K = Value::Kind;

// ------------------------------------------------------------------------------------------------ conversions

ValuePtr FromJsonValue(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      auto v = Value::Array();
      for (auto& x : j) v->arr.push_back(FromJsonValue(x));
      return v;
    }
    case nlohmann::ordered_json::value_t::object: {
      auto v = Value::Object();
      for (auto& [k, x] : j.items()) v->obj.emplace_back(k, FromJsonValue(x));
      return v;
    }
    default: return Value::Undefined();
  }
}

std::string JsonString(const std::string& s) {
  // JSON.stringify escaping: quotes, backslash, control characters; other characters stay as they are.
  std::string o = "\"";
  AppendJsonEscaped(s, &o);
  return o + "\"";
}

std::string FloatString(double f) {
  if (f == 0 && std::signbit(f)) return "-0.0";
  if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 1e16) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f", f);
    return buf;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {  // shortest representation that round-trips (JS Number#toString)
    std::snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  return buf;
}

std::string ToJson(const ValuePtr& v, int indent, int depth, bool undefined_as_null) {
  const std::string item_sep = indent > 0 ? "," : ", ", key_sep = ": ";
  switch (v->kind) {
    case K::kNone: return "null";
    case K::kUndefined: return undefined_as_null ? "null" : "undefined";
    case K::kBool: return v->b ? "true" : "false";
    case K::kInt: return std::to_string(v->i);
    case K::kFloat: {
      if (v->f == std::floor(v->f) && std::fabs(v->f) < 1e16) return std::to_string(static_cast<int64_t>(v->f));
      return FloatString(v->f);
    }
    case K::kString: return JsonString(v->s);
    case K::kArray:
    case K::kObject: {
      const std::string ind(indent > 0 ? indent : 0, ' ');
      std::string base = "\n", child;
      for (int d = 0; d < depth; ++d) base += ind;
      child = base + ind;
      std::vector<std::string> parts;
      if (v->kind == K::kArray) {
        for (auto& x : v->arr) parts.push_back(ToJson(x, indent, depth + 1, undefined_as_null));
      } else {
        for (auto& [k, x] : v->obj) parts.push_back((indent > 0 ? child : "") + JsonString(k) + key_sep + ToJson(x, indent, depth + 1, undefined_as_null));
      }
      const char open = v->kind == K::kArray ? '[' : '{', close = v->kind == K::kArray ? ']' : '}';
      if (parts.empty()) return std::string(1, open) + close;
      std::string out(1, open);
      if (v->kind == K::kArray && indent > 0) {
        out += child;
        for (size_t i = 0; i < parts.size(); ++i) out += (i ? item_sep + child : "") + parts[i];
        return out + base + close;
      }
      for (size_t i = 0; i < parts.size(); ++i) out += (i ? item_sep : "") + parts[i];
      if (v->kind == K::kObject && indent > 0) out += base;
      return out + close;
    }
    case K::kCallable: return "null";
  }
  return "null";
}

std::string Str(const ValuePtr& v) {
  switch (v->kind) {
    case K::kUndefined:
    case K::kNone: return "";
    case K::kBool: return v->b ? "true" : "false";
    case K::kInt: return std::to_string(v->i);
    case K::kFloat: return FloatString(v->f);
    case K::kString: return v->s;
    case K::kArray:
    case K::kObject: return ToJson(v, 0, 0, false);
    case K::kCallable: return "<function>";
  }
  return "";
}

bool Truthy(const ValuePtr& v) {
  switch (v->kind) {
    case K::kUndefined:
    case K::kNone: return false;
    case K::kBool: return v->b;
    case K::kInt: return v->i != 0;
    case K::kFloat: return v->f != 0;
    case K::kString: return !v->s.empty();
    case K::kArray: return !v->arr.empty();
    case K::kObject: return !v->obj.empty() || v->is_namespace;
    case K::kCallable: return true;
  }
  return false;
}

bool IsNum(const ValuePtr& v) { return v->kind == K::kInt || v->kind == K::kFloat; }
double Num(const ValuePtr& v) { return v->kind == K::kInt ? static_cast<double>(v->i) : v->kind == K::kFloat ? v->f : v->b; }

bool Equal(const ValuePtr& a, const ValuePtr& b) {
  if (IsNum(a) && IsNum(b)) return Num(a) == Num(b);
  if (a->kind != b->kind) return false;
  switch (a->kind) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kBool: return a->b == b->b;
    case K::kString: return a->s == b->s;
    case K::kArray:
      if (a->arr.size() != b->arr.size()) return false;
      for (size_t i = 0; i < a->arr.size(); ++i)
        if (!Equal(a->arr[i], b->arr[i])) return false;
      return true;
    case K::kObject:
      if (a->obj.size() != b->obj.size()) return false;
      for (auto& [k, v] : a->obj) {
        auto o = b->Get(k);
        if (!o || !Equal(v, o)) return false;
      }
      return true;
    default: return a.get() == b.get();
  }
}

// ------------------------------------------------------------------------------------------------ evaluation

struct BreakSignal {};
struct ContinueSignal {};

class Interp {
 public:
  explicit Interp(const ValuePtr& ctx) {
    scopes_.emplace_back();
    for (auto& [k, v] : ctx->obj) scopes_.back()[k] = v;
    InstallGlobals();
  }

  Status Run(const Node& root, std::string* out) { return Block(root.body, out); }

 private:
  using Scope = std::map<std::string, ValuePtr>;

  ValuePtr Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::Undefined();
  }

  void InstallGlobals() {
    auto& g = scopes_.front();
    g["raise_exception"] = Value::Function([](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
      return InvalidArgument("template raised an exception: " + (a.empty() ? std::string() : Str(a[0])));
    });
    g["range"] = Value::Function([](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
      int64_t start = 0, stop = 0, step = 1;
      if (a.size() == 1) stop = static_cast<int64_t>(Num(a[0]));
      else if (a.size() >= 2) {
        start = static_cast<int64_t>(Num(a[0]));
        stop = static_cast<int64_t>(Num(a[1]));
        if (a.size() > 2) step = static_cast<int64_t>(Num(a[2]));
      }
      if (step == 0) return InvalidArgument("range() step must not be zero");
      auto v = Value::Array();
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        v->arr.push_back(Value::Int(i));
        if (v->arr.size() > (1u << 24)) return InvalidArgument("range() too large");
      }
      return v;
    });
    g["namespace"] = Value::Function([](const Args& a, const Kwargs& kw) -> StatusOr<ValuePtr> {
      auto v = Value::Object();
      v->is_namespace = true;
      if (!a.empty() && a[0]->kind == K::kObject)
        for (auto& [k, x] : a[0]->obj) v->Set(k, x);
      for (auto& [k, x] : kw) v->Set(k, x);
      return v;
    });
    g["strftime_now"] = Value::Function([](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
      char buf[128];
      std::time_t t = std::time(nullptr);
      std::strftime(buf, sizeof buf, a.empty() ? "%Y-%m-%d" : Str(a[0]).c_str(), std::localtime(&t));
      return Value::Str(buf);
    });
  }

  Status Block(const std::vector<NodePtr>& body, std::string* out) {
    for (const auto& n : body) DI_RETURN_IF_ERROR(Stmt(*n, out));
    return Status::Ok();
  }

  Status Err(const Node& n, const std::string& m) const { return InvalidArgument("template line " + std::to_string(n.line) + ": " + m); }

  Status Stmt(const Node& n, std::string* out) {
    switch (n.kind) {
      case Node::Kind::kText:
        *out += n.literal->s;
        return Status::Ok();
      case Node::Kind::kOutput: {
        DI_ASSIGN_OR_RETURN(ValuePtr v, Eval(*n.children[0]));
        *out += Str(v);
        return Status::Ok();
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          DI_ASSIGN_OR_RETURN(ValuePtr c, Eval(*cond));
          if (Truthy(c)) return Block(body, out);
        }
        return Block(n.else_body, out);
      case Node::Kind::kFor: return For(n, out);
      case Node::Kind::kSet: {
        DI_ASSIGN_OR_RETURN(ValuePtr v, Eval(*n.children[0]));
        if (!n.targets.empty() && n.targets[0][0] == '.') {  // set ns.attr = v
          ValuePtr ns = Lookup(n.name);
          if (ns->kind != K::kObject) return Err(n, "cannot set attribute on '" + n.name + "'");
          ns->Set(n.targets[0].substr(1), v);
          return Status::Ok();
        }
        if (!n.targets.empty()) {  // set a, b = pair
          std::vector<std::string> names = {n.name};
          names.insert(names.end(), n.targets.begin(), n.targets.end());
          if (v->kind != K::kArray || v->arr.size() != names.size()) return Err(n, "cannot unpack for set");
          for (size_t i = 0; i < names.size(); ++i) scopes_.back()[names[i]] = v->arr[i];
          return Status::Ok();
        }
        scopes_.back()[n.name] = v;
        return Status::Ok();
      }
      case Node::Kind::kSetBlock: {
        std::string s;
        DI_RETURN_IF_ERROR(Block(n.body, &s));
        scopes_.back()[n.name] = Value::Str(s);
        return Status::Ok();
      }
      case Node::Kind::kMacro: {
        const Node* macro = &n;
        scopes_.back()[n.name] = Value::Function([this, macro](const Args& a, const Kwargs& kw) -> StatusOr<ValuePtr> {
          Scope s;
          for (size_t i = 0; i < macro->targets.size(); ++i) {
            ValuePtr v = i < a.size() ? a[i] : nullptr;
            for (auto& [k, x] : kw)
              if (k == macro->targets[i]) v = x;
            if (!v && macro->defaults[i]) {
              DI_ASSIGN_OR_RETURN(v, Eval(*macro->defaults[i]));
            }
            s[macro->targets[i]] = v ? v : Value::Undefined();
          }
          scopes_.push_back(std::move(s));
          std::string body;
          Status st = Block(macro->body, &body);
          scopes_.pop_back();
          DI_RETURN_IF_ERROR(st);
          return Value::Str(body);
        });
        return Status::Ok();
      }
      case Node::Kind::kBreak: loop_signal_ = 1; return Status::Ok();
      case Node::Kind::kContinue: loop_signal_ = 2; return Status::Ok();
      case Node::Kind::kCallBlock: {  // {% filter name %}
        std::string s;
        DI_RETURN_IF_ERROR(Block(n.body, &s));
        DI_ASSIGN_OR_RETURN(ValuePtr v, ApplyFilter(n, n.name, Value::Str(s), {}, {}));
        *out += Str(v);
        return Status::Ok();
      }
      default:
        return Err(n, "unexpected node");
    }
  }

  Status For(const Node& n, std::string* out) {
    DI_ASSIGN_OR_RETURN(ValuePtr iter, Eval(*n.children[0]));
    std::vector<ValuePtr> items;
    if (iter->kind == K::kArray) items = iter->arr;
    else if (iter->kind == K::kObject) for (auto& [k, v] : iter->obj) items.push_back(Value::Str(k));
    else if (iter->kind == K::kString) for (char c : iter->s) items.push_back(Value::Str(std::string(1, c)));
    else if (iter->kind != K::kUndefined && iter->kind != K::kNone) return Err(n, "cannot iterate over " + Str(iter));
    // Filter first (`for x in xs if cond`): loop.* counts only the kept items.
    auto bind = [&](Scope& s, const ValuePtr& item) -> Status {
      if (n.targets.size() == 1) {
        s[n.targets[0]] = item;
      } else {
        if (item->kind != K::kArray || item->arr.size() != n.targets.size()) return Err(n, "cannot unpack loop item");
        for (size_t t = 0; t < n.targets.size(); ++t) s[n.targets[t]] = item->arr[t];
      }
      return Status::Ok();
    };
    if (n.children.size() > 1) {
      std::vector<ValuePtr> kept;
      for (auto& it : items) {
        scopes_.emplace_back();
        Status st = bind(scopes_.back(), it);
        StatusOr<ValuePtr> c = st.ok() ? Eval(*n.children[1]) : StatusOr<ValuePtr>(st);
        scopes_.pop_back();
        if (!c.ok()) return c.status();
        if (Truthy(*c)) kept.push_back(it);
      }
      items.swap(kept);
    }
    if (items.empty()) return Block(n.else_body, out);
    for (size_t i = 0; i < items.size(); ++i) {
      Scope s;
      DI_RETURN_IF_ERROR(bind(s, items[i]));
      auto loop = Value::Object();
      const int64_t len = static_cast<int64_t>(items.size());
      loop->Set("index", Value::Int(i + 1));
      loop->Set("index0", Value::Int(i));
      loop->Set("revindex", Value::Int(len - i));
      loop->Set("revindex0", Value::Int(len - i - 1));
      loop->Set("first", Value::Bool(i == 0));
      loop->Set("last", Value::Bool(i + 1 == items.size()));
      loop->Set("length", Value::Int(len));
      loop->Set("previtem", i > 0 ? items[i - 1] : Value::Undefined());
      loop->Set("nextitem", i + 1 < items.size() ? items[i + 1] : Value::Undefined());
      s["loop"] = loop;
      scopes_.push_back(std::move(s));
      Status st = Status::Ok();
      for (const auto& b : n.body) {
        st = Stmt(*b, out);
        if (!st.ok() || loop_signal_) break;
      }
      scopes_.pop_back();
      DI_RETURN_IF_ERROR(st);
      const int sig = loop_signal_;
      loop_signal_ = 0;
      if (sig == 1) break;
    }
    return Status::Ok();
  }

  StatusOr<std::pair<Args, Kwargs>> EvalArgs(const Node& n, size_t first) {
    Args a;
    Kwargs kw;
    for (size_t i = first; i < n.children.size(); ++i) {
      DI_ASSIGN_OR_RETURN(ValuePtr v, Eval(*n.children[i]));
      a.push_back(v);
    }
    for (auto& [k, e] : n.kwargs) {
      DI_ASSIGN_OR_RETURN(ValuePtr v, Eval(*e));
      kw.emplace_back(k, v);
    }
    return std::make_pair(a, kw);
  }

  StatusOr<ValuePtr> Eval(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kLiteral: return n.literal;
      case Node::Kind::kName: return Lookup(n.name);
      case Node::Kind::kList: {
        auto v = Value::Array();
        for (auto& c : n.children) {
          DI_ASSIGN_OR_RETURN(ValuePtr x, Eval(*c));
          v->arr.push_back(x);
        }
        return v;
      }
      case Node::Kind::kDict: {
        auto v = Value::Object();
        for (size_t i = 0; i + 1 < n.children.size(); i += 2) {
          DI_ASSIGN_OR_RETURN(ValuePtr k, Eval(*n.children[i]));
          DI_ASSIGN_OR_RETURN(ValuePtr x, Eval(*n.children[i + 1]));
          v->Set(Str(k), x);
        }
        return v;
      }
      case Node::Kind::kGetAttr: {
        DI_ASSIGN_OR_RETURN(ValuePtr o, Eval(*n.children[0]));
        return Attr(o, n.name);
      }
      case Node::Kind::kGetItem: {
        DI_ASSIGN_OR_RETURN(ValuePtr o, Eval(*n.children[0]));
        DI_ASSIGN_OR_RETURN(ValuePtr k, Eval(*n.children[1]));
        return Item(o, k);
      }
      case Node::Kind::kSlice: return Slice(n);
      case Node::Kind::kCall: {
        DI_ASSIGN_OR_RETURN(ValuePtr f, Eval(*n.children[0]));
        DI_ASSIGN_OR_RETURN(auto args, EvalArgs(n, 1));
        if (f->kind != K::kCallable) return Err(n, "not callable");
        return f->fn(args.first, args.second);
      }
      case Node::Kind::kFilter: {
        DI_ASSIGN_OR_RETURN(ValuePtr x, Eval(*n.children[0]));
        DI_ASSIGN_OR_RETURN(auto args, EvalArgs(n, 1));
        return ApplyFilter(n, n.name, x, args.first, args.second);
      }
      case Node::Kind::kTest: {
        DI_ASSIGN_OR_RETURN(ValuePtr x, Eval(*n.children[0]));
        DI_ASSIGN_OR_RETURN(auto args, EvalArgs(n, 1));
        DI_ASSIGN_OR_RETURN(bool r, Test(n, x, args.first));
        return Value::Bool(r != n.negated);
      }
      case Node::Kind::kUnary: {
        DI_ASSIGN_OR_RETURN(ValuePtr x, Eval(*n.children[0]));
        if (n.name == "not") return Value::Bool(!Truthy(x));
        if (n.name == "-") return x->kind == K::kInt ? Value::Int(-x->i) : Value::Float(-Num(x));
        return x;
      }
      case Node::Kind::kCondExpr: {
        DI_ASSIGN_OR_RETURN(ValuePtr c, Eval(*n.children[0]));
        if (Truthy(c)) return Eval(*n.children[1]);
        if (n.children.size() > 2) return Eval(*n.children[2]);
        return Value::Undefined();
      }
      case Node::Kind::kBinary: return Binary(n);
      default: return Err(n, "not an expression");
    }
  }

  StatusOr<ValuePtr> Binary(const Node& n) {
    const std::string& op = n.name;
    DI_ASSIGN_OR_RETURN(ValuePtr a, Eval(*n.children[0]));
    if (op == "and") return Truthy(a) ? Eval(*n.children[1]) : a;
    if (op == "or") return Truthy(a) ? a : Eval(*n.children[1]);
    DI_ASSIGN_OR_RETURN(ValuePtr b, Eval(*n.children[1]));
    if (op == "~") return Value::Str(Str(a) + Str(b));
    if (op == "==") return Value::Bool(Equal(a, b));
    if (op == "!=") return Value::Bool(!Equal(a, b));
    if (op == "in" || op == "not in") {
      bool in = false;
      if (b->kind == K::kString) in = b->s.find(Str(a)) != std::string::npos;
      else if (b->kind == K::kArray) in = std::any_of(b->arr.begin(), b->arr.end(), [&](const ValuePtr& x) { return Equal(a, x); });
      else if (b->kind == K::kObject) in = b->Get(Str(a)) != nullptr;
      return Value::Bool(in != (op == "not in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (IsNum(a) && IsNum(b)) c = Num(a) < Num(b) ? -1 : Num(a) > Num(b) ? 1 : 0;
      else if (a->kind == K::kString && b->kind == K::kString) c = a->s.compare(b->s);
      else return Err(n, "cannot compare " + Str(a) + " and " + Str(b));
      return Value::Bool(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (op == "+") {
      if (a->kind == K::kString || b->kind == K::kString) {
        if (a->kind != K::kString || b->kind != K::kString) return Err(n, "cannot add string and non-string");
        return Value::Str(a->s + b->s);
      }
      if (a->kind == K::kArray && b->kind == K::kArray) {
        auto v = Value::Array(a->arr);
        v->arr.insert(v->arr.end(), b->arr.begin(), b->arr.end());
        return v;
      }
    }
    if (op == "*" && a->kind == K::kString && b->kind == K::kInt) {
      std::string s;
      for (int64_t i = 0; i < b->i; ++i) s += a->s;
      return Value::Str(s);
    }
    if (!IsNum(a) || !IsNum(b)) return Err(n, "unsupported operands for '" + op + "': " + Str(a) + ", " + Str(b));
    const bool ints = a->kind == K::kInt && b->kind == K::kInt;
    if (op == "+") return ints ? Value::Int(a->i + b->i) : Value::Float(Num(a) + Num(b));
    if (op == "-") return ints ? Value::Int(a->i - b->i) : Value::Float(Num(a) - Num(b));
    if (op == "*") return ints ? Value::Int(a->i * b->i) : Value::Float(Num(a) * Num(b));
    if (op == "/") {
      if (Num(b) == 0) return Err(n, "division by zero");
      return Value::Float(Num(a) / Num(b));
    }
    if (op == "//" || op == "%") {
      if (Num(b) == 0) return Err(n, "division by zero");
      if (ints) {
        int64_t q = a->i / b->i, r = a->i % b->i;
        if (r != 0 && ((r < 0) != (b->i < 0))) {
          --q;
          r += b->i;
        }
        return Value::Int(op == "//" ? q : r);
      }
      const double q = std::floor(Num(a) / Num(b));
      return Value::Float(op == "//" ? q : Num(a) - q * Num(b));
    }
    if (op == "**") return ints && b->i >= 0 ? Value::Int(static_cast<int64_t>(std::pow(a->i, b->i))) : Value::Float(std::pow(Num(a), Num(b)));
    return Err(n, "unknown operator '" + op + "'");
  }

  StatusOr<ValuePtr> Item(const ValuePtr& o, const ValuePtr& k) {
    if (o->kind == K::kArray && k->kind == K::kInt) {
      int64_t i = k->i < 0 ? k->i + static_cast<int64_t>(o->arr.size()) : k->i;
      if (i < 0 || i >= static_cast<int64_t>(o->arr.size())) return Value::Undefined();
      return o->arr[i];
    }
    if (o->kind == K::kString && k->kind == K::kInt) {
      int64_t i = k->i < 0 ? k->i + static_cast<int64_t>(o->s.size()) : k->i;
      if (i < 0 || i >= static_cast<int64_t>(o->s.size())) return Value::Undefined();
      return Value::Str(std::string(1, o->s[i]));
    }
    if (o->kind == K::kObject) {
      auto v = o->Get(Str(k));
      return v ? v : Value::Undefined();
    }
    return Value::Undefined();
  }

  StatusOr<ValuePtr> Slice(const Node& n) {
    DI_ASSIGN_OR_RETURN(ValuePtr o, Eval(*n.children[0]));
    int64_t len = o->kind == K::kArray ? o->arr.size() : o->kind == K::kString ? o->s.size() : 0;
    auto get = [&](int idx, int64_t def) -> StatusOr<int64_t> {
      if (!n.children[idx]) return def;
      DI_ASSIGN_OR_RETURN(ValuePtr v, Eval(*n.children[idx]));
      if (v->kind == K::kNone || v->kind == K::kUndefined) return def;
      return static_cast<int64_t>(Num(v));
    };
    DI_ASSIGN_OR_RETURN(int64_t step, get(3, 1));
    if (step == 0) return Err(n, "slice step cannot be zero");
    DI_ASSIGN_OR_RETURN(int64_t start, get(1, step > 0 ? 0 : len - 1));
    DI_ASSIGN_OR_RETURN(int64_t stop, get(2, step > 0 ? len : -len - 1));
    auto norm = [&](int64_t x, bool is_stop) {
      if (x < 0) x += len;
      if (step > 0) return std::clamp<int64_t>(x, 0, len);
      return std::clamp<int64_t>(x, is_stop ? -1 : 0, len - 1);
    };
    if (!(n.children[1] == nullptr)) start = norm(start, false);
    if (!(n.children[2] == nullptr)) stop = norm(stop, true);
    else stop = step > 0 ? len : -1;
    std::vector<int64_t> idx;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
    if (o->kind == K::kString) {
      std::string s;
      for (auto i : idx) s += o->s[i];
      return Value::Str(s);
    }
    auto v = Value::Array();
    for (auto i : idx) v->arr.push_back(o->arr[i]);
    return v;
  }

  StatusOr<ValuePtr> Attr(const ValuePtr& o, const std::string& name) {
    if (o->kind == K::kObject) {
      if (auto v = o->Get(name)) return v;
      if (!o->is_namespace) {
        if (name == "items" || name == "keys" || name == "values" || name == "get") return Method(o, name);
      }
      return Value::Undefined();
    }
    if (o->kind == K::kString || o->kind == K::kArray) return Method(o, name);
    return Value::Undefined();
  }

  static std::string Strip(const std::string& s, const std::string& chars, bool left, bool right) {
    auto in = [&](char c) { return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0 : chars.find(c) != std::string::npos; };
    size_t b = 0, e = s.size();
    while (left && b < e && in(s[b])) ++b;
    while (right && e > b && in(s[e - 1])) --e;
    return s.substr(b, e - b);
  }

  static std::string Title(const std::string& s) {
    std::string o = s;
    bool start = true;
    for (auto& c : o) {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        c = start ? static_cast<char>(std::toupper(c)) : static_cast<char>(std::tolower(c));
        start = false;
      } else {
        start = true;
      }
    }
    return o;
  }

  StatusOr<ValuePtr> Method(const ValuePtr& o, const std::string& name) {
    ValuePtr self = o;
    if (o->kind == K::kString) {
      const std::string& s = o->s;
      if (name == "strip" || name == "lstrip" || name == "rstrip")
        return Value::Function([s, name](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          const std::string chars = a.empty() || a[0]->kind != K::kString ? "" : a[0]->s;
          return Value::Str(Strip(s, chars, name != "rstrip", name != "lstrip"));
        });
      if (name == "upper" || name == "lower")
        return Value::Function([s, name](const Args&, const Kwargs&) -> StatusOr<ValuePtr> {
          std::string r = s;
          for (auto& c : r) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
          return Value::Str(r);
        });
      if (name == "title") return Value::Function([s](const Args&, const Kwargs&) -> StatusOr<ValuePtr> { return Value::Str(Title(s)); });
      if (name == "capitalize")
        return Value::Function([s](const Args&, const Kwargs&) -> StatusOr<ValuePtr> {
          std::string r = s;
          for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          if (!r.empty()) r[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(r[0])));
          return Value::Str(r);
        });
      if (name == "startswith" || name == "endswith")
        return Value::Function([s, name](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          std::vector<std::string> cands;
          if (!a.empty() && a[0]->kind == K::kArray) for (auto& x : a[0]->arr) cands.push_back(Str(x));
          else if (!a.empty()) cands.push_back(Str(a[0]));
          for (auto& c : cands) {
            const bool hit = name == "startswith" ? s.compare(0, c.size(), c) == 0
                                                  : s.size() >= c.size() && s.compare(s.size() - c.size(), c.size(), c) == 0;
            if (hit) return Value::Bool(true);
          }
          return Value::Bool(false);
        });
      if (name == "split")
        return Value::Function([s](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          auto v = Value::Array();
          int64_t maxsplit = a.size() > 1 ? static_cast<int64_t>(Num(a[1])) : -1;
          if (a.empty() || a[0]->kind == K::kNone) {  // whitespace split
            size_t i = 0;
            while (i < s.size()) {
              while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
              if (i >= s.size()) break;
              if (maxsplit >= 0 && static_cast<int64_t>(v->arr.size()) == maxsplit) {
                v->arr.push_back(Value::Str(Strip(s.substr(i), "", false, true)));
                break;
              }
              size_t j = i;
              while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
              v->arr.push_back(Value::Str(s.substr(i, j - i)));
              i = j;
            }
            return v;
          }
          const std::string sep = Str(a[0]);
          if (sep.empty()) return InvalidArgument("split(): empty separator");
          size_t b = 0;
          for (;;) {
            size_t e = s.find(sep, b);
            if (e == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(v->arr.size()) == maxsplit)) {
              v->arr.push_back(Value::Str(s.substr(b)));
              break;
            }
            v->arr.push_back(Value::Str(s.substr(b, e - b)));
            b = e + sep.size();
          }
          return v;
        });
      if (name == "replace")
        return Value::Function([s](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          if (a.size() < 2) return InvalidArgument("replace() needs two arguments");
          const std::string from = Str(a[0]), to = Str(a[1]);
          int64_t count = a.size() > 2 ? static_cast<int64_t>(Num(a[2])) : -1;
          std::string r;
          size_t b = 0;
          if (from.empty()) return Value::Str(s);
          for (;;) {
            size_t e = s.find(from, b);
            if (e == std::string::npos || count == 0) {
              r += s.substr(b);
              break;
            }
            r += s.substr(b, e - b) + to;
            b = e + from.size();
            --count;
          }
          return Value::Str(r);
        });
      if (name == "find")
        return Value::Function([s](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          size_t p = a.empty() ? std::string::npos : s.find(Str(a[0]));
          return Value::Int(p == std::string::npos ? -1 : static_cast<int64_t>(p));
        });
      if (name == "length") return Value::Int(static_cast<int64_t>(s.size()));
      return Value::Undefined();
    }
    if (o->kind == K::kArray) {
      if (name == "length") return Value::Int(static_cast<int64_t>(o->arr.size()));
      if (name == "append")
        return Value::Function([self](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          if (!a.empty()) self->arr.push_back(a[0]);
          return Value::None();
        });
      return Value::Undefined();
    }
    if (o->kind == K::kObject) {
      if (name == "items")
        return Value::Function([self](const Args&, const Kwargs&) -> StatusOr<ValuePtr> {
          auto v = Value::Array();
          for (auto& [k, x] : self->obj) v->arr.push_back(Value::Array({Value::Str(k), x}));
          return v;
        });
      if (name == "keys" || name == "values")
        return Value::Function([self, name](const Args&, const Kwargs&) -> StatusOr<ValuePtr> {
          auto v = Value::Array();
          for (auto& [k, x] : self->obj) v->arr.push_back(name == "keys" ? Value::Str(k) : x);
          return v;
        });
      if (name == "get")
        return Value::Function([self](const Args& a, const Kwargs&) -> StatusOr<ValuePtr> {
          if (a.empty()) return Value::None();
          auto v = self->Get(Str(a[0]));
          return v ? v : (a.size() > 1 ? a[1] : Value::None());
        });
    }
    return Value::Undefined();
  }

  StatusOr<bool> Test(const Node& n, const ValuePtr& x, const Args& a) {
    const std::string& t = n.name;
    if (t == "defined") return x->kind != K::kUndefined;
    if (t == "undefined") return x->kind == K::kUndefined;
    if (t == "none") return x->kind == K::kNone;
    if (t == "string") return x->kind == K::kString;
    if (t == "number") return IsNum(x);
    if (t == "integer") return x->kind == K::kInt;
    if (t == "float") return x->kind == K::kFloat;
    if (t == "boolean") return x->kind == K::kBool;
    if (t == "true") return x->kind == K::kBool && x->b;
    if (t == "false") return x->kind == K::kBool && !x->b;
    if (t == "mapping") return x->kind == K::kObject;
    if (t == "sequence" || t == "iterable") return x->kind == K::kArray || x->kind == K::kString || (t == "iterable" && x->kind == K::kObject);
    if (t == "callable") return x->kind == K::kCallable;
    if (t == "odd") return x->kind == K::kInt && (x->i % 2 != 0);
    if (t == "even") return x->kind == K::kInt && (x->i % 2 == 0);
    if (t == "lower") return x->kind == K::kString && std::none_of(x->s.begin(), x->s.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
    if (t == "upper") return x->kind == K::kString && std::none_of(x->s.begin(), x->s.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)); });
    if (t == "equalto" || t == "eq" || t == "==") return !a.empty() && Equal(x, a[0]);
    if (t == "ne") return !a.empty() && !Equal(x, a[0]);
    if (t == "in") return !a.empty() && ((a[0]->kind == K::kArray && std::any_of(a[0]->arr.begin(), a[0]->arr.end(), [&](auto& y) { return Equal(x, y); })) ||
                                         (a[0]->kind == K::kString && a[0]->s.find(Str(x)) != std::string::npos) ||
                                         (a[0]->kind == K::kObject && a[0]->Get(Str(x))));
    return Err(n, "unknown test '" + t + "'");
  }

  StatusOr<ValuePtr> ApplyFilter(const Node& n, const std::string& f, const ValuePtr& x, const Args& a, const Kwargs& kw) {
    auto kwarg = [&](const std::string& k) -> ValuePtr {
      for (auto& [name, v] : kw)
        if (name == k) return v;
      return nullptr;
    };
    if (f == "length" || f == "count") {
      if (x->kind == K::kString) {
        int64_t chars = 0;
        for (unsigned char c : x->s) chars += (c & 0xC0) != 0x80;
        return Value::Int(chars);
      }
      return Value::Int(static_cast<int64_t>(x->kind == K::kArray ? x->arr.size() : x->obj.size()));
    }
    if (f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
      DI_ASSIGN_OR_RETURN(ValuePtr m, Method(Value::Str(Str(x)), f));
      return m->fn({}, {});
    }
    if (f == "trim") {
      const std::string chars = a.empty() ? "" : Str(a[0]);
      return Value::Str(Strip(Str(x), chars, true, true));
    }
    if (f == "string") return Value::Str(Str(x));
    if (f == "safe" || f == "e" || f == "escape") return x;
    if (f == "int") {
      if (x->kind == K::kString) return Value::Int(std::atoll(x->s.c_str()));
      return Value::Int(static_cast<int64_t>(Num(x)));
    }
    if (f == "float") return Value::Float(x->kind == K::kString ? std::atof(x->s.c_str()) : Num(x));
    if (f == "abs") return x->kind == K::kInt ? Value::Int(std::llabs(x->i)) : Value::Float(std::fabs(Num(x)));
    if (f == "default" || f == "d") {
      const bool boolean = (a.size() > 1 && Truthy(a[1])) || (kwarg("boolean") && Truthy(kwarg("boolean")));
      if (x->kind == K::kUndefined || (boolean && !Truthy(x))) return a.empty() ? Value::Str("") : a[0];
      return x;
    }
    if (f == "first") return x->kind == K::kArray ? (x->arr.empty() ? Value::Undefined() : x->arr.front())
                                                  : x->kind == K::kString && !x->s.empty() ? Value::Str(x->s.substr(0, 1)) : Value::Undefined();
    if (f == "last") return x->kind == K::kArray ? (x->arr.empty() ? Value::Undefined() : x->arr.back())
                                                 : x->kind == K::kString && !x->s.empty() ? Value::Str(x->s.substr(x->s.size() - 1)) : Value::Undefined();
    if (f == "join") {
      const std::string sep = a.empty() ? "" : Str(a[0]);
      std::string r;
      if (x->kind != K::kArray) return Value::Str(Str(x));
      for (size_t i = 0; i < x->arr.size(); ++i) r += (i ? sep : "") + Str(x->arr[i]);
      return Value::Str(r);
    }
    if (f == "list") {
      if (x->kind == K::kArray) return Value::Array(x->arr);
      auto v = Value::Array();
      if (x->kind == K::kString) for (char c : x->s) v->arr.push_back(Value::Str(std::string(1, c)));
      if (x->kind == K::kObject) for (auto& [k, y] : x->obj) v->arr.push_back(Value::Str(k));
      return v;
    }
    if (f == "reverse") {
      if (x->kind == K::kString) return Value::Str(std::string(x->s.rbegin(), x->s.rend()));
      auto v = Value::Array(x->arr);
      std::reverse(v->arr.begin(), v->arr.end());
      return v;
    }
    if (f == "items") {
      DI_ASSIGN_OR_RETURN(ValuePtr m, Method(x, "items"));
      if (m->kind != K::kCallable) return Value::Array();
      return m->fn({}, {});
    }
    if (f == "tojson") {
      ValuePtr ind = kwarg("indent");
      if (!ind && !a.empty()) ind = a[0];
      return Value::Str(ToJson(x, ind && IsNum(ind) ? static_cast<int>(Num(ind)) : 0, 0, true));
    }
    if (f == "replace") {
      DI_ASSIGN_OR_RETURN(ValuePtr m, Method(Value::Str(Str(x)), "replace"));
      return m->fn(a, kw);
    }
    if (f == "indent") {
      const int width = a.empty() ? 4 : static_cast<int>(Num(a[0]));
      const bool first = (a.size() > 1 && Truthy(a[1])) || (kwarg("first") && Truthy(kwarg("first")));
      const std::string pad(width, ' '), s = Str(x);
      std::string r;
      size_t b = 0;
      bool is_first = true;
      while (b <= s.size()) {
        size_t e = s.find('\n', b);
        std::string line = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if ((!is_first || first) && !line.empty()) r += pad;
        r += line;
        if (e == std::string::npos) break;
        r += '\n';
        b = e + 1;
        is_first = false;
      }
      return Value::Str(r);
    }
    if ((f == "selectattr" || f == "rejectattr" || f == "map") && x->kind != K::kArray && x->kind != K::kUndefined)
      return Err(n, "cannot apply filter '" + f + "' to " + (x->kind == K::kNone ? std::string("none") : Str(x)));
    if (f == "selectattr" || f == "rejectattr") {
      if (a.empty()) return Err(n, f + " needs an attribute name");
      auto v = Value::Array();
      for (auto& item : x->arr) {
        DI_ASSIGN_OR_RETURN(ValuePtr val, Attr(item, Str(a[0])));
        bool keep;
        if (a.size() > 1) {
          Node t = n;
          t.name = Str(a[1]);
          Args targs(a.begin() + 2, a.end());
          DI_ASSIGN_OR_RETURN(keep, Test(t, val, targs));
        } else {
          keep = Truthy(val);
        }
        if (keep == (f == "selectattr")) v->arr.push_back(item);
      }
      return v;
    }
    if (f == "map") {
      auto v = Value::Array();
      ValuePtr attr = kwarg("attribute");
      for (auto& item : x->arr) {
        if (attr) {
          DI_ASSIGN_OR_RETURN(ValuePtr val, Attr(item, Str(attr)));
          v->arr.push_back(val);
        } else if (!a.empty()) {
          DI_ASSIGN_OR_RETURN(ValuePtr val, ApplyFilter(n, Str(a[0]), item, Args(a.begin() + 1, a.end()), {}));
          v->arr.push_back(val);
        }
      }
      return v;
    }
    if (f == "dictsort") {  // (key, value) pairs sorted by key
      auto v = Value::Array();
      std::vector<std::pair<std::string, ValuePtr>> items(x->obj.begin(), x->obj.end());
      std::stable_sort(items.begin(), items.end(), [](auto& l, auto& r) { return l.first < r.first; });
      for (auto& [k, y] : items) v->arr.push_back(Value::Array({Value::Str(k), y}));
      return v;
    }
    if (f == "unique") {
      auto v = Value::Array();
      for (auto& item : x->arr)
        if (std::none_of(v->arr.begin(), v->arr.end(), [&](auto& y) { return Equal(item, y); })) v->arr.push_back(item);
      return v;
    }
    if (f == "round") {
      const int prec = a.empty() ? 0 : static_cast<int>(Num(a[0]));
      const double m = std::pow(10.0, prec);
      return Value::Float(std::round(Num(x) * m) / m);
    }
    if (f == "wordcount") {
      int64_t words = 0;
      bool in = false;
      for (char c : Str(x)) {
        const bool w = !std::isspace(static_cast<unsigned char>(c));
        words += w && !in;
        in = w;
      }
      return Value::Int(words);
    }
    return Err(n, "unknown filter '" + f + "'");
  }

  std::vector<Scope> scopes_;
  int loop_signal_ = 0;  // 1 break, 2 continue
};

}  // namespace

ValuePtr FromJson(const std::string& text, Status* error) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    *error = InvalidArgument("template context is not valid JSON");
    return nullptr;
  }
  return FromJsonValue(j);
}

StatusOr<std::string> Evaluate(const Node& root, const ValuePtr& context) {
  Interp in(context);
  std::string out;
  DI_RETURN_IF_ERROR(in.Run(root, &out));
  return out;
}

Template::~Template() = default;

StatusOr<std::unique_ptr<Template>> Template::Parse(const std::string& source) {
  DI_ASSIGN_OR_RETURN(NodePtr root, ParseTemplate(source));
  auto t = std::unique_ptr<Template>(new Template());
  t->root_ = std::move(root);
  return t;
}

StatusOr<std::string> Template::Render(const std::string& context_json) const {
  Status err;
  ValuePtr ctx = FromJson(context_json, &err);
  if (!ctx) return err;
  if (ctx->kind != K::kObject) return InvalidArgument("template context must be a JSON object");
  return Evaluate(*root_, ctx);
}

}  // namespace deepinfer::jinja
