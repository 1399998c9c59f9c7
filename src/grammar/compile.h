// Every constraint a request can carry, compiled to the one Grammar form the matcher runs.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"  // JsonWhitespace

namespace deepinfer::grammar {

// gbnf_out (optional) receives the GBNF text the constraint became (what multi-process runs send to other
// ranks, and what a user can inspect).
StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(const std::string& gbnf, std::string* gbnf_out = nullptr);
StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema, std::string* gbnf_out = nullptr,
                                                           JsonWhitespace ws = JsonWhitespace::kCompact);
StatusOr<std::shared_ptr<const Grammar>> CompileJsonObject(std::string* gbnf_out = nullptr, JsonWhitespace ws = JsonWhitespace::kCompact);
StatusOr<std::shared_ptr<const Grammar>> CompileRegex(const std::string& pattern, std::string* gbnf_out = nullptr);
StatusOr<std::shared_ptr<const Grammar>> CompileChoice(const std::vector<std::string>& choices,
                                                       std::string* gbnf_out = nullptr);

}  // namespace deepinfer::grammar
