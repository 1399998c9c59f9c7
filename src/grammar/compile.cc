#include "grammar/compile.h"

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {

StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(const std::string& gbnf) {
  if (gbnf.size() > (1u << 20)) return InvalidArgument("grammar: larger than 1 MiB");
  return ParseGbnf(gbnf);
}

StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema) {
  DI_ASSIGN_OR_RETURN(std::string gbnf, JsonSchemaToGbnf(schema));
  auto g = ParseGbnf(gbnf);
  // The converter's output failing to parse is our bug, not the caller's: say so.
  if (!g.ok()) return Internal("json schema produced an invalid grammar: " + g.status().message());
  return g;
}

StatusOr<std::shared_ptr<const Grammar>> CompileJsonObject() { return ParseGbnf(JsonObjectGbnf()); }

StatusOr<std::shared_ptr<const Grammar>> CompileRegex(const std::string& pattern) {
  if (pattern.size() > (1u << 16)) return InvalidArgument("regex: longer than 64 KiB");
  DI_ASSIGN_OR_RETURN(std::string expr, RegexToGbnf(pattern));
  return ParseGbnf("root ::= " + expr + "\n");
}

StatusOr<std::shared_ptr<const Grammar>> CompileChoice(const std::vector<std::string>& choices) {
  if (choices.empty()) return InvalidArgument("choice: the list is empty");
  for (const auto& c : choices)
    if (c.empty()) return InvalidArgument("choice: empty strings are not allowed");
  return ParseGbnf(ChoiceGbnf(choices));
}

}  // namespace deepinfer::grammar
