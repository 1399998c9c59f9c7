// JSON Schema -> GBNF, for the subset real APIs use (OpenAI strict mode, vLLM, llama.cpp): type (and type
// lists), properties / required / additionalProperties, enum, const, anyOf / oneOf, allOf of one schema,
// items / prefixItems with minItems / maxItems, string minLength / maxLength / pattern / format (date, time,
// date-time, uuid, email), integer bounds (exact digit-range rules), $ref into $defs / definitions (recursion
// allowed), OpenAPI `nullable`. Choices that make the output a strict subset of what the schema allows:
//  - properties come in sorted key order; when `additionalProperties` is absent and `properties` is given,
//    no other keys are generated (OpenAI strict behaviour);
//  - a `pattern` is matched as a full match (anchored), a subset of JSON Schema's search semantics;
//  - `number` with bounds generates integers in the bounds; `oneOf` is treated as `anyOf`;
//  - integers have at most 16 digits, fractions at most 16, exponents as integers (llama.cpp's converter).
// Keywords that constrain values and are not implemented (not, if/then/else, patternProperties, uniqueItems,
// multipleOf, contains, min/maxProperties, ...) are errors, never silently ignored.
#pragma once
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"

namespace deepinfer::grammar {

// Whitespace the generated JSON may hold between tokens. kCompact (the default): at most one space where JSON
// allows whitespace; kFlexible: llama.cpp's rule, a space or a newline plus up to 20 spaces/tabs.
enum class JsonWhitespace { kCompact, kFlexible };

StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema, JsonWhitespace ws = JsonWhitespace::kCompact);
// The same rules as name -> body, the top rule named `top` and every other rule the schema defines starting with
// `prefix`; the JSON primitives (space, string, value, ...) keep their names and bodies, so the rule sets of
// several schemas merge into one grammar (forced tool calls: one argument schema per function).
StatusOr<std::map<std::string, std::string>> JsonSchemaRules(const nlohmann::json& schema, const std::string& prefix,
                                                              const std::string& top,
                                                              JsonWhitespace ws = JsonWhitespace::kCompact);
// Any JSON object (response_format json_object).
std::string JsonObjectGbnf(JsonWhitespace ws = JsonWhitespace::kCompact);
// One of the given strings, exactly.
std::string ChoiceGbnf(const std::vector<std::string>& choices);

}  // namespace deepinfer::grammar
