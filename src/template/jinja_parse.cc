// Jinja lexer and recursive-descent parser. Whitespace handling follows transformers' environment:
// trim_blocks and lstrip_blocks on, plus the explicit `-` markers.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "template/jinja_ast.h"

namespace deepinfer::jinja {
namespace {

struct Segment {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
  int line;
};

bool IsSpaceTab(char c) { return c == ' ' || c == '\t'; }

// Splits the source into text / {{ expr }} / {% stmt %} segments, applying whitespace control.
StatusOr<std::vector<Segment>> Segments(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;  // previous tag ended with '-'
  bool trim_newline = false;  // previous tag was a block/comment (trim_blocks)
  auto count_lines = [](const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (trim_newline) {
      if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
      else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
    }
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    }
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::kText, text, line});
      break;
    }
    const char type = src[open + 1];
    const bool minus_left = open + 2 < src.size() && src[open + 2] == '-';
    const char* close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    // The closing delimiter may also appear inside a string literal of the tag ('{{"a": 1}}'): skip quoted text.
    size_t end = std::string::npos;
    if (type == '#') {
      end = src.find(close, open + 2);
    } else {
      char quote = 0;
      for (size_t k = open + 2; k + 1 < src.size(); ++k) {
        const char c = src[k];
        if (quote) {
          if (c == '\\') ++k;
          else if (c == quote) quote = 0;
        } else if (c == '\'' || c == '"') {
          quote = c;
        } else if (c == close[0] && src[k + 1] == close[1]) {
          end = k;
          break;
        }
      }
    }
    if (end == std::string::npos)
      return InvalidArgument("template line " + std::to_string(line + count_lines(text)) + ": unclosed '{" + std::string(1, type) + "'");
    const bool minus_right = end > open + 2 && src[end - 1] == '-';
    if (minus_left) {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    } else if (type != '{') {  // lstrip_blocks: a block tag alone on its line takes the indentation with it
      size_t ls = open == 0 ? std::string::npos : src.rfind('\n', open - 1);
      ls = ls == std::string::npos ? 0 : ls + 1;
      bool only_ws = true;
      for (size_t k = ls; k < open && only_ws; ++k) only_ws = IsSpaceTab(src[k]);
      if (only_ws)
        while (!text.empty() && IsSpaceTab(text.back())) text.pop_back();
    }
    if (!text.empty()) out.push_back({Segment::kText, text, line});
    line += count_lines(src.substr(pos, open - pos));
    size_t inner_b = open + 2 + (minus_left ? 1 : 0), inner_e = end - (minus_right ? 1 : 0);
    std::string inner = inner_e > inner_b ? src.substr(inner_b, inner_e - inner_b) : "";
    pos = end + 2;
    strip_next = minus_right;
    trim_newline = type != '{' && !minus_right;
    if (type == '#') {
      line += count_lines(inner);
      continue;
    }
    // {% raw %} ... {% endraw %} is copied verbatim.
    std::string trimmed = inner;
    while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.front()))) trimmed.erase(0, 1);
    while (!trimmed.empty() && std::isspace(static_cast<unsigned char>(trimmed.back()))) trimmed.pop_back();
    if (type == '%' && trimmed == "raw") {
      size_t e = src.find("endraw", pos);
      size_t tag = e == std::string::npos ? e : src.rfind("{%", e);
      if (tag == std::string::npos) return InvalidArgument("template line " + std::to_string(line) + ": raw block without endraw");
      std::string raw = src.substr(pos, tag - pos);
      if (src[tag + 2] == '-')
        while (!raw.empty() && std::isspace(static_cast<unsigned char>(raw.back()))) raw.pop_back();
      out.push_back({Segment::kText, raw, line});
      size_t close2 = src.find("%}", e);
      if (close2 == std::string::npos) return InvalidArgument("template: unclosed endraw");
      strip_next = src[close2 - 1] == '-';
      trim_newline = !strip_next;
      pos = close2 + 2;
      continue;
    }
    out.push_back({type == '{' ? Segment::kExpr : Segment::kStmt, inner, line});
    line += count_lines(inner);
  }
  return out;
}

// ------------------------------------------------------------------------------------------------ tokens

struct Tok {
  enum Kind { kName, kInt, kFloat, kString, kOp, kEnd } kind;
  std::string s;
  int64_t i = 0;
  double f = 0;
};

StatusOr<std::vector<Tok>> Lex(const std::string& s, int line) {
  std::vector<Tok> out;
  size_t p = 0;
  auto err = [&](const std::string& m) { return InvalidArgument("template line " + std::to_string(line) + ": " + m); };
  while (p < s.size()) {
    const char c = s[p];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++p;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = p;
      while (p < s.size() && (std::isalnum(static_cast<unsigned char>(s[p])) || s[p] == '_')) ++p;
      out.push_back({Tok::kName, s.substr(b, p - b)});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = p;
      while (p < s.size() && (std::isdigit(static_cast<unsigned char>(s[p])) || s[p] == '_')) ++p;
      bool is_float = false;
      if (p + 1 < s.size() && s[p] == '.' && std::isdigit(static_cast<unsigned char>(s[p + 1]))) {
        is_float = true;
        ++p;
        while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) ++p;
      }
      std::string num = s.substr(b, p - b);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      Tok t{is_float ? Tok::kFloat : Tok::kInt, num};
      if (is_float) t.f = std::stod(num);
      else t.i = std::stoll(num);
      out.push_back(t);
    } else if (c == '\'' || c == '"') {
      std::string v;
      ++p;
      while (p < s.size() && s[p] != c) {
        if (s[p] == '\\' && p + 1 < s.size()) {
          const char e = s[++p];
          switch (e) {
            case 'n': v += '\n'; break;
            case 't': v += '\t'; break;
            case 'r': v += '\r'; break;
            case '\\': v += '\\'; break;
            case '\'': v += '\''; break;
            case '"': v += '"'; break;
            default: v += '\\'; v += e; break;
          }
          ++p;
        } else {
          v += s[p++];
        }
      }
      if (p >= s.size()) return err("unterminated string");
      ++p;
      out.push_back({Tok::kString, v});
    } else {
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|", "~",
                                   "+", "-", "*", "/", "%", "<", ">", "=", "!"};
      bool found = false;
      for (const char* op : kOps)
        if (s.compare(p, std::strlen(op), op) == 0) {
          out.push_back({Tok::kOp, op});
          p += std::strlen(op);
          found = true;
          break;
        }
      if (!found) return err(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

// ------------------------------------------------------------------------------------------------ parser

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, int line) : t_(std::move(toks)), line_(line) {}

  StatusOr<NodePtr> Expression() { return CondExpr(); }
  bool AtEnd() const { return t_[p_].kind == Tok::kEnd; }
  bool PeekName(const char* n) const { return t_[p_].kind == Tok::kName && t_[p_].s == n; }
  bool PeekOp(const char* o) const { return t_[p_].kind == Tok::kOp && t_[p_].s == o; }
  bool AcceptName(const char* n) {
    if (!PeekName(n)) return false;
    ++p_;
    return true;
  }
  bool AcceptOp(const char* o) {
    if (!PeekOp(o)) return false;
    ++p_;
    return true;
  }
  StatusOr<std::string> Name() {
    if (t_[p_].kind != Tok::kName) return Err("expected a name, got '" + t_[p_].s + "'");
    return t_[p_++].s;
  }
  Status ExpectOp(const char* o) { return AcceptOp(o) ? Status::Ok() : Err(std::string("expected '") + o + "', got '" + t_[p_].s + "'"); }
  Status Err(const std::string& m) const { return InvalidArgument("template line " + std::to_string(line_) + ": " + m); }
  int line() const { return line_; }

  NodePtr Make(Node::Kind k) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->line = line_;
    return n;
  }

  // Primary expression without the conditional part (used for `for` targets' iterable and filters' arguments).
  StatusOr<NodePtr> OrExpr() {
    DI_ASSIGN_OR_RETURN(NodePtr l, AndExpr());
    while (AcceptName("or")) {
      DI_ASSIGN_OR_RETURN(NodePtr r, AndExpr());
      l = Bin("or", l, r);
    }
    return l;
  }

 private:
  NodePtr Bin(const std::string& op, NodePtr l, NodePtr r) {
    auto n = Make(Node::Kind::kBinary);
    n->name = op;
    n->children = {std::move(l), std::move(r)};
    return n;
  }

  StatusOr<NodePtr> CondExpr() {
    DI_ASSIGN_OR_RETURN(NodePtr body, OrExpr());
    if (!AcceptName("if")) return body;
    DI_ASSIGN_OR_RETURN(NodePtr cond, OrExpr());
    auto n = Make(Node::Kind::kCondExpr);
    n->children = {cond, body};
    if (AcceptName("else")) {
      DI_ASSIGN_OR_RETURN(NodePtr other, CondExpr());
      n->children.push_back(other);
    }
    return n;
  }
  StatusOr<NodePtr> AndExpr() {
    DI_ASSIGN_OR_RETURN(NodePtr l, NotExpr());
    while (AcceptName("and")) {
      DI_ASSIGN_OR_RETURN(NodePtr r, NotExpr());
      l = Bin("and", l, r);
    }
    return l;
  }
  StatusOr<NodePtr> NotExpr() {
    if (AcceptName("not")) {
      DI_ASSIGN_OR_RETURN(NodePtr e, NotExpr());
      auto n = Make(Node::Kind::kUnary);
      n->name = "not";
      n->children = {e};
      return n;
    }
    return Compare();
  }
  StatusOr<NodePtr> Compare() {
    DI_ASSIGN_OR_RETURN(NodePtr l, Math1());
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
        if (AcceptOp(o)) {
          op = o;
          break;
        }
      if (op.empty() && AcceptName("in")) op = "in";
      if (op.empty() && PeekName("not") && t_[p_ + 1].kind == Tok::kName && t_[p_ + 1].s == "in") {
        p_ += 2;
        op = "not in";
      }
      if (op.empty() && AcceptName("is")) {
        auto n = Make(Node::Kind::kTest);
        n->negated = AcceptName("not");
        DI_ASSIGN_OR_RETURN(n->name, Name());
        n->children = {l};
        if (PeekOp("(")) {
          DI_RETURN_IF_ERROR(CallArgs(n.get()));
        } else if (t_[p_].kind == Tok::kString || t_[p_].kind == Tok::kInt || t_[p_].kind == Tok::kFloat ||
                   (t_[p_].kind == Tok::kName && !PeekName("and") && !PeekName("or") && !PeekName("else") && !PeekName("if"))) {
          DI_ASSIGN_OR_RETURN(NodePtr arg, Primary());
          n->children.push_back(arg);
        }
        l = n;
        continue;
      }
      if (op.empty()) return l;
      DI_ASSIGN_OR_RETURN(NodePtr r, Math1());
      l = Bin(op, l, r);
    }
  }
  StatusOr<NodePtr> Math1() {
    DI_ASSIGN_OR_RETURN(NodePtr l, Concat());
    for (;;) {
      if (AcceptOp("+")) {
        DI_ASSIGN_OR_RETURN(NodePtr r, Concat());
        l = Bin("+", l, r);
      } else if (AcceptOp("-")) {
        DI_ASSIGN_OR_RETURN(NodePtr r, Concat());
        l = Bin("-", l, r);
      } else {
        return l;
      }
    }
  }
  StatusOr<NodePtr> Concat() {
    DI_ASSIGN_OR_RETURN(NodePtr l, Math2());
    while (AcceptOp("~")) {
      DI_ASSIGN_OR_RETURN(NodePtr r, Math2());
      l = Bin("~", l, r);
    }
    return l;
  }
  StatusOr<NodePtr> Math2() {
    DI_ASSIGN_OR_RETURN(NodePtr l, Pow());
    for (;;) {
      std::string op;
      for (const char* o : {"//", "*", "/", "%"})
        if (AcceptOp(o)) {
          op = o;
          break;
        }
      if (op.empty()) return l;
      DI_ASSIGN_OR_RETURN(NodePtr r, Pow());
      l = Bin(op, l, r);
    }
  }
  StatusOr<NodePtr> Pow() {
    DI_ASSIGN_OR_RETURN(NodePtr l, Unary());
    while (AcceptOp("**")) {
      DI_ASSIGN_OR_RETURN(NodePtr r, Unary());
      l = Bin("**", l, r);
    }
    return l;
  }
  StatusOr<NodePtr> Unary() {
    if (AcceptOp("-") || AcceptOp("+")) {
      const std::string op = t_[p_ - 1].s;
      DI_ASSIGN_OR_RETURN(NodePtr e, Unary());
      auto n = Make(Node::Kind::kUnary);
      n->name = op;
      n->children = {e};
      return n;
    }
    DI_ASSIGN_OR_RETURN(NodePtr e, Primary());
    return Postfix(e);
  }
  Status CallArgs(Node* n) {
    DI_RETURN_IF_ERROR(ExpectOp("("));
    while (!AcceptOp(")")) {
      if (t_[p_].kind == Tok::kName && t_[p_ + 1].kind == Tok::kOp && t_[p_ + 1].s == "=") {
        std::string k = t_[p_].s;
        p_ += 2;
        DI_ASSIGN_OR_RETURN(NodePtr v, CondExpr());
        n->kwargs.emplace_back(k, v);
      } else {
        DI_ASSIGN_OR_RETURN(NodePtr v, CondExpr());
        n->children.push_back(v);
      }
      if (!AcceptOp(",")) {
        DI_RETURN_IF_ERROR(ExpectOp(")"));
        break;
      }
    }
    return Status::Ok();
  }
  StatusOr<NodePtr> Postfix(NodePtr e) {
    for (;;) {
      if (AcceptOp(".")) {
        auto n = Make(Node::Kind::kGetAttr);
        if (t_[p_].kind == Tok::kInt) {  // x.0
          n->kind = Node::Kind::kGetItem;
          auto lit = Make(Node::Kind::kLiteral);
          lit->literal = Value::Int(t_[p_++].i);
          n->children = {e, lit};
        } else {
          DI_ASSIGN_OR_RETURN(n->name, Name());
          n->children = {e};
        }
        e = n;
      } else if (AcceptOp("[")) {
        // index or slice a[b], a[b:c], a[::d]
        NodePtr parts[3];
        int colons = 0;
        for (;;) {
          if (PeekOp(":")) {
            ++p_;
            ++colons;
            continue;
          }
          if (PeekOp("]")) break;
          DI_ASSIGN_OR_RETURN(parts[colons], CondExpr());
        }
        DI_RETURN_IF_ERROR(ExpectOp("]"));
        if (colons == 0) {
          auto n = Make(Node::Kind::kGetItem);
          n->children = {e, parts[0]};
          e = n;
        } else {
          auto n = Make(Node::Kind::kSlice);
          n->children = {e, parts[0], parts[1], parts[2]};
          e = n;
        }
      } else if (PeekOp("(")) {
        auto n = Make(Node::Kind::kCall);
        n->children = {e};
        DI_RETURN_IF_ERROR(CallArgs(n.get()));
        e = n;
      } else if (AcceptOp("|")) {
        auto n = Make(Node::Kind::kFilter);
        DI_ASSIGN_OR_RETURN(n->name, Name());
        n->children = {e};
        if (PeekOp("(")) DI_RETURN_IF_ERROR(CallArgs(n.get()));
        e = n;
      } else {
        return e;
      }
    }
  }
  StatusOr<NodePtr> Primary() {
    const Tok& t = t_[p_];
    if (t.kind == Tok::kString || t.kind == Tok::kInt || t.kind == Tok::kFloat) {
      ++p_;
      auto n = Make(Node::Kind::kLiteral);
      if (t.kind == Tok::kString) {
        std::string s = t.s;
        while (t_[p_].kind == Tok::kString) s += t_[p_++].s;  // adjacent literals concatenate
        n->literal = Value::Str(s);
      } else {
        n->literal = t.kind == Tok::kInt ? Value::Int(t.i) : Value::Float(t.f);
      }
      return n;
    }
    if (t.kind == Tok::kName) {
      ++p_;
      auto n = Make(Node::Kind::kLiteral);
      if (t.s == "true" || t.s == "True") n->literal = Value::Bool(true);
      else if (t.s == "false" || t.s == "False") n->literal = Value::Bool(false);
      else if (t.s == "none" || t.s == "None") n->literal = Value::None();
      else {
        n->kind = Node::Kind::kName;
        n->name = t.s;
      }
      return n;
    }
    if (AcceptOp("(")) {
      DI_ASSIGN_OR_RETURN(NodePtr e, CondExpr());
      if (AcceptOp(",")) {  // tuple -> list
        auto n = Make(Node::Kind::kList);
        n->children.push_back(e);
        while (!AcceptOp(")")) {
          DI_ASSIGN_OR_RETURN(NodePtr x, CondExpr());
          n->children.push_back(x);
          if (!AcceptOp(",")) {
            DI_RETURN_IF_ERROR(ExpectOp(")"));
            break;
          }
        }
        return n;
      }
      DI_RETURN_IF_ERROR(ExpectOp(")"));
      return e;
    }
    if (AcceptOp("[")) {
      auto n = Make(Node::Kind::kList);
      while (!AcceptOp("]")) {
        DI_ASSIGN_OR_RETURN(NodePtr x, CondExpr());
        n->children.push_back(x);
        if (!AcceptOp(",")) {
          DI_RETURN_IF_ERROR(ExpectOp("]"));
          break;
        }
      }
      return n;
    }
    if (AcceptOp("{")) {
      auto n = Make(Node::Kind::kDict);
      while (!AcceptOp("}")) {
        DI_ASSIGN_OR_RETURN(NodePtr k, CondExpr());
        DI_RETURN_IF_ERROR(ExpectOp(":"));
        DI_ASSIGN_OR_RETURN(NodePtr v, CondExpr());
        n->children.push_back(k);
        n->children.push_back(v);
        if (!AcceptOp(",")) {
          DI_RETURN_IF_ERROR(ExpectOp("}"));
          break;
        }
      }
      return n;
    }
    return Err("unexpected '" + t.s + "' in expression");
  }

  std::vector<Tok> t_;
  size_t p_ = 0;
  int line_;
};

}  // namespace

StatusOr<NodePtr> ParseTemplate(const std::string& source) {
  DI_ASSIGN_OR_RETURN(std::vector<Segment> segs, Segments(source));
  auto root = std::make_shared<Node>();
  root->kind = Node::Kind::kRoot;
  // Open blocks: the node and which body new statements go to.
  struct Frame {
    NodePtr node;
    std::vector<NodePtr>* body;
    std::string end;  // the closing keyword
  };
  std::vector<Frame> stack = {{root, &root->body, ""}};
  for (const Segment& seg : segs) {
    auto& body = *stack.back().body;
    if (seg.kind == Segment::kText) {
      auto n = std::make_shared<Node>();
      n->kind = Node::Kind::kText;
      n->literal = Value::Str(seg.text);
      body.push_back(n);
      continue;
    }
    DI_ASSIGN_OR_RETURN(std::vector<Tok> toks, Lex(seg.text, seg.line));
    ExprParser p(std::move(toks), seg.line);
    if (seg.kind == Segment::kExpr) {
      auto n = p.Make(Node::Kind::kOutput);
      DI_ASSIGN_OR_RETURN(NodePtr e, p.Expression());
      if (!p.AtEnd()) return p.Err("unexpected tokens after expression");
      n->children = {e};
      body.push_back(n);
      continue;
    }
    DI_ASSIGN_OR_RETURN(std::string kw, p.Name());
    auto close = [&](const std::string& want) -> Status {
      if (stack.size() < 2 || stack.back().end != want) return p.Err("unexpected '" + kw + "'");
      stack.pop_back();
      return Status::Ok();
    };
    if (kw == "if") {
      auto n = p.Make(Node::Kind::kIf);
      DI_ASSIGN_OR_RETURN(NodePtr c, p.Expression());
      n->branches.push_back({c, {}});
      body.push_back(n);
      stack.push_back({n, &n->branches.back().second, "endif"});
    } else if (kw == "elif") {
      if (stack.back().end != "endif") return p.Err("elif outside if");
      NodePtr n = stack.back().node;
      DI_ASSIGN_OR_RETURN(NodePtr c, p.Expression());
      n->branches.push_back({c, {}});
      stack.back().body = &n->branches.back().second;
    } else if (kw == "else") {
      const std::string& e = stack.back().end;
      if (e != "endif" && e != "endfor") return p.Err("else outside if/for");
      stack.back().body = &stack.back().node->else_body;
    } else if (kw == "endif" || kw == "endfor" || kw == "endmacro" || kw == "endset" || kw == "endcall" || kw == "endfilter" ||
               kw == "endgeneration") {
      DI_RETURN_IF_ERROR(close(kw));
    } else if (kw == "for") {
      auto n = p.Make(Node::Kind::kFor);
      do {
        DI_ASSIGN_OR_RETURN(std::string t, p.Name());
        n->targets.push_back(t);
      } while (p.AcceptOp(","));
      if (!p.AcceptName("in")) return p.Err("expected 'in' in for loop");
      DI_ASSIGN_OR_RETURN(NodePtr iter, p.OrExpr());
      n->children = {iter};
      if (p.AcceptName("if")) {
        DI_ASSIGN_OR_RETURN(NodePtr cond, p.OrExpr());
        n->children.push_back(cond);
      }
      p.AcceptName("recursive");
      body.push_back(n);
      stack.push_back({n, &n->body, "endfor"});
    } else if (kw == "set") {
      DI_ASSIGN_OR_RETURN(std::string target, p.Name());
      std::string attr;
      if (p.AcceptOp(".")) {
        DI_ASSIGN_OR_RETURN(attr, p.Name());
      }
      std::vector<std::string> more;
      while (p.AcceptOp(",")) {
        DI_ASSIGN_OR_RETURN(std::string t, p.Name());
        more.push_back(t);
      }
      if (p.AcceptOp("=")) {
        auto n = p.Make(Node::Kind::kSet);
        n->name = target;
        n->targets = more;
        if (!attr.empty()) n->targets = {"." + attr};
        DI_ASSIGN_OR_RETURN(NodePtr v, p.Expression());
        n->children = {v};
        body.push_back(n);
      } else {
        auto n = p.Make(Node::Kind::kSetBlock);
        n->name = target;
        body.push_back(n);
        stack.push_back({n, &n->body, "endset"});
      }
    } else if (kw == "macro") {
      auto n = p.Make(Node::Kind::kMacro);
      DI_ASSIGN_OR_RETURN(n->name, p.Name());
      DI_RETURN_IF_ERROR(p.ExpectOp("("));
      while (!p.AcceptOp(")")) {
        DI_ASSIGN_OR_RETURN(std::string a, p.Name());
        n->targets.push_back(a);
        NodePtr def;
        if (p.AcceptOp("=")) {
          DI_ASSIGN_OR_RETURN(def, p.Expression());
        }
        n->defaults.push_back(def);
        if (!p.AcceptOp(",")) {
          DI_RETURN_IF_ERROR(p.ExpectOp(")"));
          break;
        }
      }
      body.push_back(n);
      stack.push_back({n, &n->body, "endmacro"});
    } else if (kw == "break" || kw == "continue") {
      body.push_back(p.Make(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue));
    } else if (kw == "generation") {
      // {% generation %} marks assistant text for training masks; it renders its body unchanged.
      auto n = p.Make(Node::Kind::kIf);
      auto t = p.Make(Node::Kind::kLiteral);
      t->literal = Value::Bool(true);
      n->branches.push_back({t, {}});
      body.push_back(n);
      stack.push_back({n, &n->branches.back().second, "endgeneration"});
    } else if (kw == "filter") {
      auto n = p.Make(Node::Kind::kCallBlock);
      DI_ASSIGN_OR_RETURN(n->name, p.Name());
      body.push_back(n);
      stack.push_back({n, &n->body, "endfilter"});
    } else {
      return p.Err("unsupported statement '" + kw + "'");
    }
    if (!p.AtEnd() && kw != "set" && kw != "macro") return p.Err("unexpected tokens after '" + kw + "'");
  }
  if (stack.size() > 1) return InvalidArgument("template: missing '" + stack.back().end + "' (block opened on line " +
                                               std::to_string(stack.back().node->line) + ")");
  return root;
}

}  // namespace deepinfer::jinja
