// Response encodings: gzip for JSON answers when the client accepts it (as vLLM's and llama-server's clients
// expect: curl --compressed, browsers, the SDKs' HTTP stacks), and the request id every answer carries.
#pragma once
#include <string>

namespace deepinfer {

// Whether an Accept-Encoding value admits gzip: "gzip" or "*" listed with a q-value above 0 (and gzip not
// refused with q=0 itself), per RFC 9110 12.5.3.
bool AcceptsGzip(const std::string& accept_encoding);
// The gzip stream (RFC 1952) of `data` (zlib, default level).
std::string Gzip(const std::string& data);
// The x-request-id of an answer: the client's own X-Request-Id when it sent a usable one (printable ASCII,
// at most 128 characters, as proxies and vLLM pass it through), else a new random 32-hex-digit id.
std::string RequestIdFor(const std::string* client_id);

}  // namespace deepinfer
