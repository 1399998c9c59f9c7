// A strict, incremental HTTP/1.1 request parser for the API server. Bytes arrive in pieces; Feed() consumes
// what it can and reports a complete request, a need for more bytes, or an error carrying the status to answer
// with (400 malformed or unsupported framing/version, 413 too large, 414 URI too long, 431 headers too large):
// hostile input only ever gets a 4xx.
// Limits are hard caps checked as bytes arrive, so a hostile client cannot make the server buffer more than
// max_header_bytes + max_body_bytes per connection.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

struct HttpRequest {
  std::string method, target, path, query;
  int version_minor = 1;  // HTTP/1.x
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;

  // First header value with this (lower-case) name, or null.
  const std::string* Header(std::string_view name) const;
};

struct HttpLimits {
  size_t max_header_bytes = 16 * 1024;  // request line + headers
  size_t max_headers = 100;
  size_t max_target_bytes = 8 * 1024;
  size_t max_body_bytes = 8 * 1024 * 1024;
};

class HttpParser {
 public:
  enum class Result { kNeedMore, kDone, kError };
  explicit HttpParser(HttpLimits limits = {}) : limits_(limits) {}

  // Consumes bytes from data[0, n); *consumed says how many. On kDone the request is in request() and the
  // parser must be Reset() before the next one (pipelined bytes stay unconsumed). On kError, error_status()
  // and error_message() say why; the connection should be answered and closed.
  Result Feed(const char* data, size_t n, size_t* consumed);
  void Reset();

  const HttpRequest& request() const { return req_; }
  HttpRequest& request() { return req_; }
  int error_status() const { return err_status_; }
  const std::string& error_message() const { return err_msg_; }
  // True once any byte of a request has arrived (for idle vs slow-request timeouts).
  bool started() const { return state_ != State::kHead || !head_.empty(); }

 private:
  enum class State { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone, kError };
  Result Fail(int status, std::string msg);
  bool ParseHead();  // head_ holds request line + headers without the final blank line

  HttpLimits limits_;
  State state_ = State::kHead;
  std::string head_;
  HttpRequest req_;
  size_t body_left_ = 0;
  std::string chunk_line_;
  int err_status_ = 0;
  std::string err_msg_;
};

const char* HttpReason(int status);

}  // namespace deepinfer
