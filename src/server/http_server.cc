#include "server/http_server.h"

#include "server/http_encoding.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/logging.h"

namespace deepinfer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kListenTag = ~0ull, kWakeTag = ~0ull - 1;

std::string StatusLine(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + HttpReason(status) + "\r\n";
}

std::string ChunkOf(const std::string& data) {
  char size[20];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

// Inserts header lines right after the status line of an answer's head.
void AddHeaderLines(std::string& head, const std::string& lines) {
  if (!lines.empty()) head.insert(head.find("\r\n") + 2, lines);
}

// A whole answer (head + body) whose JSON body is worth compressing becomes its gzip encoding: only JSON (the
// API's answers; metrics and streams are left alone), only past 1 KiB (below that the header costs more than it
// saves), Content-Length rewritten.
void GzipJsonAnswer(std::string& answer) {
  const size_t end = answer.find("\r\n\r\n");
  if (end == std::string::npos || answer.size() - end - 4 < 1024) return;
  const std::string head = answer.substr(0, end + 2);
  if (head.find("Content-Type: application/json") == std::string::npos || head.find("Content-Encoding:") != std::string::npos) return;
  std::string body = Gzip(answer.substr(end + 4));
  if (body.empty()) return;  // zlib failed: the plain answer is still right
  const size_t cl = head.find("Content-Length: "), cl_end = head.find("\r\n", cl);
  if (cl == std::string::npos) return;
  answer = head.substr(0, cl) + "Content-Length: " + std::to_string(body.size()) + head.substr(cl_end) +
           "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n\r\n" + body;
}

}  // namespace

std::vector<std::string> SplitOrigins(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    std::string o = list.substr(i, j - i);
    while (!o.empty() && o.front() == ' ') o.erase(0, 1);
    while (!o.empty() && o.back() == ' ') o.pop_back();
    if (!o.empty()) out.push_back(o);
    i = j + 1;
  }
  return out;
}

bool HttpServer::OriginAllowed(const std::string& origin) const {
  for (const auto& o : opt_.allowed_origins)
    if (o == "*" || o == origin) return true;
  return false;
}

std::string HttpServer::CorsHeaders(const HttpRequest* req) const {
  // A browser shows a cross-origin script only the CORS-safelisted answer headers: x-request-id must be exposed
  // by name for a browser client (the openai SDK's `_request_id`) to read it.
  static const std::string kExpose = "Access-Control-Expose-Headers: x-request-id\r\n";
  for (const auto& o : opt_.allowed_origins)
    if (o == "*") return "Access-Control-Allow-Origin: *\r\n" + kExpose;
  const std::string* origin = req ? req->Header("origin") : nullptr;
  if (!origin || !OriginAllowed(*origin)) return opt_.allowed_origins.empty() ? "" : "Vary: Origin\r\n";
  return "Access-Control-Allow-Origin: " + *origin + "\r\nVary: Origin\r\n" + kExpose;
}

struct HttpServer::Conn {
  ConnId id;
  int fd;
  HttpParser parser;
  std::string in;       // received, not yet parsed
  std::string out;      // to send
  size_t out_off = 0;
  enum class State { kReading, kHandling, kStreaming, kClosing } state = State::kReading;
  bool keep_alive = true;
  bool peer_closed = false;
  Clock::time_point last_activity, request_start, last_write_progress;
  bool want_write = false;
  std::string cors;  // header lines every answer to the current request carries: Access-Control-*, x-request-id
  bool gzip_ok = false;  // the current request accepts a gzip-encoded answer
  explicit Conn(HttpLimits l) : parser(l) {}
};

HttpServer::HttpServer(HttpServerOptions opt, Handler on_request, CloseHandler on_close)
    : opt_(std::move(opt)), on_request_(std::move(on_request)), on_close_(std::move(on_close)) {}

HttpServer::~HttpServer() {
  for (auto& [id, c] : conns_) ::close(c->fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status HttpServer::Listen() {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string port = std::to_string(opt_.port);
  if (int rc = getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return InvalidArgument("--host " + opt_.host + ": " + gai_strerror(rc));
  int fd = -1;
  std::string err;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) break;
    err = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) return IoError("cannot listen on " + opt_.host + ":" + port + ": " + err);
  listen_fd_ = fd;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return IoError(std::string("epoll/eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenTag;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeTag;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return Status::Ok();
}

void HttpServer::Post(Op op) {
  {
    std::lock_guard<std::mutex> lock(ops_mu_);
    ops_.push_back(std::move(op));
  }
  if (std::this_thread::get_id() == loop_thread_.load(std::memory_order_relaxed)) return;
  const uint64_t one = 1;
  if (::write(wake_fd_, &one, sizeof one) < 0) { /* the counter is saturated: the loop is awake anyway */ }
}

void HttpServer::Respond(ConnId c, int status, const std::string& content_type, std::string body,
                         std::vector<std::pair<std::string, std::string>> headers) {
  std::string head = StatusLine(status);
  head += "Content-Type: " + content_type + "\r\n";
  // A 304 carries no length (RFC 9110 8.6: it would have to be the unsent body's); a HEAD answer passes the
  // length its GET would have in `headers`.
  bool has_length = status == 304;
  for (auto& [k, v] : headers) has_length |= k == "Content-Length";
  if (!has_length) head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  for (auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  Post({Op::kRespond, c, head + "\r\n" + body});  // the loop adds Connection: close when it will close
}

void HttpServer::StartStream(ConnId c, int status, const std::string& content_type,
                             std::vector<std::pair<std::string, std::string>> headers) {
  std::string head = StatusLine(status);
  head += "Content-Type: " + content_type + "\r\nTransfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
  for (auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  Post({Op::kStart, c, head + "\r\n"});
}

void HttpServer::SendChunk(ConnId c, std::string data) {
  if (!data.empty()) Post({Op::kChunk, c, ChunkOf(data)});
}

void HttpServer::EndStream(ConnId c) { Post({Op::kEnd, c, "0\r\n\r\n"}); }

void HttpServer::RunOnLoop(std::function<void()> task) { Post({Op::kTask, 0, {}, std::move(task)}); }

void HttpServer::Stop() {
  stopping_ = true;
  Post({Op::kChunk, 0, ""});  // wake
}

void HttpServer::CloseAll() {
  close_all_ = true;
  Post({Op::kChunk, 0, ""});
}

void HttpServer::UpdateInterest(Conn& c) {
  epoll_event ev{};
  const bool want_write = c.out_off < c.out.size();
  // Keep reading while handling (to notice a client that hangs up), but not without bound.
  const bool want_read = !c.peer_closed && c.in.size() < opt_.limits.max_header_bytes + opt_.limits.max_body_bytes;
  ev.events = (want_read ? static_cast<uint32_t>(EPOLLIN | EPOLLRDHUP) : 0u) | (want_write ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  ev.data.u64 = c.id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
  c.want_write = want_write;
}

void HttpServer::Accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a transient error (EMFILE...): try again on the next event
    if (stopping_ || conns_.size() >= static_cast<size_t>(opt_.max_connections)) {
      // No request is read: the answer still carries an id of its own, as every answer does.
      static const std::string kBody =
          "{\"error\":{\"message\":\"too many connections\",\"type\":\"server_error\",\"param\":null,\"code\":503}}\n";
      const std::string busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                               "Connection: close\r\nContent-Length: " + std::to_string(kBody.size()) +
                               "\r\nx-request-id: " + RequestIdFor(nullptr) + "\r\n\r\n" + kBody;
      if (::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* best effort */ }
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>(opt_.limits);
    c->id = next_id_++;
    c->fd = fd;
    c->last_activity = c->last_write_progress = Clock::now();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    by_fd_[fd] = c->id;
    conns_.emplace(c->id, std::move(c));
    num_conns_ = conns_.size();
  }
}

void HttpServer::QueueWrite(Conn& c, std::string bytes) {
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
    c.last_write_progress = Clock::now();
  }
  c.out += bytes;
  OnWritable(c);
}

void HttpServer::ErrorResponse(Conn& c, int status, const std::string& msg) {
  std::string body = "{\"error\":{\"message\":\"" + msg + "\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":" +
                     std::to_string(status) + "}}\n";
  // The parser keeps the header lines it read before the error (all of them for 413 and a slow body's 408), so a
  // client's X-Request-Id sent ahead of the problem is echoed; otherwise the answer gets a fresh id.
  std::string head = StatusLine(status) + "Content-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n" + CorsHeaders(nullptr) + "x-request-id: " +
                     RequestIdFor(c.parser.request().Header("x-request-id")) + "\r\n\r\n";
  c.state = Conn::State::kClosing;
  c.keep_alive = false;
  QueueWrite(c, head + body);
}

void HttpServer::TryParse(Conn& c) {
  while (c.state == Conn::State::kReading && !c.in.empty()) {
    size_t used = 0;
    if (!c.parser.started()) c.request_start = Clock::now();
    const HttpParser::Result r = c.parser.Feed(c.in.data(), c.in.size(), &used);
    c.in.erase(0, used);
    if (r == HttpParser::Result::kNeedMore) return;
    if (r == HttpParser::Result::kError) {
      ErrorResponse(c, c.parser.error_status(), c.parser.error_message());
      return;
    }
    c.keep_alive = c.parser.request().keep_alive && !stopping_;
    c.state = Conn::State::kHandling;
    HttpRequest& req = c.parser.request();
    c.cors = CorsHeaders(&req) + "x-request-id: " + RequestIdFor(req.Header("x-request-id")) + "\r\n";
    const std::string* ae = req.Header("accept-encoding");
    c.gzip_ok = ae && AcceptsGzip(*ae);
    on_request_(c.id, req);
    return;  // the next pipelined request waits until this answer is complete
  }
}

void HttpServer::OnReadable(Conn& c) {
  const ConnId id = c.id;  // c may be closed (and freed) by what follows
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      c.last_activity = Clock::now();
      if (c.in.size() > opt_.limits.max_header_bytes + opt_.limits.max_body_bytes) break;
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      c.peer_closed = true;
      // A client that hangs up (or half-closes) before its answer is complete has gone away.
      Close(c, c.state == Conn::State::kHandling || c.state == Conn::State::kStreaming);
      return;
    }
    if (errno == EINTR) continue;
    break;
  }
  TryParse(c);
  if (auto it = conns_.find(id); it != conns_.end()) UpdateInterest(*it->second);
}

void HttpServer::OnWritable(Conn& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      c.last_write_progress = c.last_activity = Clock::now();
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    Close(c, c.state == Conn::State::kHandling || c.state == Conn::State::kStreaming);
    return;
  }
  if (c.out_off == c.out.size()) {
    c.out.clear();
    c.out_off = 0;
    if (c.state == Conn::State::kClosing) {
      Close(c, false);
      return;
    }
  } else if (c.out.size() - c.out_off > opt_.max_pending_output) {
    DI_LOG_WARN("http: dropping a client that does not read its stream (%zu bytes pending)", c.out.size() - c.out_off);
    Close(c, true);
    return;
  }
  UpdateInterest(c);
}

void HttpServer::ApplyOps() {
  // Tasks queue more ops (their answers): a few passes send those at once, but never so many that a steady
  // producer keeps the loop from reading sockets; whatever is left is applied after a non-blocking poll.
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<Op> ops;
    {
      std::lock_guard<std::mutex> lock(ops_mu_);
      ops.swap(ops_);
    }
    if (ops.empty()) return;
    ApplyOps(ops);
  }
}

void HttpServer::ApplyOps(std::vector<Op>& ops) {
  for (Op& op : ops) {
    if (op.kind == Op::kTask) {
      op.task();
      continue;
    }
    auto it = conns_.find(op.conn);
    if (it == conns_.end()) continue;  // closed meanwhile: drop
    Conn& c = *it->second;
    switch (op.kind) {
      case Op::kRespond: {
        if (c.state != Conn::State::kHandling) break;
        const bool keep = c.keep_alive && !stopping_;
        if (c.gzip_ok) GzipJsonAnswer(op.bytes);
        if (!keep) op.bytes.insert(op.bytes.find("\r\n") + 2, "Connection: close\r\n");
        AddHeaderLines(op.bytes, c.cors);
        c.state = keep ? Conn::State::kReading : Conn::State::kClosing;
        c.parser.Reset();
        c.last_activity = Clock::now();
        QueueWrite(c, std::move(op.bytes));
        if (conns_.count(op.conn) && c.state == Conn::State::kReading) TryParse(c);  // pipelined next request
        break;
      }
      case Op::kStart:
        if (c.state != Conn::State::kHandling) break;
        if (!(c.keep_alive && !stopping_)) op.bytes.insert(op.bytes.find("\r\n") + 2, "Connection: close\r\n");
        AddHeaderLines(op.bytes, c.cors);
        c.state = Conn::State::kStreaming;
        QueueWrite(c, std::move(op.bytes));
        break;
      case Op::kChunk:
        if (c.state == Conn::State::kStreaming) QueueWrite(c, std::move(op.bytes));
        break;
      case Op::kTask:
        break;  // run above
      case Op::kEnd: {
        if (c.state != Conn::State::kStreaming) break;
        const bool keep = c.keep_alive && !stopping_;
        c.state = keep ? Conn::State::kReading : Conn::State::kClosing;
        c.parser.Reset();
        c.last_activity = Clock::now();
        QueueWrite(c, std::move(op.bytes));
        if (conns_.count(op.conn) && c.state == Conn::State::kReading) TryParse(c);
        break;
      }
    }
  }
}

void HttpServer::SweepTimeouts() {
  const auto now = Clock::now();
  std::vector<ConnId> expired, too_slow;
  for (auto& [id, cp] : conns_) {
    Conn& c = *cp;
    const double idle = std::chrono::duration<double>(now - c.last_activity).count();
    const bool pending_out = c.out_off < c.out.size();
    if (pending_out && std::chrono::duration<double>(now - c.last_write_progress).count() > opt_.write_stall_s) {
      expired.push_back(id);
    } else if (c.state == Conn::State::kReading) {
      if (c.parser.started()) {
        if (std::chrono::duration<double>(now - c.request_start).count() > opt_.request_timeout_s) too_slow.push_back(id);
      } else if (idle > opt_.idle_timeout_s || (stopping_ && !pending_out)) {
        expired.push_back(id);
      }
    }
  }
  // Acting may close connections: never while iterating over them.
  for (ConnId id : too_slow)
    if (auto it = conns_.find(id); it != conns_.end()) ErrorResponse(*it->second, 408, "request not received in time");
  for (ConnId id : expired)
    if (auto it = conns_.find(id); it != conns_.end())
      Close(*it->second, it->second->state == Conn::State::kHandling || it->second->state == Conn::State::kStreaming);
}

void HttpServer::Close(Conn& c, bool notify) {
  const ConnId id = c.id;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  by_fd_.erase(c.fd);
  conns_.erase(id);  // c is gone now
  num_conns_ = conns_.size();
  if (notify && on_close_) on_close_(id);
}

void HttpServer::Run() {
  loop_thread_ = std::this_thread::get_id();
  epoll_event events[256];
  auto last_sweep = Clock::now();
  bool listening = true;
  for (;;) {
    if (stopping_ && listening) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      ::close(listen_fd_);
      listen_fd_ = -1;
      listening = false;
    }
    if (close_all_) {
      std::vector<ConnId> ids;
      for (auto& [id, c] : conns_) ids.push_back(id);
      for (ConnId id : ids)
        if (auto it = conns_.find(id); it != conns_.end())
          Close(*it->second, it->second->state == Conn::State::kHandling || it->second->state == Conn::State::kStreaming);
    }
    if (stopping_ && conns_.empty()) {
      loop_thread_ = std::thread::id();  // later posts (the owner shutting down) must not expect a loop
      return;
    }
    bool ops_pending;
    {
      std::lock_guard<std::mutex> lock(ops_mu_);
      ops_pending = !ops_.empty();
    }
    const int n = ::epoll_wait(epoll_fd_, events, 256, ops_pending ? 0 : 250);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof v) > 0) {
        }
      } else {
        auto it = conns_.find(tag);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) OnReadable(c);
        if (conns_.count(tag) && (events[i].events & EPOLLOUT)) OnWritable(c);
      }
    }
    ApplyOps();
    if (std::chrono::duration<double>(Clock::now() - last_sweep).count() > 0.25) {
      SweepTimeouts();
      last_sweep = Clock::now();
    }
  }
}

}  // namespace deepinfer
