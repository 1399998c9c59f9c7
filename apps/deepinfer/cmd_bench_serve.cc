// deepinfer bench serve: the API server under load. Starts the real server in-process on 127.0.0.1, then C
// client threads (blocking sockets; this is the load generator, not the server) send streaming completions
// with Poisson arrivals at each request rate of a sweep; reports TTFT, inter-token latency and end-to-end
// percentiles and output tokens/s. The same requests then run through the offline engine with the same
// concurrency, and the HTTP layer's throughput loss is printed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "args.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "engine_flags.h"
#include "server/openai_server.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0, Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); }

struct Sample {
  bool ok = false;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int tokens = 0;
};

// One streaming completion over a fresh connection; parses chunked SSE as it arrives.
Sample StreamOnce(int port, const std::string& body) {
  Sample s;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return s;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto t0 = Clock::now();
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return s;
  }
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nConnection: close\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return s;
  }
  std::string buf;
  char tmp[8192];
  bool headers_done = false, finished = false;
  Clock::time_point last{};
  while (!finished) {
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) break;
    buf.append(tmp, static_cast<size_t>(n));
    const auto now = Clock::now();
    if (!headers_done) {
      const size_t h = buf.find("\r\n\r\n");
      if (h == std::string::npos) continue;
      if (buf.compare(0, 12, "HTTP/1.1 200") != 0) break;
      buf.erase(0, h + 4);
      headers_done = true;
    }
    // Events ("data: ...\n\n") are counted wherever chunk boundaries fall: strip chunk framing lazily by
    // scanning for event payloads only.
    size_t pos;
    while ((pos = buf.find("\n\n")) != std::string::npos) {
      const std::string ev = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      const size_t d = ev.find("data: ");
      if (d == std::string::npos) continue;
      const std::string data = ev.substr(d + 6);
      if (data == "[DONE]") {
        finished = true;
        break;
      }
      if (data.find("\"text\":\"\"") != std::string::npos && data.find("\"finish_reason\":null") != std::string::npos) continue;
      if (data.find("\"choices\":[]") != std::string::npos) continue;  // the usage chunk
      ++s.tokens;
      if (s.tokens == 1) s.ttft = Since(t0, now);
      else s.itl.push_back(Since(last, now));
      last = now;
    }
  }
  s.e2e = Since(t0, Clock::now());
  s.ok = finished;
  ::close(fd);
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100 * v.size())) - (p > 0 ? 1 : 0));
  return v[i];
}

}  // namespace

int CmdBenchServe(int argc, char** argv) {
  Args args("bench serve",
            "The OpenAI server under load (in-process, 127.0.0.1): C client threads send streaming completions (random\n"
            "--n-prompt-token prompts as ids, --n-gen tokens each, EOS ignored) with Poisson arrivals at each rate of\n"
            "--rates (requests/s; inf = all at once, closed loop). Reports TTFT, inter-token and end-to-end latency\n"
            "percentiles, output tokens/s and the engine's host time per step (scheduling and processing, excluding\n"
            "waits on the executor), then the same requests through the offline engine at the same concurrency.",
            {
                {"model", "m", "MODEL", "", "model"},
                {"concurrency", "", "N", "64", "client threads (max streams in flight)"},
                {"num-requests", "", "N", "4 x concurrency", "requests per rate"},
                {"rates", "", "LIST", "inf", "request rates to sweep, e.g. 2,8,inf"},
                {"n-prompt", "", "N", "32", "prompt tokens per request"},
                {"n-gen", "n", "N", "64", "generated tokens per request"},
                {"out", "", "FILE", "", "write the results as JSON"},
                DI_ENGINE_FLAGS,
                DI_WEIGHT_FLAGS,
            });
  if (!args.Parse(argc, argv)) return 2;
  if (args.help_requested()) {
    args.PrintHelp();
    return 0;
  }
  EngineOptions eo;
  eo.dist = dist::Context();  // under mpirun, the process's communicators
  if (Status s = EngineOptionsFromArgs(args, &eo); !s.ok()) return Fail(s);
  const int conc = static_cast<int>(std::max<long long>(1, args.GetInt("concurrency")));
  const int nreq = args.Has("num-requests") ? static_cast<int>(args.GetInt("num-requests")) : 4 * conc;
  const int n_prompt = static_cast<int>(args.GetInt("n-prompt")), n_gen = static_cast<int>(args.GetInt("n-gen"));
  eo.max_num_seqs = std::max(eo.max_num_seqs, conc);
  eo.prefix_caching = false;  // random prompts; keeps HTTP vs offline about the same work
  eo.max_model_len = n_prompt + n_gen + 8;
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts(nreq);
  for (auto& p : prompts)
    for (int i = 0; i < n_prompt; ++i) p.push_back(static_cast<int32_t>(rng() % model->config.vocab_size));
  auto body_of = [&](int i) {
    return nlohmann::json({{"prompt", prompts[i]}, {"max_tokens", n_gen}, {"temperature", 0}, {"ignore_eos", true},
                           {"stream", true}}).dump();
  };
  nlohmann::json results = nlohmann::json::array();
  std::printf("bench serve: %d clients, %d requests per rate, prompt %d, gen %d\n", conc, nreq, n_prompt, n_gen);
  std::printf("%8s | %9s %9s %9s | %9s %9s %9s | %9s %9s | %10s | %12s\n", "rate", "ttft p50", "p90", "p99", "itl p50", "p90",
              "p99", "e2e p50", "p99", "out tok/s", "host ms/step");
  double http_inf_tps = 0;
  std::stringstream rates(args.Get("rates"));
  for (std::string rate_s; std::getline(rates, rate_s, ',');) {
    const double rate = rate_s == "inf" ? INFINITY : std::stod(rate_s);
    auto engine = Engine::Create(*model, eo);
    if (!engine.ok()) return Fail(engine.status());
    api::ServerOptions so;
    so.port = 0;
    so.max_pending = 1 << 20;
    auto server = std::make_unique<OpenAiServer>(**engine, *model, so);
    if (Status s = server->Listen(); !s.ok()) return Fail(s);
    (*engine)->Start();
    std::thread http([&] { server->Run(); });
    // Warm-up request (page in weights, spin up threads).
    (void)StreamOnce(server->port(), body_of(0));
    std::vector<double> arrival(nreq, 0);
    std::exponential_distribution<double> gap(std::isinf(rate) ? 1 : rate);
    for (int i = 1; i < nreq; ++i) arrival[i] = arrival[i - 1] + (std::isinf(rate) ? 0 : gap(rng));
    std::vector<Sample> samples(nreq);
    std::atomic<int> next{0};
    const EngineStats st0 = (*engine)->Stats();  // the measured window excludes the warm-up
    const auto t0 = Clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < conc; ++c)
      clients.emplace_back([&] {
        for (int i; (i = next.fetch_add(1)) < nreq;) {
          std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
          samples[i] = StreamOnce(server->port(), body_of(i));
        }
      });
    for (auto& t : clients) t.join();
    const double secs = Since(t0, Clock::now());
    const EngineStats st1 = (*engine)->Stats();
    const double host_ms_per_step = 1e3 * (st1.host_seconds - st0.host_seconds) / std::max<int64_t>(1, st1.steps - st0.steps);
    server->Stop();
    server->CloseAll();
    http.join();
    if (Status s = (*engine)->Shutdown(); !s.ok()) return Fail(s);
    std::vector<double> ttft, itl, e2e;
    int64_t tokens = 0, failed = 0;
    for (const Sample& s : samples) {
      if (!s.ok) {
        ++failed;
        continue;
      }
      ttft.push_back(s.ttft);
      e2e.push_back(s.e2e);
      itl.insert(itl.end(), s.itl.begin(), s.itl.end());
      tokens += s.tokens;
    }
    const double tps = tokens / secs;
    if (std::isinf(rate)) http_inf_tps = tps;
    std::printf("%8s | %8.0fms %8.0fms %8.0fms | %8.1fms %8.1fms %8.1fms | %8.2fs %8.2fs | %10.1f | %12.3f%s\n", rate_s.c_str(),
                1e3 * Percentile(ttft, 50), 1e3 * Percentile(ttft, 90), 1e3 * Percentile(ttft, 99), 1e3 * Percentile(itl, 50),
                1e3 * Percentile(itl, 90), 1e3 * Percentile(itl, 99), Percentile(e2e, 50), Percentile(e2e, 99), tps,
                host_ms_per_step, failed ? ("  (" + std::to_string(failed) + " failed)").c_str() : "");
    results.push_back({{"rate", rate_s}, {"output_tokens_per_s", tps}, {"failed", failed},
                       {"host_ms_per_step", host_ms_per_step}, {"steps", st1.steps - st0.steps},
                       {"ttft_s", {{"p50", Percentile(ttft, 50)}, {"p90", Percentile(ttft, 90)}, {"p99", Percentile(ttft, 99)}}},
                       {"itl_s", {{"p50", Percentile(itl, 50)}, {"p90", Percentile(itl, 90)}, {"p99", Percentile(itl, 99)}}},
                       {"e2e_s", {{"p50", Percentile(e2e, 50)}, {"p90", Percentile(e2e, 90)}, {"p99", Percentile(e2e, 99)}}}});
  }
  // The same requests through the offline engine, `conc` at a time.
  auto engine = Engine::Create(*model, eo);
  if (!engine.ok()) return Fail(engine.status());
  RequestParams p;
  p.max_tokens = n_gen;
  p.ignore_eos = true;
  (void)(*engine)->Add(prompts[0], p, nullptr);
  (void)(*engine)->RunUntilIdle();  // warm-up, as for the server
  const int64_t before = (*engine)->Stats().generated_tokens;
  (*engine)->Start();
  std::atomic<int> outstanding{0};
  const auto t0 = Clock::now();
  for (int i = 0; i < nreq; ++i) {
    while (outstanding.load() >= conc) std::this_thread::sleep_for(std::chrono::microseconds(200));
    ++outstanding;
    (void)(*engine)->Add(prompts[i], p, [&outstanding](const RequestOutput& ev) {
      if (ev.finished) --outstanding;
    });
  }
  while (outstanding.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double secs = Since(t0, Clock::now());
  const double offline_tps = ((*engine)->Stats().generated_tokens - before) / secs;
  if (Status s = (*engine)->Shutdown(); !s.ok()) return Fail(s);
  std::printf("offline engine, same requests, %d at a time: %.1f tok/s", conc, offline_tps);
  if (http_inf_tps > 0) std::printf("  ->  HTTP layer costs %.1f%% of throughput", 100 * (1 - http_inf_tps / offline_tps));
  std::printf("\n");
  if (args.Has("out"))
    std::ofstream(args.Get("out")) << nlohmann::json({{"benchmark", "serve"}, {"concurrency", conc}, {"num_requests", nreq},
                                                       {"n_prompt", n_prompt}, {"n_gen", n_gen}, {"rates", results},
                                                       {"offline_tokens_per_s", offline_tps}})
                                          .dump(2)
                                   << "\n";
  return 0;
}

}  // namespace deepinfer::cli
