// The OpenAI-compatible API over the engine: /v1/completions, /v1/chat/completions (SSE streaming or not),
// /v1/models, /health, /metrics, /tokenize, /detokenize, /v1/kv_events (server/kv_event_publisher.h), and the web chat page at / (server/webui.h). Requests are validated into engine parameters
// (openai_request.h), errors come back in OpenAI's JSON shape with the right status, a client that disconnects
// aborts its request (its KV is freed at once), and a full queue answers 429 with Retry-After.
//
// Threads: routing, queueing and output run on the HTTP loop thread. Request bodies are parsed, chat templates
// rendered and prompts tokenized on a few prep workers (prep_), which answer errors directly and hand accepted
// requests back to the loop (Submit). The engine's output callback (HandOff) only queues the event and wakes
// the loop; the loop then builds the JSON, updates metrics and writes SSE.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/work_queue.h"
#include "deepinfer/server.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/api_call.h"
#include "server/http_server.h"
#include "server/kv_event_publisher.h"
#include "server/responses.h"
#include "server/metrics.h"
#include "server/webui.h"
#include "protocol/chat.h"
#include "protocol/tool_parse.h"

namespace deepinfer {

class OpenAiServer {
 public:
  // `opt` is the public api::ServerOptions (deepinfer/server.h: what serve's flags set); api::Server wraps this class.
  OpenAiServer(Engine& engine, const Model& model, api::ServerOptions opt);
  ~OpenAiServer();
  Status Listen();
  int port() const { return http_.port(); }
  void Run();  // the HTTP loop; returns after Stop + all connections closed
  // Graceful shutdown, step 1 (thread-safe): stop accepting; idle connections close.
  void Stop() { http_.Stop(); }
  // Step 2, after the grace period: close whatever is left (their requests are aborted).
  void CloseAll() { http_.CloseAll(); }
  // Requests accepted and not yet answered, those still being prepared included (the shutdown grace waits on it).
  int64_t in_flight() const { return metrics_.in_flight.load() + preparing_count_.load(); }
  // Thread-safe: runs `task` on the HTTP thread, in order with the answers queued around it (embedders, tests).
  void RunOnHttpThread(std::function<void()> task) { http_.RunOnLoop(std::move(task)); }
  const std::string& model_name() const { return name_; }

 private:
  void Handle(HttpServer::ConnId c, HttpRequest& req);
  void OnClose(HttpServer::ConnId c);
  void Error(HttpServer::ConnId c, int status, const std::string& message, const std::string& type = "",
             const std::string& param = "", const std::string& code = "");  // code: else the status
  void Options(HttpServer::ConnId c, const HttpRequest& req);
  // On a prep worker. resp: a /v1/responses request (its conversation and whether to store the answer).
  void Generate(HttpServer::ConnId c, const HttpRequest& req, bool chat, std::shared_ptr<const ResponsesRequest> resp = nullptr);
  void Responses(HttpServer::ConnId c, HttpRequest& req);  // /v1/responses, as a chat request (prep worker)
  // Back on the loop: the call is accepted (or refused at the queue limit) and its prompts go to the engine.
  void Submit(HttpServer::ConnId c, const AnswerShape& shape, const RequestParams& params, std::vector<ValidatedRequest> checked);
  // What a chat answer is parsed into, from `tools` / `tool_choice` / `parallel_tool_calls` and the template;
  // for tool_choice "required" or named, the grammar that forces the calls goes into params.
  // prompt_opens_thinking: the chat prompt ends inside an open <think> (a forced tool call then waits behind a
  // trigger gate for the reasoning to close).
  StatusOr<OutputParsing> ChatOutputParsing(const nlohmann::json& body, bool chat, bool prompt_opens_thinking,
                                            RequestParams* params) const;
  static size_t PromptBytes(const nlohmann::json& body, bool chat);
  // An engine event for the choices of `call` from `choice_offset` on: queued by HandOff (engine thread),
  // handled by OnOutput (HTTP thread).
  struct PendingOutput {
    std::shared_ptr<ApiCall> call;
    int choice_offset;
    RequestOutput event;
  };
  void HandOff(std::shared_ptr<ApiCall> call, int choice_offset, const RequestOutput& ev);
  void DrainOutputs();
  void OnOutput(const std::shared_ptr<ApiCall>& call, const RequestOutput& ev, int choice_offset);
  void Tokenize(HttpServer::ConnId c, const HttpRequest& req);
  void Detokenize(HttpServer::ConnId c, const HttpRequest& req);
  bool Authorized(const HttpRequest& req) const;

  Engine& engine_;
  const Model& model_;
  const Tokenizer& tok_;
  api::ServerOptions opt_;
  std::string name_;
  std::unique_ptr<ChatFormatter> chat_;
  ServerMetrics metrics_;
  HttpServer http_;
  // Requests in the engine, by connection (HTTP thread only).
  std::unordered_map<HttpServer::ConnId, std::shared_ptr<ApiCall>> calls_;
  std::mutex outputs_mu_;
  std::vector<PendingOutput> outputs_;   // engine events not yet handled, in order (guarded by outputs_mu_)
  std::vector<PendingOutput> draining_;  // the batch DrainOutputs is handling (HTTP thread only)
  std::atomic<uint64_t> next_id_{1};
  size_t max_prompt_bytes_ = 0;
  uint64_t prompt_digest_ = 0;  // protocol/prompt_digest.h, reported in /v1/models for routers
  ToolFormat tool_format_ = ToolFormat::kNone;  // the chat template's tool-call format
  bool parse_thinking_ = false;                 // the template writes <think> blocks
  HarmonyTokens harmony_;                       // tool_format_ kHarmony: the vocabulary's markers
  ResponseStore responses_;                     // stored /v1/responses answers
  std::unique_ptr<WebUi> webui_;                // null with --no-webui
  // Connections whose request is on a prep worker (HTTP thread only), each with its preparation's token: a
  // worker's "done" clears only its own token, so the next request on a kept-alive connection (which can arrive
  // before the previous worker's "done" reaches the loop) is never forgotten.
  std::unordered_map<HttpServer::ConnId, uint64_t> preparing_;
  uint64_t prep_token_ = 0;  // loop thread only
  std::atomic<int64_t> preparing_count_{0};  // preparing_.size(), readable from any thread
  // Last, so they are destroyed first: their threads use everything above. Bodies under kSmallBodyBytes go
  // to prep_small_, the rest to prep_ (--prep-workers threads).
  static constexpr size_t kSmallBodyBytes = 64 << 10;
  std::unique_ptr<WorkQueue> prep_, prep_small_;
  // GET /v1/kv_events (its thread sends on http_, so it goes before it).
  std::unique_ptr<KvEventPublisher> kv_events_;
};

}  // namespace deepinfer
