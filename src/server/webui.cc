#include "server/webui.h"

#include "server/http_encoding.h"

namespace deepinfer {

// Defined in the build directory's generated/webui_html.cc (cmake/embed_file.cmake).
extern const unsigned char kWebUiHtml[];
extern const size_t kWebUiHtmlSize;
extern const char kWebUiHtmlEtag[];

namespace {

// Only this origin and the page's own inline code: a model's answer that slipped past the page's escaping still
// could not load or send anything elsewhere, nor be framed by another site.
constexpr const char* kCsp =
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// Whether an If-None-Match value names `etag` ("*", or a list of entity tags, weak ones compared weakly).
bool Matches(const std::string& header, std::string_view etag) {
  if (header.find('*') != std::string::npos) return true;
  size_t i = 0;
  while (i < header.size()) {
    size_t j = header.find(',', i);
    if (j == std::string::npos) j = header.size();
    std::string_view t(header.data() + i, j - i);
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    if (t.substr(0, 2) == "W/") t.remove_prefix(2);
    if (t == etag) return true;
    i = j + 1;
  }
  return false;
}

}  // namespace

WebUi::WebUi() : gzip_(Gzip(std::string(html()))) {}

std::string_view WebUi::html() const { return {reinterpret_cast<const char*>(kWebUiHtml), kWebUiHtmlSize}; }

const char* WebUi::etag() const { return kWebUiHtmlEtag; }

WebUi::Answer WebUi::Get(const std::string* if_none_match, const std::string* accept_encoding, bool head) const {
  Answer a;
  // no-cache: browsers keep the page but ask each time (a 304 costs no body), so a new binary's page shows at once.
  a.headers = {{"Cache-Control", "no-cache"}, {"ETag", etag()}, {"Content-Security-Policy", kCsp},
               {"X-Content-Type-Options", "nosniff"}, {"Referrer-Policy", "no-referrer"}, {"Vary", "Accept-Encoding"}};
  if (if_none_match && Matches(*if_none_match, etag())) {
    a.status = 304;
    return a;
  }
  a.status = 200;
  const bool gz = !gzip_.empty() && accept_encoding && AcceptsGzip(*accept_encoding);
  if (gz) a.headers.emplace_back("Content-Encoding", "gzip");
  if (head) a.headers.emplace_back("Content-Length", std::to_string(gz ? gzip_.size() : html().size()));
  else a.body = gz ? gzip_ : std::string(html());
  return a;
}

}  // namespace deepinfer
