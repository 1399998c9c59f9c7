// `deepinfer route`'s front: an OpenAI-compatible HTTP server (the same HttpServer `serve` uses) that forwards
// each API request to a replica the routing policy picks, and passes the answer back as the replica sent it:
// status, body and SSE chunks unchanged (a stream is relayed chunk by chunk, never buffered). A replica that
// fails before answering is taken out and the request is sent to another; a stream cut after bytes went out
// ends with an error event. Each forwarded request runs on a thread of its own, as replica calls block.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"
#include "router/kv_event_subscriber.h"
#include "router/prompt_tokenizer.h"
#include "router/replica_set.h"
#include "router/router_metrics.h"
#include "server/http_server.h"

namespace deepinfer::router {

struct RouterOptions {
  HttpServerOptions http;
  std::vector<std::string> replicas;  // base URLs, http://HOST:PORT
  std::string policy = "cache_aware";
  std::string api_key;  // required of the router's clients; their Authorization header goes to the replicas as given
  CacheAwareOptions cache;
  ReplicaSetOptions health;
  double connect_timeout_s = 2;
  double upstream_timeout_s = 600;  // a replica silent this long in the middle of an answer has failed
  int max_in_flight = 4096;         // forwarded requests at once before new ones get 429
  // --model: the model the replicas serve, for the router's own token ids; with policy cache_aware the replicas'
  // KV events then drive it (kv_events_policy.h). "": the text tree alone.
  std::string model_path;
  std::string chat_template;    // the replicas' --chat-template source ("" = the model's)
  std::string replica_api_key;  // for the router's own calls to replicas (GET /v1/kv_events)
};

class RouterServer {
 public:
  static StatusOr<std::unique_ptr<RouterServer>> Create(RouterOptions opt);
  ~RouterServer();  // waits for the forwarding threads

  // Probes the replicas (logging which serve), then binds.
  Status Listen();
  int port() const { return http_.port(); }
  void Run() { http_.Run(); }
  void Stop() { http_.Stop(); }
  // Aborts the calls to replicas and closes every connection.
  void CloseAll();
  int64_t in_flight() const { return workers_.load(); }

 private:
  enum class Kind { kPolicy, kAny };  // prompt requests go through the policy; the others to any replica
  struct Call {
    std::atomic<bool> cancelled{false};
    HttpClient* client = nullptr;  // the replica call in progress (guarded by calls_mu_)
  };
  RouterServer(RouterOptions opt, std::unique_ptr<RoutingPolicy> policy, std::vector<Url> urls,
               std::unique_ptr<PromptTokenizer> tokens);
  void Handle(HttpServer::ConnId c, HttpRequest& req);
  void OnClose(HttpServer::ConnId c);
  void Options(HttpServer::ConnId c, const HttpRequest& req);
  void Error(HttpServer::ConnId c, int status, const std::string& message);
  bool Authorized(const HttpRequest& req) const;
  void Spawn(HttpServer::ConnId c, HttpRequest req, Kind kind);
  void Forward(HttpServer::ConnId c, const HttpRequest& req, Kind kind, const std::shared_ptr<Call>& call);
  void SetClient(const std::shared_ptr<Call>& call, HttpClient* client);

  RouterOptions opt_;
  std::unique_ptr<PromptTokenizer> tokens_;  // null without --model
  ReplicaSet replicas_;
  std::vector<std::unique_ptr<KvEventSubscriber>> kv_subscribers_;  // one per replica when the policy takes events
  RouterMetrics metrics_;
  HttpServer http_;
  std::mutex calls_mu_;
  std::unordered_map<HttpServer::ConnId, std::shared_ptr<Call>> calls_;
  std::atomic<int64_t> workers_{0};
  std::mutex workers_mu_;
  std::condition_variable workers_cv_;
};

}  // namespace deepinfer::router
