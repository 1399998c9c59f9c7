// The OpenAI-compatible HTTP server over an engine: POST /v1/completions, /v1/chat/completions, /v1/responses
// (SSE with "stream": true), GET /v1/models, /health, /version, /metrics (Prometheus), POST /tokenize,
// /detokenize, GET /v1/kv_events and the web chat page at /. This is what `deepinfer serve` runs; a program can
// embed the same server over its own engine.
//
// Threads: Run() is the HTTP loop (call it on a thread of its own); the engine's loop must run too (Engine::
// Start). Stop, CloseAll and in_flight are thread-safe. A graceful shutdown, as serve does on SIGTERM:
//
//   auto server = deepinfer::api::Server::Create(*engine, *model, options);
//   (*server)->Listen();                  // binds; port() is then the bound port
//   engine->Start();
//   std::thread http([&] { (*server)->Run(); });
//   ...
//   (*server)->Stop();                    // no new connections; idle ones close
//   while ((*server)->in_flight() > 0 && !grace_over) sleep;
//   (*server)->CloseAll();                // closing the rest aborts their requests
//   http.join();
//   engine->Shutdown();
//
// Under mpirun only rank 0 (WorldRank(), deepinfer/parallel.h) creates a server; the other ranks run their
// engine's loop (RunUntilIdle) and step with rank 0 until its Shutdown ends the job.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/status.h"

namespace deepinfer::api {

struct ServerOptions {
  std::string host = "127.0.0.1";   // address to bind ("0.0.0.0": every interface)
  int port = 8000;                  // 0: any free port (port() says which after Listen)
  std::string api_key;              // non-empty: Authorization: Bearer KEY required on /v1/* and /tokenize
  std::string served_model_name;    // the model id clients send and /v1/models lists; empty: the model's file name
  std::string chat_template;        // Jinja template source; empty: the model's, else ChatML
  int max_pending = 4096;           // requests accepted and unanswered before new ones get 429 + Retry-After
  size_t max_body_bytes = 8 << 20;  // largest request body (413 beyond)
  // Prompt text refused (400) before tokenizing; 0: 2 x the context x the longest token's bytes.
  size_t max_prompt_bytes = 0;
  size_t max_stored_responses = 1000;  // /v1/responses answers kept (oldest dropped first; 0: none)
  int prep_threads = 2;             // threads that parse requests, render chat templates and tokenize
  bool webui = true;                // the web chat page at / and /index.html (false: 404 there)
  size_t kv_events_slice = 65536;   // GET /v1/kv_events: block hashes per snapshot event
  // CORS: comma-separated origins browsers may call from ("*": any, empty: none).
  std::string allowed_origins = "*";
  int max_connections = 16384;      // open connections before new ones get 503
  double request_timeout_s = 30;    // time allowed to send a whole request (slow clients get 408)
  double idle_timeout_s = 120;      // keep-alive connections idle this long are closed
};

class Server {
 public:
  // A server over `engine` and the `model` it runs, both of which must outlive it (an engine created by
  // Engine::Create over that model). Nothing is bound until Listen.
  static StatusOr<std::unique_ptr<Server>> Create(Engine& engine, const Model& model, const ServerOptions& options = {});

  Server() = default;
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  virtual ~Server() = default;

  // Binds and listens on options.host:options.port (an error names the address).
  virtual Status Listen() = 0;
  // The bound port (after Listen; the chosen one for port 0).
  virtual int port() const = 0;
  // The HTTP loop, on the calling thread; returns after Stop once every connection has closed.
  virtual void Run() = 0;
  // Thread-safe. Stops accepting; idle connections close, the others once their answer is done.
  virtual void Stop() = 0;
  // Thread-safe. Closes every connection now (their requests are aborted): the end of a grace period.
  virtual void CloseAll() = 0;
  // Thread-safe. Requests accepted and not yet answered, those still being prepared included.
  virtual int64_t in_flight() const = 0;
  // The model id clients send and /v1/models lists.
  virtual const std::string& model_name() const = 0;
};

}  // namespace deepinfer::api
