// The API's route aliases: the paths other servers' clients use for deepinfer's routes, mapped to the one path
// each route is handled under.
#pragma once
#include <string>

namespace deepinfer {

// The canonical path for `path`: llama-server's OpenAI routes without /v1 (/completions, /chat/completions,
// /models, /responses, and below /models/ and /responses/) get the prefix; its /v1/health is /health. Any other
// path is returned as it is (and is 404 unless it is a route itself).
std::string CanonicalRoute(const std::string& path);

}  // namespace deepinfer
