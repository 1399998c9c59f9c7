#include "router/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace deepinfer::router {

namespace {

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return s.substr(a, b - a);
}

const std::string* Find(const HeaderList& h, const std::string& name) {
  for (auto& [k, v] : h)
    if (k == name) return &v;
  return nullptr;
}

// Bounds on what a replica may send before its body: a broken or hostile replica cannot make the router buffer
// without limit.
constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kMaxChunkLine = 1024;
constexpr unsigned long long kMaxChunk = 64ull << 20;  // a chunk is buffered whole before it is passed on

}  // namespace

Status ParseUrl(const std::string& text, Url* out) {
  std::string rest = text;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.find("://") != std::string::npos) {
    return InvalidArgument("replica URL '" + text + "': only http:// is supported");
  }
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const size_t colon = hostport.rfind(':');
  Url u;
  u.text = text;
  u.prefix = prefix;
  if (colon == std::string::npos) {
    u.host = hostport;
  } else {
    u.host = hostport.substr(0, colon);
    const std::string port = hostport.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || p <= 0 || p > 65535) return InvalidArgument("replica URL '" + text + "': bad port");
    u.port = static_cast<int>(p);
  }
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') u.host = u.host.substr(1, u.host.size() - 2);
  if (u.host.empty()) return InvalidArgument("replica URL '" + text + "': no host");
  *out = std::move(u);
  return Status::Ok();
}

const std::string* ClientResponse::Header(const std::string& name) const { return Find(headers, name); }

HttpClient::~HttpClient() {
  const int fd = fd_.exchange(-1);
  if (fd >= 0) ::close(fd);
}

void HttpClient::Abort() {
  aborted_ = true;
  const int fd = fd_.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // a blocked poll/recv wakes up; the descriptor is closed by its owner
}

Status HttpClient::Connect() {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(url_.port);
  if (int rc = ::getaddrinfo(url_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return IoError("connect " + url_.text + ": " + gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int n = ::poll(&p, 1, static_cast<int>(connect_timeout_s_ * 1000));
        socklen_t len = sizeof err;
        if (n <= 0) err = n == 0 ? ETIMEDOUT : errno;
        else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small requests go out at once
      fd_ = fd;
      ::freeaddrinfo(res);
      if (aborted_) ::shutdown(fd, SHUT_RDWR);
      return Status::Ok();
    }
    last = std::strerror(err);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return IoError("connect " + url_.text + ": " + last);
}

Status HttpClient::SendAll(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    if (aborted_) return IoError("send to " + url_.text + ": aborted");
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(io_timeout_s_ * 1000)) <= 0) return IoError("send to " + url_.text + ": timed out");
      continue;
    }
    return IoError("send to " + url_.text + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status HttpClient::Receive(bool eof_ok, bool* eof) {
  *eof = false;
  char tmp[16384];
  for (;;) {
    if (aborted_) return IoError("receive from " + url_.text + ": aborted");
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n > 0) {
      buf_.append(tmp, static_cast<size_t>(n));
      return Status::Ok();
    }
    if (n == 0) {
      *eof = true;
      if (eof_ok) return Status::Ok();
      return IoError("receive from " + url_.text + ": connection closed before the response was complete");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(io_timeout_s_ * 1000));
      if (r == 0) return IoError("receive from " + url_.text + ": no data for " + std::to_string(static_cast<int>(io_timeout_s_)) + " s");
      if (r < 0 && errno != EINTR) return IoError("receive from " + url_.text + ": " + std::strerror(errno));
      continue;
    }
    return IoError("receive from " + url_.text + ": " + std::strerror(errno));
  }
}

Status HttpClient::Run(const std::string& method, const std::string& target, const HeaderList& headers,
                       const std::string& body, const HeadFn& on_head, const BodyFn& on_body) {
  head_received_ = false;
  buf_.clear();
  if (Status s = Connect(); !s.ok()) return s;
  std::string req = method + " " + url_.prefix + target + " HTTP/1.1\r\nHost: " + url_.host + ":" + std::to_string(url_.port) +
                    "\r\nConnection: close\r\n";
  for (auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  if (Status s = SendAll(req); !s.ok()) return s;

  // The head: status line and headers up to the blank line.
  size_t end;
  bool eof = false;
  while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
    if (buf_.size() > kMaxHead) return IoError("response from " + url_.text + ": head over 64 KiB");
    if (Status s = Receive(false, &eof); !s.ok()) return s;
  }
  const std::string head = buf_.substr(0, end);
  buf_.erase(0, end + 4);
  const size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
    return IoError("response from " + url_.text + ": bad status line '" + status_line.substr(0, 80) + "'");
  const int status = std::atoi(status_line.c_str() + 9);
  HeaderList resp_headers;
  for (size_t pos = line_end; pos != std::string::npos && pos < head.size();) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    pos = next;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    resp_headers.emplace_back(Lower(Trim(line.substr(0, colon))), Trim(line.substr(colon + 1)));
  }
  head_received_ = true;
  if (!on_head(status, resp_headers)) return Status::Ok();
  // No body whatever the headers say (RFC 9112 6.3): a HEAD answer carries its GET's Content-Length.
  if (method == "HEAD" || status == 204 || status == 304 || status < 200) return Status::Ok();
  return ReadBody(resp_headers, on_body);
}

Status HttpClient::ReadBody(const HeaderList& headers, const BodyFn& on_body) {
  bool eof = false;
  const std::string* te = Find(headers, "transfer-encoding");
  if (te && Lower(*te).find("chunked") != std::string::npos) {
    for (;;) {
      size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos) {
        if (buf_.size() > kMaxChunkLine) return IoError("response from " + url_.text + ": bad chunk size line");
        if (Status s = Receive(false, &eof); !s.ok()) return s;
      }
      char* endp = nullptr;
      const std::string line = buf_.substr(0, eol);
      const unsigned long long size = std::strtoull(line.c_str(), &endp, 16);
      if (endp == line.c_str()) return IoError("response from " + url_.text + ": bad chunk size '" + line.substr(0, 40) + "'");
      buf_.erase(0, eol + 2);
      if (size == 0) return Status::Ok();  // the last chunk (trailers, if any, are not needed)
      if (size > kMaxChunk) return IoError("response from " + url_.text + ": chunk of " + line.substr(0, 20) + " bytes (hex) over 64 MiB");
      while (buf_.size() < size + 2)
        if (Status s = Receive(false, &eof); !s.ok()) return s;
      if (!on_body(std::string_view(buf_).substr(0, size))) return Status::Ok();
      buf_.erase(0, size + 2);
    }
  }
  if (const std::string* cl = Find(headers, "content-length")) {
    const unsigned long long want = std::strtoull(cl->c_str(), nullptr, 10);
    unsigned long long got = 0;
    for (;;) {
      if (!buf_.empty()) {
        const size_t take = static_cast<size_t>(std::min<unsigned long long>(buf_.size(), want - got));
        got += take;
        if (!on_body(std::string_view(buf_).substr(0, take))) return Status::Ok();
        buf_.clear();
      }
      if (got >= want) return Status::Ok();
      if (Status s = Receive(false, &eof); !s.ok()) return s;
    }
  }
  for (;;) {  // neither: the body runs to the end of the connection
    if (!buf_.empty()) {
      if (!on_body(buf_)) return Status::Ok();
      buf_.clear();
    }
    if (Status s = Receive(true, &eof); !s.ok()) return s;
    if (eof) return Status::Ok();
  }
}

Status HttpClient::Fetch(const Url& url, const std::string& method, const std::string& target, const HeaderList& headers,
                         const std::string& body, double timeout_s, ClientResponse* out) {
  HttpClient c(url, timeout_s, timeout_s);
  *out = ClientResponse{};
  return c.Run(
      method, target, headers, body,
      [&](int status, const HeaderList& h) {
        out->status = status;
        out->headers = h;
        return true;
      },
      [&](std::string_view d) {
        if (out->body.size() + d.size() > (16u << 20)) return false;  // far beyond any health or model list answer
        out->body.append(d);
        return true;
      });
}

}  // namespace deepinfer::router
