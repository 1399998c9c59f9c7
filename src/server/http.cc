#include "server/http.h"

#include <algorithm>
#include <cstring>

namespace deepinfer {
namespace {

bool IsTokenChar(unsigned char c) {
  return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

void HttpParser::Reset() {
  state_ = State::kHead;
  head_.clear();
  req_ = HttpRequest();
  body_left_ = 0;
  chunk_line_.clear();
  err_status_ = 0;
  err_msg_.clear();
}

HttpParser::Result HttpParser::Fail(int status, std::string msg) {
  state_ = State::kError;
  err_status_ = status;
  err_msg_ = std::move(msg);
  return Result::kError;
}

bool HttpParser::ParseHead() {
  // Request line.
  size_t eol = head_.find("\r\n");
  const std::string_view all(head_);
  const std::string_view line = all.substr(0, eol);
  const size_t sp1 = line.find(' '), sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    Fail(400, "malformed request line");
    return false;
  }
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), [](char c) { return IsTokenChar(c); })) {
    Fail(400, "malformed method");
    return false;
  }
  if (target.empty() || target.size() > limits_.max_target_bytes) {
    Fail(target.empty() ? 400 : 414, target.empty() ? "empty request target" : "request target too long");
    return false;
  }
  for (unsigned char c : target)
    if (c <= 0x20 || c == 0x7f) {
      Fail(400, "invalid character in the request target");
      return false;
    }
  if (version == "HTTP/1.1") {
    req_.version_minor = 1;
  } else if (version == "HTTP/1.0") {
    req_.version_minor = 0;
  } else if (version.substr(0, 5) == "HTTP/") {
    Fail(400, "only HTTP/1.0 and HTTP/1.1 are supported");
    return false;
  } else {
    Fail(400, "malformed HTTP version");
    return false;
  }
  req_.method = std::string(method);
  req_.target = std::string(target);
  const size_t q = req_.target.find('?');
  req_.path = req_.target.substr(0, q);
  if (q != std::string::npos) req_.query = req_.target.substr(q + 1);
  // Headers.
  size_t pos = eol == std::string::npos ? head_.size() : eol + 2;
  while (pos < head_.size()) {
    size_t e = head_.find("\r\n", pos);
    if (e == std::string::npos) e = head_.size();
    const std::string_view h = all.substr(pos, e - pos);
    pos = e + 2;
    if (h.empty()) continue;
    if (h.front() == ' ' || h.front() == '\t') {
      Fail(400, "obsolete header line folding");
      return false;
    }
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      Fail(400, "malformed header line");
      return false;
    }
    const std::string_view name = h.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), [](char c) { return IsTokenChar(c); })) {
      Fail(400, "malformed header name");
      return false;
    }
    const std::string_view value = Trim(h.substr(colon + 1));
    for (unsigned char c : value)
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        Fail(400, "control character in a header value");
        return false;
      }
    if (req_.headers.size() >= limits_.max_headers) {
      Fail(431, "too many headers");
      return false;
    }
    req_.headers.emplace_back(Lower(name), std::string(value));
  }
  // Framing: Transfer-Encoding chunked, or Content-Length, never both (request smuggling).
  const std::string* te = req_.Header("transfer-encoding");
  const std::string* cl = nullptr;
  int cl_count = 0;
  for (const auto& [k, v] : req_.headers)
    if (k == "content-length") cl = &v, ++cl_count;
  if (te && cl) {
    Fail(400, "both Transfer-Encoding and Content-Length");
    return false;
  }
  if (cl_count > 1) {
    Fail(400, "more than one Content-Length");
    return false;
  }
  const std::string* conn = req_.Header("connection");
  const std::string connection = conn ? Lower(*conn) : "";
  req_.keep_alive = req_.version_minor == 1 ? connection.find("close") == std::string::npos
                                            : connection.find("keep-alive") != std::string::npos;
  if (te) {
    if (Lower(*te) != "chunked") {
      Fail(400, "unsupported Transfer-Encoding (only chunked)");
      return false;
    }
    state_ = State::kChunkSize;
    return true;
  }
  body_left_ = 0;
  if (cl) {
    if (cl->empty() || cl->size() > 18 || !std::all_of(cl->begin(), cl->end(), [](char c) { return c >= '0' && c <= '9'; })) {
      Fail(400, "malformed Content-Length");
      return false;
    }
    body_left_ = std::stoull(*cl);
    if (body_left_ > limits_.max_body_bytes) {
      Fail(413, "request body larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
      return false;
    }
    req_.body.reserve(body_left_);
  }
  state_ = body_left_ > 0 ? State::kBody : State::kDone;
  return true;
}

HttpParser::Result HttpParser::Feed(const char* data, size_t n, size_t* consumed) {
  size_t i = 0;
  auto done = [&](Result r) {
    *consumed = i;
    return r;
  };
  while (i < n || state_ == State::kDone) {
    switch (state_) {
      case State::kError:
        return done(Result::kError);
      case State::kDone:
        return done(Result::kDone);
      case State::kHead: {
        // Tolerate empty lines before a request line (RFC 9112 2.2).
        if (head_.empty() && (data[i] == '\r' || data[i] == '\n')) {
          ++i;
          break;
        }
        const char* end = static_cast<const char*>(std::memchr(data + i, '\n', n - i));
        const size_t take = end ? static_cast<size_t>(end - (data + i)) + 1 : n - i;
        head_.append(data + i, take);
        i += take;
        if (head_.size() > limits_.max_header_bytes) return done(Fail(431, "request header section too large"));
        if (head_.size() >= 4 && head_.compare(head_.size() - 4, 4, "\r\n\r\n") == 0) {
          head_.resize(head_.size() - 4);
          if (head_.find('\0') != std::string::npos) return done(Fail(400, "NUL byte in the request head"));
          if (!ParseHead()) return done(Result::kError);
        } else if (end && (head_.size() < 2 || head_[head_.size() - 2] != '\r')) {
          return done(Fail(400, "bare LF in the request head"));
        }
        break;
      }
      case State::kBody: {
        const size_t take = std::min(body_left_, n - i);
        req_.body.append(data + i, take);
        i += take;
        body_left_ -= take;
        if (body_left_ == 0) state_ = State::kDone;
        break;
      }
      case State::kChunkSize:
      case State::kTrailers: {
        const char* end = static_cast<const char*>(std::memchr(data + i, '\n', n - i));
        const size_t take = end ? static_cast<size_t>(end - (data + i)) + 1 : n - i;
        chunk_line_.append(data + i, take);
        i += take;
        if (chunk_line_.size() > 1024) return done(Fail(400, "chunk line too long"));
        if (!end) break;
        if (chunk_line_.size() < 2 || chunk_line_[chunk_line_.size() - 2] != '\r')
          return done(Fail(400, "bare LF in chunked framing"));
        std::string line = chunk_line_.substr(0, chunk_line_.size() - 2);
        chunk_line_.clear();
        if (state_ == State::kTrailers) {
          if (line.empty()) state_ = State::kDone;  // trailers are read and ignored
          break;
        }
        const std::string hex = line.substr(0, line.find(';'));
        if (hex.empty() || hex.size() > 15 || !std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
          return done(Fail(400, "malformed chunk size"));
        const size_t size = std::stoull(hex, nullptr, 16);
        if (req_.body.size() + size > limits_.max_body_bytes)
          return done(Fail(413, "request body larger than " + std::to_string(limits_.max_body_bytes) + " bytes"));
        if (size == 0) {
          state_ = State::kTrailers;
        } else {
          body_left_ = size;
          state_ = State::kChunkData;
        }
        break;
      }
      case State::kChunkData: {
        const size_t take = std::min(body_left_, n - i);
        req_.body.append(data + i, take);
        i += take;
        body_left_ -= take;
        if (body_left_ == 0) state_ = State::kChunkDataEnd;
        break;
      }
      case State::kChunkDataEnd: {
        chunk_line_.push_back(data[i++]);
        if (chunk_line_.size() == 2) {
          if (chunk_line_ != "\r\n") return done(Fail(400, "chunk data not followed by CRLF"));
          chunk_line_.clear();
          state_ = State::kChunkSize;
        }
        break;
      }
    }
  }
  return done(state_ == State::kError ? Result::kError : Result::kNeedMore);
}

const char* HttpReason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace deepinfer
