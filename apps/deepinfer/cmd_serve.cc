// deepinfer serve: the OpenAI-compatible HTTP server. Threads: the HTTP event loop, the engine loop, the
// engine's executor stream (+ compute pool), and this thread, which waits for SIGTERM/SIGINT and runs the
// graceful shutdown: stop accepting, give in-flight requests --grace seconds, abort the rest, drain the engine
// and check for leaks. Built on the public API only (include/deepinfer/: the server is deepinfer/server.h).
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "commands.h"
#include "deepinfer/deepinfer.h"
#include "startup.h"

namespace deepinfer::cli {

int CmdServe(int argc, char** argv) {
  Args args("serve",
            "OpenAI-compatible API server: POST /v1/completions, /v1/chat/completions, /v1/responses (SSE with\n"
            "\"stream\": true), GET /v1/models, /health, /version, /metrics (Prometheus), POST /tokenize, /detokenize.\n"
            "A web chat page (streaming, reasoning, conversations kept in the browser) answers at / (--no-webui: off).\n"
            "The OpenAI routes also answer without /v1, as llama-server's do. Every answer carries x-request-id (the\n"
            "client's X-Request-Id, else a fresh one); JSON answers are gzip-encoded for clients that accept it.\n"
            "SIGTERM/SIGINT shut down gracefully.",
            {
                {"model", "m", "MODEL", "", "GGUF file, HF model directory or hub reference owner/name[:file]"},
                {"host", "", "ADDR", "127.0.0.1", "address to bind (0.0.0.0 for all interfaces)"},
                {"port", "", "N", "8000", "port (0 = any free port, printed at startup)"},
                {"api-key", "", "KEY", "", "require Authorization: Bearer KEY on /v1/* and /tokenize (or DEEPINFER_API_KEY)"},
                {"served-model-name", "", "NAME", "model file name", "the model id clients send and /v1/models lists"},
                {"chat-template", "", "FILE", "model's", "Jinja chat template file (default: the model's, else ChatML)"},
                {"max-pending", "", "N", "4096", "requests in flight before new ones get 429 + Retry-After"},
                {"max-body", "", "BYTES", "8388608", "largest request body (413 beyond)"},
                {"max-prompt-bytes", "", "BYTES", "auto", "prompt text refused (400) before tokenizing; auto: 2 x context x longest token"},
                {"max-stored-responses", "", "N", "1000", "/v1/responses answers kept for previous_response_id and GET /v1/responses/{id} (oldest dropped first; 0: none)"},
                {"prep-workers", "", "N", "2", "threads that parse requests, render chat templates and tokenize (off the HTTP loop)"},
                {"no-webui", "", "", "", "no web chat page at / (404 there; the page needs no key, its API calls do)"},
                {"kv-events-slice", "", "N", "65536", "GET /v1/kv_events: block hashes per snapshot event (a larger cache's snapshot continues in snapshot_part events, one per 50 ms)"},
                {"allowed-origins", "", "LIST", "*", "CORS: comma-separated origins browsers may call from ('*' any, '' none)"},
                {"max-connections", "", "N", "16384", "open connections before new ones get 503"},
                {"request-timeout", "", "SECONDS", "30", "time allowed to send a whole request (slow clients get 408)"},
                {"idle-timeout", "", "SECONDS", "120", "keep-alive connections idle this long are closed"},
                {"grace", "", "SECONDS", "10", "on SIGTERM/SIGINT, time in-flight requests get to finish"},
                {"quiet", "q", "", "", "only errors on stderr"},
                DI_ENGINE_FLAGS,
                DI_PARALLEL_FLAGS,
                DI_WEIGHT_FLAGS,
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  ApplyLogFlags(args);
  api::EngineOptions eo;
  if (Status s = EngineOptionsFromArgs(args, &eo); !s.ok()) return Fail(s);
  api::ServerOptions so;
  so.host = args.Get("host");
  so.port = static_cast<int>(args.GetInt("port"));
  if (so.port < 0 || so.port > 65535) return Fail(InvalidArgument("--port must be in [0, 65535]"));
  so.max_body_bytes = static_cast<size_t>(std::max<long long>(1024, args.GetInt("max-body")));
  so.max_connections = static_cast<int>(std::max<long long>(1, args.GetInt("max-connections")));
  so.request_timeout_s = args.GetFloat("request-timeout");
  so.idle_timeout_s = args.GetFloat("idle-timeout");
  so.max_pending = static_cast<int>(std::max<long long>(1, args.GetInt("max-pending")));
  so.api_key = args.Get("api-key");
  if (args.Has("max-stored-responses"))
    so.max_stored_responses = static_cast<size_t>(std::max<long long>(0, args.GetInt("max-stored-responses")));
  if (args.Has("max-prompt-bytes")) so.max_prompt_bytes = static_cast<size_t>(std::max<long long>(1, args.GetInt("max-prompt-bytes")));
  so.prep_threads = static_cast<int>(std::clamp<long long>(args.GetInt("prep-workers"), 1, 64));
  so.allowed_origins = args.Get("allowed-origins");
  so.webui = !args.Has("no-webui");
  so.kv_events_slice = static_cast<size_t>(std::max<long long>(1, args.GetInt("kv-events-slice")));
  if (so.api_key.empty())
    if (const char* k = std::getenv("DEEPINFER_API_KEY")) so.api_key = k;
  if (args.Has("served-model-name")) so.served_model_name = args.Get("served-model-name");
  if (args.Has("chat-template")) {
    std::ifstream in(args.Get("chat-template"), std::ios::binary);
    if (!in) return Fail(NotFound(args.Get("chat-template") + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    so.chat_template = ss.str();
  }
  const double grace = args.GetFloat("grace");

  // Signals are taken by this thread only (sigwait), so every other thread runs undisturbed.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // One descriptor per client: raise the soft limit to the hard one (a 1024 default would cap concurrency).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  if (Status s = SetupParallel(args); !s.ok()) return Fail(s);
  auto model = OpenModelOrDie(args.Get("model"), ModelOptionsFromArgs(args));
  auto draft_model = OpenDraftModelOrDie(args, &eo);
  if (Status s = api::CheckSameModelEverywhere(args.Get("model")); !s.ok()) return Fail(s);
  auto engine = api::Engine::Create(*model, eo);
  if (!engine.ok()) return Fail(engine.status());
  if (api::WorldRank() != 0) {
    // Under mpirun only rank 0 listens; the other ranks step with it until its shutdown ends the job (SIGTERM
    // and SIGINT stay blocked here: rank 0 decides when the job stops).
    if (Status s = (*engine)->RunUntilIdle(); !s.ok()) return Fail(s);
    Status leaks = (*engine)->Shutdown();
    if (!leaks.ok()) return Fail(leaks);
    api::Log(api::LogLevel::kInfo, "rank %d: shutdown complete: KV cache and slots all free", api::WorldRank());
    return 0;
  }
  auto server_or = api::Server::Create(**engine, *model, so);
  if (!server_or.ok()) return Fail(server_or.status());
  api::Server& server = **server_or;
  if (Status s = server.Listen(); !s.ok()) return Fail(s);
  (*engine)->Start();
  std::thread http([&] { server.Run(); });
  // The pid matters under mpirun: SIGTERM to rank 0 itself shuts the whole job down cleanly (mpirun, signalled,
  // would kill every rank after its odls_base_sigkill_timeout).
  std::printf("deepinfer serve: listening on http://%s:%d (pid %d)\n", so.host.c_str(), server.port(), static_cast<int>(getpid()));
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  api::Log(api::LogLevel::kInfo, "%s: stopping (no new connections; %lld requests in flight get %.0f s)",
           sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(server.in_flight()), grace);
  server.Stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
  while (server.in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (server.in_flight() > 0)
    api::Log(api::LogLevel::kWarn, "grace period over: aborting %lld requests", static_cast<long long>(server.in_flight()));
  server.CloseAll();  // closing their connections aborts their requests
  http.join();
  Status leaks = (*engine)->Shutdown();  // aborts anything left, drains the pipeline, checks every block and slot
  if (!leaks.ok()) return Fail(leaks);
  api::Log(api::LogLevel::kInfo, "shutdown complete: KV cache and slots all free");
  return 0;
}

}  // namespace deepinfer::cli
