// An event-driven HTTP/1.1 server: one thread runs an epoll loop over non-blocking sockets (no thread per
// connection). A request handler is called on the loop thread and answers later, from any thread, through the
// thread-safe Respond / StartStream / SendChunk / EndStream calls, which queue the bytes and wake the loop.
// Streams use chunked transfer encoding (Server-Sent Events for the API). Hard limits everywhere: header and
// body sizes (HttpLimits), connection count, time to receive a request (slowloris), keep-alive idle time,
// and unsent output per connection (a reader that stops reading is dropped).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"
#include "server/http.h"

namespace deepinfer {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see port())
  HttpLimits limits;
  int max_connections = 16384;
  double request_timeout_s = 30;  // from the first byte of a request to its last
  double idle_timeout_s = 120;    // keep-alive connection with no request in progress
  double write_stall_s = 60;      // output pending and none of it accepted by the client for this long
  size_t max_pending_output = 8 << 20;
  // CORS: origins whose browsers may read the answers. "*": any (Access-Control-Allow-Origin: * on every
  // response, errors and streams included, as vLLM's default); else the request's Origin is echoed back when
  // listed. Empty: no CORS headers.
  std::vector<std::string> allowed_origins = {"*"};
};

// "a,b , c" -> {"a", "b", "c"} (the --allowed-origins syntax); "" -> {}.
std::vector<std::string> SplitOrigins(const std::string& list);

class HttpServer {
 public:
  using ConnId = uint64_t;
  // Called on the loop thread with a complete request; must eventually answer with Respond or a stream.
  using Handler = std::function<void(ConnId, HttpRequest&)>;
  // Called on the loop thread when a connection closes before its answer was complete (client gone, timeout,
  // too slow): the owner of the request should cancel it.
  using CloseHandler = std::function<void(ConnId)>;

  HttpServer(HttpServerOptions opt, Handler on_request, CloseHandler on_close);
  ~HttpServer();

  Status Listen();  // binds and listens; port() is then the bound port
  int port() const { return port_; }
  void Run();       // the loop; returns after Stop() once every connection has been closed
  // Thread-safe. Stops accepting; connections close once their current answer is done (or at once if idle).
  void Stop();
  // Thread-safe: close everything now (end of the grace period).
  void CloseAll();

  // Thread-safe answers. Unknown (closed) connections are ignored. Respond sends Content-Length: body.size(),
  // except for a 304 (none) or when `headers` holds one (a HEAD answer: its GET's length, no body).
  void Respond(ConnId c, int status, const std::string& content_type, std::string body,
               std::vector<std::pair<std::string, std::string>> headers = {});
  void StartStream(ConnId c, int status, const std::string& content_type,
                   std::vector<std::pair<std::string, std::string>> headers = {});
  void SendChunk(ConnId c, std::string data);
  void EndStream(ConnId c);
  // Thread-safe: runs `task` on the loop thread, in order with the answers queued before and after it (so a
  // producer on another thread can hand work to the loop, which then answers from there).
  void RunOnLoop(std::function<void()> task);

  size_t num_connections() const { return num_conns_.load(); }
  bool OriginAllowed(const std::string& origin) const;

 private:
  struct Conn;
  struct Op {
    enum Kind { kRespond, kStart, kChunk, kEnd, kTask } kind;
    ConnId conn;
    std::string bytes;
    std::function<void()> task = nullptr;  // kTask
  };
  void Post(Op op);
  void Accept();
  void OnReadable(Conn& c);
  void OnWritable(Conn& c);
  void TryParse(Conn& c);
  void ApplyOps();
  void ApplyOps(std::vector<Op>& ops);
  void SweepTimeouts();
  void Close(Conn& c, bool notify);
  void UpdateInterest(Conn& c);
  void QueueWrite(Conn& c, std::string bytes);
  void ErrorResponse(Conn& c, int status, const std::string& msg);
  // The Access-Control-* header lines for an answer to `req` (nullptr: a request that could not be parsed).
  std::string CorsHeaders(const HttpRequest* req) const;

  HttpServerOptions opt_;
  Handler on_request_;
  CloseHandler on_close_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, port_ = 0;
  std::unordered_map<ConnId, std::unique_ptr<Conn>> conns_;
  std::unordered_map<int, ConnId> by_fd_;
  ConnId next_id_ = 1;
  std::atomic<size_t> num_conns_{0};
  std::atomic<bool> stopping_{false}, close_all_{false};
  std::mutex ops_mu_;
  std::vector<Op> ops_;
  // The thread running Run(): what it posts needs no wakeup, as the loop applies queued ops before it sleeps.
  std::atomic<std::thread::id> loop_thread_{};
};

}  // namespace deepinfer
