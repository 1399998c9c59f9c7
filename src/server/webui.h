// The web chat page `deepinfer serve` answers at / and /index.html (off with --no-webui): one self-contained HTML
// file (src/server/webui/index.html) embedded into the binary at build time (cmake/embed_file.cmake). The page
// needs no API key to load (it asks for one and sends it on its API calls); it only talks to /v1 on its own origin.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer {

// The page, its gzip form (made once) and the HTTP answer for a GET of it.
class WebUi {
 public:
  WebUi();
  std::string_view html() const;
  const char* etag() const;  // quoted, as sent in ETag
  struct Answer {
    int status;  // 200, or 304 when the client's If-None-Match names this page
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
  };
  // if_none_match / accept_encoding: the request's headers (nullptr when absent); head: a HEAD request (no body).
  Answer Get(const std::string* if_none_match, const std::string* accept_encoding, bool head) const;

 private:
  std::string gzip_;
};

}  // namespace deepinfer
