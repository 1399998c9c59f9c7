#include "router/router_server.h"

#include <nlohmann/json.hpp>
#include <thread>

#include "base/logging.h"
#include "router/request_text.h"
#include "server/routes.h"

namespace deepinfer::router {

namespace {

using json = nlohmann::json;

const char* ErrorType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ErrorBody(int status, const std::string& message) {
  return json{{"error", {{"message", message}, {"type", ErrorType(status)}, {"param", nullptr}, {"code", status}}}}.dump() + "\n";
}

// Client headers that describe this hop, not the request: the router's own connection to the replica sets them
// (and asks for no compression, so bodies pass through as they are; the front compresses for its own clients).
bool HopByHop(const std::string& name) {
  static const char* const kNames[] = {"host", "connection", "keep-alive", "content-length", "transfer-encoding", "te",
                                       "trailer", "upgrade", "accept-encoding", "expect", "proxy-authorization", "proxy-connection"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

// Replica answer headers the front writes itself (framing, CORS, compression, x-request-id: the client's, which
// the replica was sent too, or the front's own) or that describe the replica's hop.
bool OwnAnswerHeader(const std::string& name) {
  return HopByHop(name) || name == "content-type" || name == "x-request-id" || name == "content-encoding" || name == "cache-control" ||
         name == "vary" || name == "date" || name == "server" || name.rfind("access-control-", 0) == 0;
}

HeaderList PassedHeaders(const HeaderList& from_replica, int replica) {
  HeaderList out;
  for (auto& [k, v] : from_replica)
    if (!OwnAnswerHeader(k)) out.emplace_back(k, v);
  out.emplace_back("x-deepinfer-replica", std::to_string(replica));  // which replica answered (logs, tests)
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(RouterOptions opt) {
  if (opt.replicas.empty()) return InvalidArgument("no replica: give at least one --replica URL");
  std::vector<Url> urls;
  for (const std::string& r : opt.replicas) {
    Url u;
    if (Status s = ParseUrl(r, &u); !s.ok()) return s;
    urls.push_back(std::move(u));
  }
  std::unique_ptr<PromptTokenizer> tokens;
  if (!opt.model_path.empty()) {
    auto t = PromptTokenizer::Load(opt.model_path, opt.chat_template);
    if (!t.ok()) return t.status();
    tokens = std::move(*t);
  }
  auto policy = MakePolicy(opt.policy, static_cast<int>(urls.size()), opt.cache, tokens != nullptr);
  if (!policy.ok()) return policy.status();
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(opt), std::move(*policy), std::move(urls), std::move(tokens)));
}

RouterServer::RouterServer(RouterOptions opt, std::unique_ptr<RoutingPolicy> policy, std::vector<Url> urls,
                           std::unique_ptr<PromptTokenizer> tokens)
    : opt_(std::move(opt)),
      tokens_(std::move(tokens)),
      replicas_(std::move(urls), std::move(policy), opt_.health),
      http_(opt_.http, [this](HttpServer::ConnId c, HttpRequest& r) { Handle(c, r); },
            [this](HttpServer::ConnId c) { OnClose(c); }) {}

RouterServer::~RouterServer() {
  kv_subscribers_.clear();  // stops their threads before the policy's indexes go
  replicas_.AbortAll();
  std::unique_lock<std::mutex> lock(workers_mu_);
  workers_cv_.wait(lock, [&] { return workers_.load() == 0; });
  lock.unlock();
  replicas_.Stop();
}

Status RouterServer::Listen() {
  replicas_.Start();
  for (int i = 0; i < replicas_.size(); ++i) {
    KvBlockIndex* index = replicas_.kv_index(i);
    if (!index) continue;
    KvEventSubscriberOptions so;
    so.api_key = opt_.replica_api_key;
    so.prompt_digest = tokens_ ? tokens_->digest() : 0;
    so.connect_timeout_s = opt_.connect_timeout_s;
    kv_subscribers_.push_back(std::make_unique<KvEventSubscriber>(replicas_.url(i), index, so));
    kv_subscribers_.back()->Start();
  }
  if (Status s = http_.Listen(); !s.ok()) return s;
  DI_LOG_INFO("route: OpenAI API on http://%s:%d/v1 over %d replica(s); /health, /metrics%s", opt_.http.host.c_str(),
              http_.port(), replicas_.size(), opt_.api_key.empty() ? "" : "; API key required");
  return Status::Ok();
}

void RouterServer::CloseAll() {
  replicas_.AbortAll();
  http_.CloseAll();
}

void RouterServer::Error(HttpServer::ConnId c, int status, const std::string& message) {
  HeaderList headers;
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  metrics_.CountAnswer(status);
  http_.Respond(c, status, "application/json", ErrorBody(status, message), std::move(headers));
}

bool RouterServer::Authorized(const HttpRequest& req) const {
  if (opt_.api_key.empty()) return true;
  const std::string* h = req.Header("authorization");
  const std::string given = h && h->rfind("Bearer ", 0) == 0 ? h->substr(7) : "";
  // Constant time in the key, as serve compares it.
  const std::string& want = opt_.api_key;
  unsigned diff = given.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>(want[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  return diff == 0;
}

void RouterServer::Options(HttpServer::ConnId c, const HttpRequest& req) {
  // A CORS preflight, answered here as serve answers it (the allowed origin line comes from the HTTP layer).
  const std::string* origin = req.Header("origin");
  const std::string* method = req.Header("access-control-request-method");
  if (origin && method && !http_.OriginAllowed(*origin)) return Error(c, 400, "disallowed CORS origin");
  HeaderList headers = {{"Allow", "GET, HEAD, POST, OPTIONS"}};
  if (origin && method) {
    const std::string* asked = req.Header("access-control-request-headers");
    headers.emplace_back("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    headers.emplace_back("Access-Control-Allow-Headers", asked && !asked->empty() ? *asked : "*");
    headers.emplace_back("Access-Control-Max-Age", "600");
  }
  http_.Respond(c, 204, "text/plain", "", std::move(headers));
}

void RouterServer::Handle(HttpServer::ConnId c, HttpRequest& req) {
  req.path = CanonicalRoute(req.path);
  const std::string& p = req.path;
  const bool is_post = req.method == "POST", is_get = req.method == "GET" || req.method == "HEAD";
  if (req.method == "OPTIONS") return Options(c, req);
  if (p == "/health") {
    if (!is_get) return Error(c, 405, "use GET");
    const int up = replicas_.NumUp();
    if (up == 0) return Error(c, 503, "no replica available: " + replicas_.Summary());
    metrics_.CountAnswer(200);
    return http_.Respond(c, 200, "application/json",
                         json{{"status", "ok"}, {"replicas_up", up}, {"replicas", replicas_.size()}}.dump() + "\n");
  }
  if (p == "/metrics") {
    if (!is_get) return Error(c, 405, "use GET");
    metrics_.CountAnswer(200);
    return http_.Respond(c, 200, "text/plain; version=0.0.4", metrics_.Render(replicas_.policy_name(), replicas_.Snapshot()));
  }
  const bool prompt_route = p == "/v1/completions" || p == "/v1/chat/completions" || p == "/v1/responses";
  const bool other_route = p == "/v1/models" || p.rfind("/v1/models/", 0) == 0 || p.rfind("/v1/responses/", 0) == 0 ||
                           p == "/tokenize" || p == "/detokenize";
  if (!prompt_route && !other_route) return Error(c, 404, "no route for " + req.method + " " + p.substr(0, 200));
  if (!Authorized(req)) return Error(c, 401, "missing or invalid API key (Authorization: Bearer KEY)");
  if (prompt_route && !is_post) return Error(c, 405, "use POST");
  if (!is_post && !is_get) return Error(c, 405, "use GET or POST");
  if (workers_.load() >= opt_.max_in_flight) return Error(c, 429, "too many requests in flight at the router");
  Spawn(c, std::move(req), prompt_route ? Kind::kPolicy : Kind::kAny);
}

void RouterServer::Spawn(HttpServer::ConnId c, HttpRequest req, Kind kind) {
  auto call = std::make_shared<Call>();
  {
    std::lock_guard<std::mutex> lock(calls_mu_);
    calls_[c] = call;
  }
  workers_++;
  // A thread per forwarded request: replica calls block for as long as the replica generates, and a pool of
  // fixed size would queue short requests behind long streams.
  std::thread([this, c, req = std::move(req), kind, call] {
    Forward(c, req, kind, call);
    {
      std::lock_guard<std::mutex> lock(calls_mu_);
      auto it = calls_.find(c);
      if (it != calls_.end() && it->second == call) calls_.erase(it);
    }
    std::lock_guard<std::mutex> lock(workers_mu_);
    workers_--;
    workers_cv_.notify_all();
  }).detach();
}

void RouterServer::OnClose(HttpServer::ConnId c) {
  // The client went away: stop its replica call (the replica then aborts the generation and frees its KV).
  std::lock_guard<std::mutex> lock(calls_mu_);
  auto it = calls_.find(c);
  if (it == calls_.end()) return;
  it->second->cancelled = true;
  if (it->second->client) it->second->client->Abort();
  calls_.erase(it);
}

void RouterServer::SetClient(const std::shared_ptr<Call>& call, HttpClient* client) {
  std::lock_guard<std::mutex> lock(calls_mu_);
  call->client = client;
  if (client && call->cancelled) client->Abort();
}

void RouterServer::Forward(HttpServer::ConnId c, const HttpRequest& req, Kind kind, const std::shared_ptr<Call>& call) {
  std::string text;
  std::vector<int32_t> ids;
  bool have_ids = false;
  if (kind == Kind::kPolicy) {
    // A body that is not JSON goes to a replica all the same, which answers it with its own 400.
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_discarded()) text = PromptText(body);
    if (tokens_) {
      auto r = tokens_->Ids(req.path, req.body);
      if (r.ok()) {
        ids = std::move(*r);
        have_ids = true;
      }
    }
  }
  HeaderList headers;
  for (auto& [k, v] : req.headers)
    if (!HopByHop(k)) headers.emplace_back(k, v);
  const std::string target = req.path + (req.query.empty() ? "" : "?" + req.query);

  std::vector<int> tried;
  std::string last_error;
  for (;;) {
    const ReplicaSet::Lease lease = kind == Kind::kPolicy ? replicas_.Acquire(text, have_ids ? &ids : nullptr, tried) : replicas_.AcquireAny(tried);
    if (lease.replica < 0) {
      metrics_.CountNoReplica();
      if (tried.empty()) return Error(c, 503, "no replica available: " + replicas_.Summary());
      return Error(c, 503, "every replica tried failed (last: " + last_error + "); " + replicas_.Summary());
    }
    if (kind == Kind::kPolicy) {
      metrics_.CountDecision(lease.decision.outcome);
      // What the router saw of the prompt (its own token ids, with --model) and of the replica's cache: the line
      // that tells whether the router tokenizes as the replicas do (tests/server/router_chat_tokens.mjs).
      if (have_ids)
        DI_LOG_DEBUG("route: %s: %zu prompt tokens; replica %d holds %d of its %d full blocks (%s)", req.path.c_str(),
                     ids.size(), lease.replica, lease.decision.matched_blocks, lease.decision.prompt_blocks,
                     OutcomeName(lease.decision.outcome));
    }
    HttpClient client(replicas_.url(lease.replica), opt_.connect_timeout_s, opt_.upstream_timeout_s);
    replicas_.Track(lease.replica, &client);
    SetClient(call, &client);

    int status = 0;
    HeaderList answer_headers;
    std::string content_type = "application/json", body;
    bool is_stream = false, started = false;
    const Status st = client.Run(
        req.method, target, headers, req.body,
        [&](int s, const HeaderList& h) {
          status = s;
          answer_headers = h;
          for (auto& [k, v] : h)
            if (k == "content-type") content_type = v;
          is_stream = s == 200 && content_type.rfind("text/event-stream", 0) == 0;
          return !call->cancelled;
        },
        [&](std::string_view data) {
          if (call->cancelled) return false;
          if (!is_stream) {
            body.append(data);
            return true;
          }
          // The stream's head goes out with its first chunk: until then a failed replica can still be retried.
          if (!started) {
            http_.StartStream(c, status, content_type, PassedHeaders(answer_headers, lease.replica));
            started = true;
          }
          http_.SendChunk(c, std::string(data));
          return true;
        });
    SetClient(call, nullptr);
    replicas_.Untrack(lease.replica, &client);
    const bool cancelled = call->cancelled;
    replicas_.Release(lease.replica, !st.ok() && !cancelled);
    if (cancelled) return;  // the client is gone; its connection is closed
    if (!st.ok() && replicas_.stopping()) {  // the router's own shutdown aborted the call: no replica failed
      if (started) return http_.EndStream(c);
      return Error(c, 503, "the router is shutting down");
    }
    if (st.ok()) {
      metrics_.CountAnswer(status);
      if (is_stream) {
        if (!started) http_.StartStream(c, status, content_type, PassedHeaders(answer_headers, lease.replica));
        http_.EndStream(c);
      } else {
        http_.Respond(c, status, content_type, std::move(body), PassedHeaders(answer_headers, lease.replica));
      }
      return;
    }
    replicas_.MarkDown(lease.replica, st.message());
    if (started) {
      // Bytes of this stream are with the client: it cannot be replayed elsewhere. End it with an error event in
      // the API's error shape, so an SDK raises instead of taking the cut stream as complete.
      metrics_.CountStreamError();
      metrics_.CountAnswer(502);
      http_.SendChunk(c, "data: " + ErrorBody(502, "the replica failed in the middle of the stream: " + st.message()) + "\n");
      http_.EndStream(c);
      return;
    }
    DI_LOG_WARN("route: retrying a %s %s on another replica (%s)", req.method.c_str(), req.path.c_str(), st.message().c_str());
    metrics_.CountRetry();
    tried.push_back(lease.replica);
    last_error = st.message();
  }
}

}  // namespace deepinfer::router
