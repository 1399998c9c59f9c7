// The Jinja engine's own behaviour: clear syntax errors, raise_exception surfacing, and core semantics checked
// against values worked out by hand (the byte-level comparison with @huggingface/jinja is tests/parity).
#include <gtest/gtest.h>

#include "template/jinja.h"

namespace deepinfer::jinja {
namespace {

std::string Render(const std::string& src, const std::string& ctx = "{}") {
  auto t = Template::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "<parse error>";
  auto r = (*t)->Render(ctx);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "<render error>";
}

std::string ParseError(const std::string& src) {
  auto t = Template::Parse(src);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.status().message();
}

TEST(JinjaTest, SyntaxErrorsNameTheLineAndProblem) {
  EXPECT_NE(ParseError("a\nb {{ x ").find("line 2: unclosed '{{'"), std::string::npos);
  EXPECT_NE(ParseError("{% if x %}\nno end").find("missing 'endif'"), std::string::npos);
  EXPECT_NE(ParseError("{% endfor %}").find("unexpected 'endfor'"), std::string::npos);
  EXPECT_NE(ParseError("{% frobnicate %}").find("unsupported statement 'frobnicate'"), std::string::npos);
  EXPECT_NE(ParseError("{{ 'abc }}").find("unclosed '{{'"), std::string::npos);  // the open quote swallows the close
  EXPECT_NE(ParseError("{{ x | }}").find("expected a name"), std::string::npos);
  EXPECT_NE(ParseError("{{ a + }}").find("unexpected"), std::string::npos);
}

TEST(JinjaTest, RaiseExceptionBecomesAnError) {
  auto t = Template::Parse("{% if messages|length == 0 %}{{ raise_exception('Conversation is empty') }}{% endif %}ok");
  ASSERT_TRUE(t.ok());
  auto r = (*t)->Render(R"({"messages": []})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Conversation is empty"), std::string::npos);
  EXPECT_EQ(*(*t)->Render(R"({"messages": [1]})"), "ok");
  EXPECT_FALSE((*t)->Render("[1, 2]").ok());  // context must be an object
  EXPECT_FALSE((*t)->Render("{not json").ok());
}

TEST(JinjaTest, CoreSemantics) {
  EXPECT_EQ(Render("{% for m in ms %}{{ loop.index }}:{{ m }}{% if not loop.last %},{% endif %}{% endfor %}", R"({"ms": ["a", "b", "c"]})"),
            "1:a,2:b,3:c");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loop scope
  EXPECT_EQ(Render("{{ '  hi  '|trim }}|{{ 'a,b'.split(',')|join('+') }}|{{ 'Hello'[1:3] }}|{{ [3, 1, 2][::-1] }}"), "hi|a+b|el|[2, 1, 3]");
  EXPECT_EQ(Render("{{ {'a': 1, 'b': [true, none]}|tojson }}"), R"({"a": 1, "b": [true, null]})");
  EXPECT_EQ(Render("{{ x is defined }}{{ y is none }}{{ 7 // 2 }}{{ -7 % 3 }}{{ 1 / 2 }}", R"({"y": null})"), "falsetrue320.5");
  EXPECT_EQ(Render("{%- if true -%}\n  A\n{%- endif %}\nB"), "AB");  // trim_blocks eats the newline after endif
  EXPECT_EQ(Render("  {% if true %}\nx\n  {% endif %}\ny"), "x\ny");  // lstrip_blocks + trim_blocks
  EXPECT_EQ(Render("{% macro f(a, b='!') %}{{ a ~ b }}{% endmacro %}{{ f('hi') }}{{ f('yo', b='?') }}"), "hi!yo?");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"z": 1, "a": 2}})"), "z=1;a=2;");
  EXPECT_EQ(Render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|list|tojson }}",
                   R"({"ms": [{"role": "user", "c": 1}, {"role": "bot", "c": 2}, {"role": "user", "c": 3}]})"),
            "[1, 3]");
}

}  // namespace
}  // namespace deepinfer::jinja
