// libFuzzer: the server's request path. The input is fed to the HTTP parser in pieces whose sizes come from
// the input itself (so every split point of the framing is exercised); each complete request's body then goes
// through JSON parsing and the OpenAI parameter parser, as the server does. Nothing may crash, read out of
// bounds or buffer beyond the limits.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "server/http.h"
#include "protocol/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer;
  if (size < 1) return 0;
  HttpLimits limits;
  limits.max_body_bytes = 1 << 16;
  limits.max_header_bytes = 4096;
  HttpParser parser(limits);
  const size_t step = 1 + data[0] % 64;  // piece size
  const char* p = reinterpret_cast<const char*>(data + 1);
  size_t left = size - 1;
  std::string pending;
  while (left > 0) {
    const size_t take = std::min(step, left);
    pending.append(p, take);
    p += take;
    left -= take;
    for (;;) {
      size_t used = 0;
      const auto r = parser.Feed(pending.data(), pending.size(), &used);
      if (used > pending.size()) __builtin_trap();
      pending.erase(0, used);
      if (r == HttpParser::Result::kNeedMore) break;
      if (r == HttpParser::Result::kError) {
        if (parser.error_status() < 400 || parser.error_status() > 499) __builtin_trap();  // hostile input: 4xx only
        return 0;
      }
      const HttpRequest& req = parser.request();
      if (req.body.size() > limits.max_body_bytes) __builtin_trap();
      auto body = nlohmann::json::parse(req.body, nullptr, false);
      if (!body.is_discarded()) (void)ParseRequestParams(body, RequestParams{});
      parser.Reset();
    }
  }
  return 0;
}
