// The OpenAI-compatible API over the engine: /v1/completions, /v1/chat/completions (SSE streaming or not),
// /v1/models, /health, /metrics, /tokenize, /detokenize. Requests are validated into engine parameters
// (openai_request.h), errors come back in OpenAI's JSON shape with the right status, a client that disconnects
// aborts its request (its KV is freed at once), and a full queue answers 429 with Retry-After.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "engine/engine.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/chat.h"

namespace deepinfer {

struct OpenAiServerOptions {
  HttpServerOptions http;
  std::string served_model_name;  // default: the model file/directory name
  std::string api_key;            // empty: no authentication
  int max_pending = 4096;         // requests accepted and unanswered before 429
  std::string chat_template;      // template source; empty: the model's, else ChatML
};


class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, const Model& model, OpenAiServerOptions opt);
  ~OpenAiServer();
  Status Listen();
  int port() const { return http_.port(); }
  void Run();  // the HTTP loop; returns after Stop + all connections closed
  // Graceful shutdown, step 1 (thread-safe): stop accepting; idle connections close.
  void Stop() { http_.Stop(); }
  // Step 2, after the grace period: close whatever is left (their requests are aborted).
  void CloseAll() { http_.CloseAll(); }
  int64_t in_flight() const { return metrics_.in_flight.load(); }
  const std::string& model_name() const { return name_; }

 private:
  struct Call;
  void Handle(HttpServer::ConnId c, HttpRequest& req);
  void OnClose(HttpServer::ConnId c);
  void Error(HttpServer::ConnId c, int status, const std::string& message, const std::string& type = "",
             const std::string& param = "");
  void Generate(HttpServer::ConnId c, const HttpRequest& req, bool chat);
  void OnOutput(const std::shared_ptr<Call>& call, const RequestOutput& ev, int choice_offset);
  void Tokenize(HttpServer::ConnId c, const HttpRequest& req);
  void Detokenize(HttpServer::ConnId c, const HttpRequest& req);
  bool Authorized(const HttpRequest& req) const;

  Engine& engine_;
  const Model& model_;
  const Tokenizer& tok_;
  OpenAiServerOptions opt_;
  std::string name_;
  std::unique_ptr<ChatFormatter> chat_;
  ServerMetrics metrics_;
  HttpServer http_;
  std::mutex mu_;
  std::unordered_map<HttpServer::ConnId, std::shared_ptr<Call>> calls_;  // requests in the engine, by connection
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace deepinfer
