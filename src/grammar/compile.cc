#include "grammar/compile.h"

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

namespace {
StatusOr<std::shared_ptr<const Grammar>> Finish(std::string gbnf, std::string* gbnf_out) {
  auto g = ParseGbnf(gbnf);
  if (g.ok() && gbnf_out) *gbnf_out = std::move(gbnf);
  return g;
}
}  // namespace

StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(const std::string& gbnf, std::string* gbnf_out) {
  if (gbnf.size() > (1u << 20)) return InvalidArgument("grammar: larger than 1 MiB");
  return Finish(gbnf, gbnf_out);
}

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema, std::string* gbnf_out,
                                                           JsonWhitespace ws) {
  DI_ASSIGN_OR_RETURN(std::string gbnf, JsonSchemaToGbnf(schema, ws));
  auto g = Finish(std::move(gbnf), gbnf_out);
  // The converter's output failing to parse is our bug, not the caller's: say so.
  if (!g.ok()) return Internal("json schema produced an invalid grammar: " + g.status().message());
  return g;
}

StatusOr<std::shared_ptr<const Grammar>> CompileJsonObject(std::string* gbnf_out, JsonWhitespace ws) {
  return Finish(JsonObjectGbnf(ws), gbnf_out);
}

StatusOr<std::shared_ptr<const Grammar>> CompileRegex(const std::string& pattern, std::string* gbnf_out) {
  if (pattern.size() > (1u << 16)) return InvalidArgument("regex: longer than 64 KiB");
  DI_ASSIGN_OR_RETURN(std::string expr, RegexToGbnf(pattern));
  return Finish("root ::= " + expr + "\n", gbnf_out);
}

StatusOr<std::shared_ptr<const Grammar>> CompileChoice(const std::vector<std::string>& choices, std::string* gbnf_out) {
  if (choices.empty()) return InvalidArgument("choice: the list is empty");
  for (const auto& c : choices)
    if (c.empty()) return InvalidArgument("choice: empty strings are not allowed");
  return Finish(ChoiceGbnf(choices), gbnf_out);
}

}  // namespace deepinfer::grammar
