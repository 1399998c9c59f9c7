// Values and syntax tree of the Jinja engine (internal to src/template).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::jinja {

struct Value;
using ValuePtr = std::shared_ptr<Value>;
using Args = std::vector<ValuePtr>;
using Kwargs = std::vector<std::pair<std::string, ValuePtr>>;
using Callable = std::function<StatusOr<ValuePtr>(const Args&, const Kwargs&)>;

// A dynamically typed value. Arrays and objects are shared (reference semantics, as in Python/JS); objects keep
// insertion order, which tojson and items() expose.
struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<ValuePtr> arr;
  std::vector<std::pair<std::string, ValuePtr>> obj;
  Callable fn;
  bool is_namespace = false;

  static ValuePtr Undefined() { return std::make_shared<Value>(); }
  static ValuePtr None() { auto v = std::make_shared<Value>(); v->kind = Kind::kNone; return v; }
  static ValuePtr Bool(bool x) { auto v = std::make_shared<Value>(); v->kind = Kind::kBool; v->b = x; return v; }
  static ValuePtr Int(int64_t x) { auto v = std::make_shared<Value>(); v->kind = Kind::kInt; v->i = x; return v; }
  static ValuePtr Float(double x) { auto v = std::make_shared<Value>(); v->kind = Kind::kFloat; v->f = x; return v; }
  static ValuePtr Str(std::string x) { auto v = std::make_shared<Value>(); v->kind = Kind::kString; v->s = std::move(x); return v; }
  static ValuePtr Array(std::vector<ValuePtr> a = {}) { auto v = std::make_shared<Value>(); v->kind = Kind::kArray; v->arr = std::move(a); return v; }
  static ValuePtr Object() { auto v = std::make_shared<Value>(); v->kind = Kind::kObject; return v; }
  static ValuePtr Function(Callable c) { auto v = std::make_shared<Value>(); v->kind = Kind::kCallable; v->fn = std::move(c); return v; }

  ValuePtr Get(const std::string& key) const {
    for (auto& [k, v] : obj)
      if (k == key) return v;
    return nullptr;
  }
  void Set(const std::string& key, ValuePtr v) {
    for (auto& kv : obj)
      if (kv.first == key) {
        kv.second = std::move(v);
        return;
      }
    obj.emplace_back(key, std::move(v));
  }
};

// Syntax tree. Expressions and statements share one node type with a kind tag.
struct Node {
  enum class Kind {
    // expressions
    kLiteral, kName, kList, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest, kUnary, kBinary, kCondExpr,
    // statements
    kRoot, kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kCallBlock,
  };
  Kind kind;
  int line = 0;
  std::string name;                    // identifier, attribute, operator, filter/test name, set target
  ValuePtr literal;                    // kLiteral
  std::vector<std::shared_ptr<Node>> children;  // operands / list items / dict keys+values / call args
  std::vector<std::pair<std::string, std::shared_ptr<Node>>> kwargs;
  std::vector<std::string> targets;    // for-loop targets, macro parameter names
  std::vector<std::shared_ptr<Node>> defaults;  // macro parameter defaults (null when none)
  std::vector<std::shared_ptr<Node>> body, else_body;  // statement bodies
  std::vector<std::pair<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>>> branches;  // if/elif
  bool negated = false;                // `is not`, `not in`
};
using NodePtr = std::shared_ptr<Node>;

StatusOr<NodePtr> ParseTemplate(const std::string& source);
StatusOr<std::string> Evaluate(const Node& root, const ValuePtr& context);
ValuePtr FromJson(const std::string& json_text, Status* error);

}  // namespace deepinfer::jinja
