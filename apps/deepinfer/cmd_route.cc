// deepinfer route: a cache-aware router in front of `deepinfer serve` replicas (src/router). Threads: the HTTP
// event loop, one per forwarded request, the health checker, and this thread, which waits for SIGTERM/SIGINT and
// shuts down gracefully as serve does.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/logging.h"
#include "commands.h"
#include "router/router_server.h"
#include "startup.h"

namespace deepinfer::cli {

namespace {

// --replica may be given many times (Args keeps one value per flag), and each value may list URLs with commas.
std::vector<std::string> ReplicaUrls(int argc, char** argv) {
  std::vector<std::string> out;
  auto add = [&](const std::string& list) {
    size_t start = 0;
    while (start <= list.size()) {
      const size_t comma = list.find(',', start);
      const std::string one = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!one.empty()) out.push_back(one);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  };
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--replica" && i + 1 < argc) add(argv[++i]);
    else if (a.rfind("--replica=", 0) == 0) add(a.substr(10));
  }
  return out;
}

}  // namespace

int CmdRoute(int argc, char** argv) {
  Args args("route",
            "Cache-aware router over `deepinfer serve` replicas: an OpenAI-compatible front (POST /v1/completions,\n"
            "/v1/chat/completions, /v1/responses; GET /v1/models from the replicas; /health; /metrics) that forwards\n"
            "each request to one replica and passes its answer back unchanged (SSE streams chunk by chunk). A replica\n"
            "that fails a request or stops answering GET /health is taken out (its non-streamed requests in flight are\n"
            "retried on another) and taken back in when it answers again; one serving another model is excluded.\n"
            "Policies: cache_aware (SGLang's: a per-replica approximate prefix tree of the prompts sent; the longest\n"
            "match wins when it covers over --cache-threshold of the prompt and the load is balanced, else the least\n"
            "loaded replica), least_load (fewest requests in flight), round_robin.\n"
            "With --model (the GGUF file or HF directory the replicas serve), cache_aware is fed by the replicas' KV\n"
            "events instead (GET /v1/kv_events): the router tokenizes each prompt as serve does, hashes its KV blocks\n"
            "and scores each replica by the leading blocks its prefix cache holds, with the same thresholds against\n"
            "load (the replica's reported queue and running requests, or the router's in-flight count if higher).",
            {
                {"replica", "", "URL", "", "a replica's base URL, http://HOST:PORT (repeat the flag, or comma-separate, for more)"},
                {"policy", "", "NAME", "cache_aware", "cache_aware, least_load or round_robin"},
                {"model", "m", "PATH", "", "cache_aware: the model the replicas serve (GGUF file or HF directory; its tokenizer and chat template only are read): route by the replicas' KV events (GET /v1/kv_events) instead of the text tree"},
                {"chat-template", "", "FILE", "model's", "with --model: the Jinja chat template file the replicas were given with --chat-template"},
                {"replica-api-key", "", "KEY", "--api-key's", "with --model: the key the router's own KV event subscriptions send to the replicas"},
                {"host", "", "ADDR", "127.0.0.1", "address to bind (0.0.0.0 for all interfaces)"},
                {"port", "", "N", "8000", "port (0 = any free port, printed at startup)"},
                {"api-key", "", "KEY", "", "require Authorization: Bearer KEY on /v1/* (or DEEPINFER_API_KEY); the client's Authorization header is forwarded to the replicas as given"},
                {"cache-threshold", "", "R", "0.5", "cache_aware: least share of the prompt the best replica's tree must match to be picked for its cache"},
                {"balance-abs-threshold", "", "N", "32", "cache_aware: load is imbalanced when max - min requests in flight exceeds N ..."},
                {"balance-rel-threshold", "", "R", "1.0001", "cache_aware: ... and max exceeds R x min; then the least loaded replica is picked whatever the match"},
                {"max-tree-chars", "", "N", "16777216", "cache_aware: prompt characters remembered per replica (least recently used evicted first)"},
                {"health-interval", "", "SECONDS", "1", "time between health checks (GET /health) of every replica"},
                {"health-timeout", "", "SECONDS", "2", "a replica not answering /health within this is taken out"},
                {"upstream-timeout", "", "SECONDS", "600", "a replica silent this long in the middle of an answer has failed"},
                {"grace", "", "SECONDS", "10", "on SIGTERM/SIGINT, time in-flight requests get to finish"},
                {"quiet", "q", "", "", "only errors on stderr"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  ApplyLogFlags(args);
  router::RouterOptions ro;
  ro.replicas = ReplicaUrls(argc, argv);
  ro.policy = args.Get("policy");
  ro.http.host = args.Get("host");
  ro.http.port = static_cast<int>(args.GetInt("port"));
  if (ro.http.port < 0 || ro.http.port > 65535) return Fail(InvalidArgument("--port must be in [0, 65535]"));
  ro.api_key = args.Get("api-key");
  if (ro.api_key.empty())
    if (const char* k = std::getenv("DEEPINFER_API_KEY")) ro.api_key = k;
  ro.model_path = args.Get("model");
  if (args.Has("chat-template")) {
    std::ifstream in(args.Get("chat-template"), std::ios::binary);
    if (!in) return Fail(NotFound(args.Get("chat-template") + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    ro.chat_template = ss.str();
  }
  ro.replica_api_key = args.Has("replica-api-key") ? args.Get("replica-api-key") : ro.api_key;
  ro.cache.cache_threshold = args.GetFloat("cache-threshold");
  ro.cache.balance_abs_threshold = args.GetInt("balance-abs-threshold");
  ro.cache.balance_rel_threshold = args.GetFloat("balance-rel-threshold");
  ro.cache.max_tree_chars = static_cast<size_t>(std::max<long long>(1024, args.GetInt("max-tree-chars")));
  ro.health.health_interval_s = std::max(0.05, args.GetFloat("health-interval"));
  ro.health.health_timeout_s = std::max(0.05, args.GetFloat("health-timeout"));
  ro.upstream_timeout_s = std::max(1.0, args.GetFloat("upstream-timeout"));
  const double grace = args.GetFloat("grace");

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Two descriptors per forwarded request (client and replica): raise the soft limit to the hard one.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  auto server = router::RouterServer::Create(std::move(ro));
  if (!server.ok()) return Fail(server.status());
  router::RouterServer& rs = **server;
  if (Status s = rs.Listen(); !s.ok()) return Fail(s);
  std::thread http([&] { rs.Run(); });
  std::printf("deepinfer route: listening on http://%s:%d (pid %d)\n", args.Get("host").c_str(), rs.port(), static_cast<int>(getpid()));
  std::fflush(stdout);

  int sig = 0;
  sigwait(&sigs, &sig);
  DI_LOG_INFO("route: %s: stopping (%lld requests in flight get %.0f s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
              static_cast<long long>(rs.in_flight()), grace);
  rs.Stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
  while (rs.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  rs.CloseAll();
  http.join();
  server->reset();  // waits for the forwarding threads (their replica calls were aborted)
  return 0;
}

}  // namespace deepinfer::cli
