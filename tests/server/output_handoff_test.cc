// The engine's output callback only hands events over: the server's JSON, metrics and SSE run on the HTTP
// loop thread, never inside the engine's host phase. HttpServer::RunOnLoop is the mechanism (tasks run on the
// loop thread, in order with the answers); the server test blocks the HTTP thread while the engine finishes a
// request and checks that none of the server's bookkeeping for it happened meanwhile.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/openai_server.h"
#include "unit/test_util.h"

namespace deepinfer::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Sends `request` on a fresh connection and returns everything the server sends until it closes.
std::string Exchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[8192];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

// The payloads of a chunked body (after the headers).
std::string Dechunk(const std::string& response) {
  size_t pos = response.find("\r\n\r\n");
  if (pos == std::string::npos) return "";
  pos += 4;
  std::string body;
  for (;;) {
    const size_t eol = response.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::stoul(response.substr(pos, eol - pos), nullptr, 16);
    if (len == 0) break;
    body += response.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return body;
}

bool WaitFor(const std::function<bool()>& cond, double seconds) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (!cond()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(HttpServerTest, RunOnLoopRunsTasksOnTheLoopThreadInOrder) {
  constexpr int kTasks = 2000;
  HttpServerOptions o;
  o.port = 0;
  HttpServer* srv = nullptr;
  std::thread producer;
  std::vector<std::thread::id> ran_on(kTasks);
  HttpServer server(
      o,
      [&](HttpServer::ConnId c, HttpRequest&) {
        srv->StartStream(c, 200, "text/plain");
        // Another thread (as the engine's) hands work over; each task answers from the loop thread.
        producer = std::thread([&, c] {
          for (int i = 0; i < kTasks; ++i)
            srv->RunOnLoop([&, c, i] {
              ran_on[i] = std::this_thread::get_id();
              srv->SendChunk(c, std::to_string(i) + "\n");
            });
          srv->RunOnLoop([&, c] { srv->EndStream(c); });
        });
      },
      nullptr);
  srv = &server;
  ASSERT_TRUE(server.Listen().ok());
  std::promise<std::thread::id> loop_id;
  std::thread loop([&] {
    loop_id.set_value(std::this_thread::get_id());
    server.Run();
  });
  const std::thread::id loop_thread = loop_id.get_future().get();
  const std::string response = Exchange(server.port(), "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  server.Stop();
  loop.join();
  if (producer.joinable()) producer.join();
  ASSERT_EQ(response.compare(0, 12, "HTTP/1.1 200"), 0) << response.substr(0, 200);
  std::string want;
  for (int i = 0; i < kTasks; ++i) want += std::to_string(i) + "\n";
  EXPECT_EQ(Dechunk(response), want);
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(ran_on[i], loop_thread) << "task " << i;
}

TEST(OpenAiServerTest, EngineEventsAreHandledOnTheHttpThread) {
  auto model = LoadModelFromPath(SharedModels() + "/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EngineOptions eo;
  eo.max_num_seqs = 4;
  auto engine = Engine::Create(**model, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  api::ServerOptions so;
  so.port = 0;
  OpenAiServer server(**engine, **model, so);
  ASSERT_TRUE(server.Listen().ok());
  (*engine)->Start();
  std::thread http([&] { server.Run(); });

  // One non-streamed completion, long enough (400 tokens, stories260K's context is 512) that the HTTP thread
  // is blocked well before the engine finishes it.
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "ignore_eos": true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                              "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  auto answer = std::async(std::launch::async, [&] { return Exchange(server.port(), request); });
  // The engine itself must hold the request (the server counts it in flight already while a prep worker parses it,
  // and a prep worker hands it to the engine through the HTTP thread, which is about to be blocked).
  ASSERT_TRUE(WaitFor([&] { return (*engine)->Stats().generated_tokens > 0; }, 60)) << "the request never reached the engine";

  std::mutex mu;
  std::condition_variable cv;
  bool blocked = false, release = false;
  server.RunOnHttpThread([&] {
    std::unique_lock<std::mutex> lock(mu);
    blocked = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return blocked; });
  }
  ASSERT_EQ((*engine)->Stats().requests_finished, 0) << "the request finished before the HTTP thread was blocked";
  // The engine finishes the request while the HTTP thread is blocked...
  const bool finished = WaitFor([&] { return (*engine)->Stats().requests_finished == 1; }, 120);
  // ... and the server has not yet handled its final event: that happens on the HTTP thread only.
  const int64_t in_flight_while_blocked = server.in_flight();
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(finished);
  EXPECT_EQ(in_flight_while_blocked, 1);

  const std::string response = answer.get();
  EXPECT_EQ(response.compare(0, 12, "HTTP/1.1 200"), 0) << response.substr(0, 300);
  EXPECT_NE(response.find("\"completion_tokens\":400"), std::string::npos) << response.substr(0, 300);
  EXPECT_TRUE(WaitFor([&] { return server.in_flight() == 0; }, 10));
  server.Stop();
  http.join();
  EXPECT_TRUE((*engine)->Shutdown().ok());
}

}  // namespace
}  // namespace deepinfer::testing
