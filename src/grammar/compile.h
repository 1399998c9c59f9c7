// Every constraint a request can carry, compiled to the one Grammar form the matcher runs.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(const std::string& gbnf);
StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema);
StatusOr<std::shared_ptr<const Grammar>> CompileJsonObject();
StatusOr<std::shared_ptr<const Grammar>> CompileRegex(const std::string& pattern);
StatusOr<std::shared_ptr<const Grammar>> CompileChoice(const std::vector<std::string>& choices);

}  // namespace deepinfer::grammar
