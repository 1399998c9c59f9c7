// Regular expression -> GBNF expression (full-match semantics, as vLLM's guided_regex).
#pragma once
#include <string>

#include "deepinfer/status.h"

namespace deepinfer::grammar {

// json_string_content: the match is the inside of a JSON string (a JSON Schema `pattern`): quote, backslash and
// control characters are matched in their escaped JSON spelling and excluded from classes.
StatusOr<std::string> RegexToGbnf(const std::string& pattern, bool json_string_content = false);

}  // namespace deepinfer::grammar
