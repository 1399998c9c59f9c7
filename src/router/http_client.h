// A small blocking HTTP/1.1 client for the router's calls to its replicas: one request per connection
// (Connection: close, so no pool to keep healthy), Content-Length or chunked request framing out, and
// Content-Length, chunked or read-to-close response bodies in. Bodies are handed over piece by piece as they
// arrive (a chunked stream: one piece per chunk), so an SSE stream can be passed on unbuffered.
// One object per request, used by one thread; Abort() alone may be called from another thread.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::router {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// http://HOST:PORT (a trailing path prefix is kept and put before every request target).
struct Url {
  std::string host;
  int port = 80;
  std::string prefix;  // "" or "/something" without a trailing slash
  std::string text;    // as given, for logs and metric labels
};
Status ParseUrl(const std::string& text, Url* out);

struct ClientResponse {
  int status = 0;
  HeaderList headers;  // names lower-cased
  std::string body;
  const std::string* Header(const std::string& name) const;
};

class HttpClient {
 public:
  // Called once the response head is in; returning false stops reading (the request is then abandoned).
  using HeadFn = std::function<bool(int status, const HeaderList& headers)>;
  // Called with each piece of body data as it arrives; returning false stops reading.
  using BodyFn = std::function<bool(std::string_view data)>;

  HttpClient(Url url, double connect_timeout_s, double io_timeout_s)
      : url_(std::move(url)), connect_timeout_s_(connect_timeout_s), io_timeout_s_(io_timeout_s) {}
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Connects, sends `method target` with `headers` (Host, Content-Length and Connection are added) and `body`,
  // then reads the response through the callbacks. An error says which step failed (connect, send, receive);
  // head_received() tells whether the replica answered at all before it did.
  Status Run(const std::string& method, const std::string& target, const HeaderList& headers, const std::string& body,
             const HeadFn& on_head, const BodyFn& on_body);
  bool head_received() const { return head_received_; }
  // Thread-safe: makes a Run in progress fail at once (the replica was taken out, or the client went away).
  void Abort();

  // A whole request with the body collected (health checks, /v1/models).
  static Status Fetch(const Url& url, const std::string& method, const std::string& target, const HeaderList& headers,
                      const std::string& body, double timeout_s, ClientResponse* out);

 private:
  Status Connect();
  Status SendAll(const std::string& bytes);
  // Appends what arrives to buf_; an error on timeout, reset or (unless eof_ok) end of stream.
  Status Receive(bool eof_ok, bool* eof);
  Status ReadBody(const HeaderList& headers, const BodyFn& on_body);

  Url url_;
  double connect_timeout_s_, io_timeout_s_;
  std::atomic<int> fd_{-1};
  std::atomic<bool> aborted_{false};
  bool head_received_ = false;
  std::string buf_;
};

}  // namespace deepinfer::router
