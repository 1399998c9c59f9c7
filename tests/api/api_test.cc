// The public API as a consumer sees it: built against include/ only (deepinfer::deepinfer), on stories260K.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/deepinfer.h"

namespace di = deepinfer::api;

namespace {

const std::string kModel = std::string(DEEPINFER_SHARED_MODELS) + "/stories260K.gguf";

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    di::SetLogLevel(di::LogLevel::kError);
    auto m = di::Model::Load(kModel);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; }
  static std::unique_ptr<di::Engine> NewEngine() {
    di::EngineOptions o;
    o.max_num_seqs = 8;
    auto e = di::Engine::Create(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  static di::Model* model_;
};
di::Model* ApiTest::model_ = nullptr;

struct Sample {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
};

TEST_F(ApiTest, ModelDescribesItselfAndTokenizes) {
  EXPECT_EQ(model_->format(), "gguf");
  EXPECT_GT(model_->vocab_size(), 0);
  EXPECT_GT(model_->context_length(), 0);
  EXPECT_FALSE(model_->Summary().empty());
  const std::vector<int32_t> ids = model_->EncodePrompt("Once upon a time");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], model_->bos_id());  // llama vocabularies ask for BOS
  EXPECT_EQ(model_->Encode("Once upon a time", false), std::vector<int32_t>(ids.begin() + 1, ids.end()));
  EXPECT_EQ(model_->Decode(ids), "Once upon a time");
  EXPECT_TRUE(model_->IsEndOfGeneration(model_->eos_id()));
}

TEST_F(ApiTest, MissingModelIsAnError) {
  auto m = di::Model::Load("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.gguf"), std::string::npos) << m.status().message();
}

TEST_F(ApiTest, ChatTemplateRendersAndTokenizes) {
  const std::vector<di::ChatMessage> msgs = {{"user", "hello"}};
  auto text = model_->RenderChat(msgs);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("hello"), std::string::npos);
  auto ids = model_->EncodeChat(msgs);
  ASSERT_TRUE(ids.ok());
  EXPECT_FALSE(ids->empty());
}

// Callback and pull-style streams give the same greedy continuation; both end with the leak check passing.
TEST_F(ApiTest, CallbackAndStreamAgree) {
  di::GenerationParams p;
  p.max_tokens = 24;
  Sample cb;
  {
    auto e = NewEngine();
    ASSERT_TRUE(e);
    auto id = e->AddText("Once upon a time", p, [&](const di::Output& o) {
      cb.tokens.insert(cb.tokens.end(), o.token_ids.begin(), o.token_ids.end());
      cb.text += o.text;
      if (o.finished) cb.finish_reason = o.finish_reason;
    });
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE(e->RunUntilIdle().ok());
    const di::EngineStats st = e->Stats();
    EXPECT_EQ(st.requests_finished, 1);
    EXPECT_EQ(st.generated_tokens, static_cast<int64_t>(cb.tokens.size()));
    EXPECT_TRUE(e->Shutdown().ok());
  }
  ASSERT_FALSE(cb.tokens.empty());
  EXPECT_EQ(model_->Decode(cb.tokens), cb.text);

  auto e = NewEngine();
  ASSERT_TRUE(e);
  e->Start();
  auto stream = e->AddStream(model_->EncodePrompt("Once upon a time"), p);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  Sample pulled;
  di::Output o;
  int events = 0;
  while ((*stream)->Next(&o)) {
    ++events;
    EXPECT_EQ(o.request_id, (*stream)->request_id());
    pulled.tokens.insert(pulled.tokens.end(), o.token_ids.begin(), o.token_ids.end());
    pulled.text += o.text;
    if (o.finished) pulled.finish_reason = o.finish_reason;
  }
  EXPECT_GT(events, 0);
  EXPECT_EQ(pulled.tokens, cb.tokens);
  EXPECT_EQ(pulled.text, cb.text);
  EXPECT_EQ(pulled.finish_reason, cb.finish_reason);
  stream->reset();
  EXPECT_TRUE(e->Shutdown().ok());
}

// n samples with a seed: each sample streams to its own index, and the same seed repeats the same outputs.
TEST_F(ApiTest, SeededSamplesRepeat) {
  di::GenerationParams p;
  p.max_tokens = 20;
  p.n = 2;
  p.temperature = 0.9f;
  p.seed = 1234;
  auto run = [&] {
    std::vector<Sample> s(2);
    auto e = NewEngine();
    auto id = e->AddText("The little dog", p, [&](const di::Output& o) {
      s.at(o.index).tokens.insert(s[o.index].tokens.end(), o.token_ids.begin(), o.token_ids.end());
      if (o.finished) s[o.index].finish_reason = o.finish_reason;
    });
    EXPECT_TRUE(id.ok());
    EXPECT_TRUE(e->RunUntilIdle().ok());
    EXPECT_TRUE(e->Shutdown().ok());
    return s;
  };
  const auto a = run(), b = run();
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(a[i].tokens.empty());
    EXPECT_FALSE(a[i].finish_reason.empty());
    EXPECT_EQ(a[i].tokens, b[i].tokens);
  }
}

// Dropping an unfinished stream aborts its request; the engine frees everything.
TEST_F(ApiTest, DroppedStreamAborts) {
  auto e = NewEngine();
  ASSERT_TRUE(e);
  e->Start();
  di::GenerationParams p;
  p.max_tokens = 200;
  p.ignore_eos = true;
  auto stream = e->AddStream(model_->EncodePrompt("Once"), p);
  ASSERT_TRUE(stream.ok());
  di::Output o;
  ASSERT_TRUE((*stream)->Next(&o));
  stream->reset();
  EXPECT_TRUE(e->Shutdown().ok());
  EXPECT_EQ(e->Stats().requests_aborted + e->Stats().requests_finished, 1);
}

TEST_F(ApiTest, BadRequestsAreErrors) {
  di::GenerationParams p;
  p.top_p = 0;
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  auto e = NewEngine();
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->Add(model_->EncodePrompt("x"), p, nullptr).ok());
  EXPECT_FALSE(e->Validate({}, di::GenerationParams{}).ok());  // empty prompt
  EXPECT_FALSE(e->Add({model_->vocab_size()}, di::GenerationParams{}, nullptr).ok());  // id outside the vocabulary
  EXPECT_TRUE(e->Shutdown().ok());
}

TEST_F(ApiTest, OpenAiJsonRequests) {
  di::GenerationParams defaults;
  defaults.max_tokens = 7;
  auto r = di::RequestFromOpenAiJson(*model_, R"({"prompt": "Once upon", "temperature": 0.5, "seed": 3, "n": 2,
                                                 "stop": ["."], "logprobs": 2})", defaults);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, model_->EncodePrompt("Once upon"));
  EXPECT_EQ(r->params.max_tokens, 7);
  EXPECT_FLOAT_EQ(r->params.temperature, 0.5f);
  ASSERT_TRUE(r->params.seed.has_value());
  EXPECT_EQ(*r->params.seed, 3u);
  EXPECT_EQ(r->params.n, 2);
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"."});
  EXPECT_EQ(r->params.logprobs, 2);
  auto chat = di::RequestFromOpenAiJson(*model_, R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_EQ(chat->prompt, *model_->EncodeChat({{"user", "hi"}}));
  EXPECT_EQ(di::RequestFromOpenAiJson(*model_, "{nope").status().message(), "not valid JSON");
  auto bad = di::RequestFromOpenAiJson(*model_, R"({"prompt": "x", "top_p": 0})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("top_p"), std::string::npos);
  // vLLM's priority field: an integer, lower first; default 0.
  EXPECT_EQ(r->params.priority, 0);
  auto urgent = di::RequestFromOpenAiJson(*model_, R"({"prompt": "x", "priority": -5})");
  ASSERT_TRUE(urgent.ok()) << urgent.status().ToString();
  EXPECT_EQ(urgent->params.priority, -5);
  auto bad_prio = di::RequestFromOpenAiJson(*model_, R"({"prompt": "x", "priority": "high"})");
  ASSERT_FALSE(bad_prio.ok());
  EXPECT_NE(bad_prio.status().message().find("priority"), std::string::npos);
}

// One HTTP/1.1 request to 127.0.0.1:port (Connection: close); the whole answer, headers and body.
std::string HttpExchange(int port, const std::string& method, const std::string& target, const std::string& body = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) close(fd);
    return "";
  }
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    const ssize_t n = send(fd, req.data() + off, req.size() - off, 0);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<size_t>(n));
  close(fd);
  return answer;
}

// The HTTP server through the public API (deepinfer/server.h), as `deepinfer serve` runs it: a completion over
// HTTP is the engine's own greedy continuation, and the graceful shutdown leaves nothing behind.
TEST_F(ApiTest, ServerAnswersCompletionsOverHttp) {
  auto e = NewEngine();
  ASSERT_TRUE(e);
  di::ServerOptions so;
  so.port = 70000;
  EXPECT_FALSE(di::Server::Create(*e, *model_, so).ok());  // not a port
  so.port = 0;  // any free port
  so.served_model_name = "tiny";
  auto server = di::Server::Create(*e, *model_, so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Listen().ok());
  const int port = (*server)->port();
  EXPECT_GT(port, 0);
  EXPECT_EQ((*server)->model_name(), "tiny");
  e->Start();
  std::thread http([&] { (*server)->Run(); });

  EXPECT_NE(HttpExchange(port, "GET", "/health").find("{\"status\":\"ok\"}"), std::string::npos);
  const std::string answer = HttpExchange(port, "POST", "/v1/completions",
                                          R"({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0})");
  const size_t body_at = answer.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos) << answer;
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  const auto j = nlohmann::json::parse(answer.substr(body_at + 4), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << answer;

  di::GenerationParams p;
  p.max_tokens = 12;
  auto stream = e->AddStream(model_->EncodePrompt("Once upon a time"), p);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  std::string text;
  for (di::Output o; (*stream)->Next(&o);) text += o.text;
  EXPECT_EQ(j["choices"][0]["text"], text);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ((*server)->in_flight(), 0);

  (*server)->Stop();
  (*server)->CloseAll();
  http.join();
  EXPECT_TRUE(e->Shutdown().ok());
}

}  // namespace
