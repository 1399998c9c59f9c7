#include "server/routes.h"

namespace deepinfer {

std::string CanonicalRoute(const std::string& p) {
  // llama-server answers these without /v1, and its clients and docs use them (a base URL without /v1). Its
  // own /completions is its native completion API; here every alias is the OpenAI route, the only shape
  // deepinfer speaks, so an OpenAI client pointed at either base URL gets the same answers.
  if (p == "/completions" || p == "/chat/completions" || p == "/models" || p == "/responses" ||
      p.rfind("/models/", 0) == 0 || p.rfind("/responses/", 0) == 0)
    return "/v1" + p;
  if (p == "/v1/health") return "/health";  // llama-server's health route under its /v1 prefix
  return p;
}

}  // namespace deepinfer
