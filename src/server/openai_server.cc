#include "server/openai_server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "dist/communicator.h"
#include "protocol/chat.h"
#include "protocol/openai_request.h"
#include "grammar/compile.h"
#include "server/responses.h"
#include "protocol/structured_output.h"
#include "kernels/ops.h"
#include "server/routes.h"
#include "server/tool_grammar.h"
#include "protocol/tool_parse.h"
#include "protocol/tool_stream.h"

namespace deepinfer {
namespace {

// Heartbeats come every second: three missed ones mean a peer rank is gone or stopped.
constexpr double kPeerSilenceSeconds = 3.0;

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// "%2F" -> "/" in a path segment (model ids such as org/name arrive encoded); malformed escapes stay as they are.
std::string PercentDecode(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      o += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      o += s[i];
    }
  }
  return o;
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* ErrorType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "server_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// OpenAI's logprobs object for `lps`, in the chat shape ({"content": [{token, logprob, top_logprobs: [{token,
// logprob}]}]}) or the completions one ({tokens, token_logprobs, top_logprobs: [{token: logprob}]}, plus
// text_offset, each token's byte offset in the choice's text starting at `*text_offset`, when given).
json LogprobsJson(const Tokenizer& tok, bool chat, const std::vector<TokenLogprob>& lps, const size_t* text_offset) {
  if (chat) {
    // `bytes`: the token's own bytes, since `token` is only valid UTF-8 once a character's tokens are joined
    // (a byte-fallback or split token reads as U+FFFD there); clients rebuild the text from these.
    auto entry = [&](int32_t id, float logprob) {
      const std::string t = tok.TokenBytes(id);
      json bytes = json::array();
      for (unsigned char b : t) bytes.push_back(b);
      return json{{"token", t}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
    };
    json content = json::array();
    for (const auto& l : lps) {
      json top = json::array();
      for (const auto& [id, v] : l.top) top.push_back(entry(id, v));
      json e = entry(l.token, l.logprob);
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset ? *text_offset : 0;
  for (const auto& l : lps) {
    std::string t = tok.TokenBytes(l.token);
    if (text_offset) {
      offsets.push_back(offset);
      offset += t.size();
    }
    tokens.push_back(std::move(t));
    token_logprobs.push_back(l.logprob);
    json top = json::object();
    for (const auto& [id, v] : l.top) top[tok.TokenBytes(id)] = v;
    tops.push_back(top);
  }
  json out = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", tops}};
  if (text_offset) out["text_offset"] = offsets;
  return out;
}

// The assistant message for a chat answer: content (null when only tools were called), reasoning_content when
// a <think> block was split off, tool_calls with ids unique within the response.
json AssistantMessage(const std::string& text, ToolFormat format, bool tools, bool thinking, bool single, bool opened,
                      const std::string& id_prefix) {
  ParsedAssistant p = ParseAssistantOutput(text, format, tools, thinking, opened);
  if (single && p.tool_calls.size() > 1) p.tool_calls.resize(1);  // parallel_tool_calls false
  json m = {{"role", "assistant"}, {"content", p.content ? json(*p.content) : json(nullptr)}};
  if (p.reasoning) m["reasoning_content"] = *p.reasoning;
  if (!p.tool_calls.empty()) {
    json calls = json::array();
    for (size_t i = 0; i < p.tool_calls.size(); ++i)
      calls.push_back({{"id", id_prefix + std::to_string(i)}, {"type", "function"},
                       {"function", {{"name", p.tool_calls[i].name}, {"arguments", p.tool_calls[i].arguments}}}});
    m["tool_calls"] = calls;
  }
  return m;
}

}  // namespace

struct OpenAiServer::Call {
  HttpServer::ConnId conn = 0;
  std::vector<uint64_t> engine_ids;  // one engine request per prompt
  bool chat = false, stream = false, include_usage = false, echo = false;
  bool parse_tools = false, parse_thinking = false;  // chat output parsed into tool_calls / reasoning_content
  bool single_call = false;                          // parallel_tool_calls false: at most one call
  ToolFormat tool_format = ToolFormat::kNone;        // the call syntax the answer is parsed in (OutputParsing::format)
  bool opened = false;                               // the prompt ends inside an open <think>
  std::unique_ptr<ResponseBuilder> resp;             // a /v1/responses request: its answer's shape
  std::shared_ptr<const ResponsesRequest> resp_req;   // and its conversation (stored with the answer)
  int logprobs = -1;
  std::string id;
  int64_t created = 0;
  struct Choice {
    std::string text, finish_reason;
    int tokens = 0;
    json logprobs = json::array();  // chat: content entries; completion: built at the end
    std::vector<TokenLogprob> raw;
    std::string echo;  // the prompt text when echo is on (completions)
    bool role_sent = false;
    Clock::time_point last_token;
    ReasoningSplitter split{false};  // streamed <think> split (set up in Submit)
    // Tokens generated until </think> appeared (reported as reasoning_tokens when the answer has reasoning).
    int reasoning_tokens = 0;
    bool think_closed = false;
    std::string think_tail;  // the last bytes seen, for a </think> split across events
    // Whether the answer starts in reasoning: the prompt opened <think>, or the text begins with it.
    bool StartsThinking(bool opened) const {
      const size_t b = text.find_first_not_of(" \t\r\n");
      return opened || (b != std::string::npos && text.compare(b, 7, "<think>") == 0);
    }
    // Returns whether the event's tokens were counted as reasoning (those until and with </think>).
    bool CountReasoning(const RequestOutput& ev) {
      if (think_closed) return false;
      reasoning_tokens += static_cast<int>(ev.token_ids.size());
      const std::string window = think_tail + ev.text;
      think_closed = window.find("</think>") != std::string::npos;
      think_tail = window.substr(window.size() > 8 ? window.size() - 8 : 0);
      return true;
    }
    std::unique_ptr<ToolCallStreamer> tools;  // streamed tool calls (chat with tools; set up in Submit)
    // A streamed piece of text into its reasoning and content parts (what is held back, at the end).
    void Split(const std::string& text, bool finished, std::string* reasoning, std::string* content) {
      split.Feed(text, reasoning, content);
      if (finished) split.Finish(reasoning, content);
    }
  };
  std::vector<Choice> choices;
  int unfinished = 0;  // choices not finished
  int prompt_tokens = 0, cached_tokens = 0;
  Clock::time_point start;
  bool first_token_seen = false;
  // Responses with include message.output_text.logprobs: the output text's log-probs. The reasoning's tokens come
  // first (counted as reasoning_tokens); the output text has the rest.
  json OutputTextLogprobs(const Tokenizer& tok, const Choice& ch, const json& message) const {
    if (!resp_req || !resp_req->output_logprobs) return json::array();
    const bool reasoning = message.contains("reasoning_content") && ch.StartsThinking(opened);
    const size_t skip = reasoning ? std::min(ch.raw.size(), static_cast<size_t>(ch.reasoning_tokens)) : 0;
    return LogprobsJson(tok, true, std::vector<TokenLogprob>(ch.raw.begin() + skip, ch.raw.end()), nullptr)["content"];
  }
};

OpenAiServer::OpenAiServer(Engine& engine, const Model& model, OpenAiServerOptions opt)
    : engine_(engine),
      model_(model),
      tok_(*model.tokenizer),
      opt_(std::move(opt)),
      responses_(opt_.max_stored_responses),
      http_(opt_.http, [this](HttpServer::ConnId c, HttpRequest& r) { Handle(c, r); },
            [this](HttpServer::ConnId c) { OnClose(c); }) {
  name_ = opt_.served_model_name.empty() ? fs::path(model.source).filename().string() : opt_.served_model_name;
  chat_ = std::make_unique<ChatFormatter>(model, opt_.chat_template);
  max_prompt_bytes_ = opt_.max_prompt_bytes;
  if (max_prompt_bytes_ == 0) {
    // Every token stands for at most `longest` bytes, so text over max_model_len * longest bytes is more tokens
    // than the context holds. The factor 2 leaves room for normalizers that shrink text (NFKC, stripping).
    size_t longest = 1;
    for (int id = 0; id < tok_.vocab_size(); ++id) longest = std::max(longest, tok_.TokenBytes(id).size());
    max_prompt_bytes_ = 2 * static_cast<size_t>(engine_.max_model_len()) * longest;
  }
  // Nice 5: prompt preparation yields the CPU to the loop and the engine when they compete for it.
  tool_format_ = DetectToolFormat(chat_->source());
  parse_thinking_ = TemplateHasThinking(chat_->source());
  prep_ = std::make_unique<WorkQueue>(opt_.prep_threads, 5);
  prep_small_ = std::make_unique<WorkQueue>(1, 5);
}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::Listen() {
  DI_RETURN_IF_ERROR(http_.Listen());
  DI_LOG_INFO("serving %s on http://%s:%d (OpenAI API at /v1; /health, /metrics)%s", name_.c_str(),
              opt_.http.host.c_str(), http_.port(), opt_.api_key.empty() ? "" : "; API key required");
  return Status::Ok();
}

void OpenAiServer::Run() { http_.Run(); }

void OpenAiServer::Error(HttpServer::ConnId c, int status, const std::string& message, const std::string& type,
                         const std::string& param, const std::string& code) {
  json e = {{"error", {{"message", message}, {"type", type.empty() ? ErrorType(status) : type},
                       {"param", param.empty() ? json(nullptr) : json(param)},
                       {"code", code.empty() ? json(status) : json(code)}}}};
  std::vector<std::pair<std::string, std::string>> headers;
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  if (status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  (status >= 500 ? metrics_.requests_server_error : metrics_.requests_client_error)++;
  http_.Respond(c, status, "application/json", Dump(e) + "\n", std::move(headers));
}

bool OpenAiServer::Authorized(const HttpRequest& req) const {
  if (opt_.api_key.empty()) return true;
  const std::string* h = req.Header("authorization");
  const std::string given = h && h->rfind("Bearer ", 0) == 0 ? h->substr(7) : "";
  // Constant time in the key: every byte of the expected key is compared whatever matches.
  const std::string& want = opt_.api_key;
  unsigned diff = given.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(want[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  return diff == 0;
}

void OpenAiServer::Handle(HttpServer::ConnId c, HttpRequest& req) {
  req.path = CanonicalRoute(req.path);  // llama-server's aliases (/chat/completions, /v1/health...)
  const std::string& p = req.path;
  const bool is_post = req.method == "POST", is_get = req.method == "GET" || req.method == "HEAD";
  if (req.method == "OPTIONS") return Options(c, req);
  // Multi-process: a peer rank silent past a few heartbeats is dead or hung; the job ends at --dist-timeout, and
  // until then health checks and new work get 503 (a load balancer stops sending, clients retry elsewhere).
  const double silence = dist::PeerSilenceSeconds();
  const bool peer_silent = silence > kPeerSilenceSeconds;
  if (p == "/health") {
    if (!is_get) return Error(c, 405, "use GET");
    if (peer_silent) return Error(c, 503, "a peer rank has not answered for " + std::to_string(static_cast<int>(silence)) +
                                              " s (dead or hung); the job ends at --dist-timeout");
    metrics_.requests_ok++;
    return http_.Respond(c, 200, "application/json", "{\"status\":\"ok\"}\n");
  }
  if (p == "/version") {  // vLLM's route (no key needed, like /health): what is serving
    if (!is_get) return Error(c, 405, "use GET");
    metrics_.requests_ok++;
    return http_.Respond(c, 200, "application/json", Dump(json{{"version", DEEPINFER_VERSION}, {"engine", "deepinfer"},
                                                              {"kernels", OpsFor(Device::kCpu).kernels()}}) + "\n");
  }
  if (p == "/metrics") {
    if (!is_get) return Error(c, 405, "use GET");
    metrics_.requests_ok++;
    std::string body = metrics_.Render(engine_.Stats(), name_);
    if (const DistControl* d = engine_.dist()) body += RenderRankMetrics(d->Reports(), d->pc(), name_);
    return http_.Respond(c, 200, "text/plain; version=0.0.4", body);
  }
  if (p.rfind("/v1/responses/", 0) == 0 && p.size() > 14) {  // a stored response (GET /v1/responses/{id})
    if (!Authorized(req)) return Error(c, 401, "missing or invalid API key (Authorization: Bearer KEY)");
    if (!is_get) return Error(c, 405, "use GET");
    const std::string id = PercentDecode(p.substr(14));
    auto object = responses_.Object(id);
    if (!object) return Error(c, 404, "Response with id '" + id.substr(0, 200) + "' not found.", "invalid_request_error", "response_id");
    metrics_.requests_ok++;
    return http_.Respond(c, 200, "application/json", Dump(*object) + "\n");
  }
  const bool model_route = p.rfind("/v1/models/", 0) == 0 && p.size() > 11;
  const bool known = model_route || p == "/v1/models" || p == "/v1/completions" || p == "/v1/chat/completions" || p == "/v1/responses" || p == "/tokenize" ||
                     p == "/detokenize";
  if (!known) return Error(c, 404, "no route for " + req.method + " " + p.substr(0, 200));
  if (!Authorized(req)) return Error(c, 401, "missing or invalid API key (Authorization: Bearer KEY)");
  if (p == "/v1/models" || model_route) {
    if (!is_get) return Error(c, 405, "use GET");
    const json model = {{"id", name_}, {"object", "model"}, {"created", UnixNow()}, {"owned_by", "deepinfer"},
                        {"max_model_len", engine_.max_model_len()}};
    if (model_route) {
      // OpenAI's shape for a missing model: 404, invalid_request_error, code model_not_found.
      const std::string id = PercentDecode(p.substr(11));
      if (id != name_)
        return Error(c, 404, "The model `" + id.substr(0, 200) + "` does not exist.", "invalid_request_error", "model",
                     "model_not_found");
      metrics_.requests_ok++;
      return http_.Respond(c, 200, "application/json", Dump(model) + "\n");
    }
    metrics_.requests_ok++;
    return http_.Respond(c, 200, "application/json", Dump(json{{"object", "list"}, {"data", json::array({model})}}) + "\n");
  }
  if (!is_post) return Error(c, 405, "use POST");
  if (peer_silent && p != "/tokenize" && p != "/detokenize")
    return Error(c, 503, "a peer rank has not answered for " + std::to_string(static_cast<int>(silence)) +
                             " s (dead or hung); the job ends at --dist-timeout");
  // Parsing, chat templates and tokenization run on the prep workers: a megabyte prompt takes a while to
  // tokenize, and the loop must keep serving /health and every other client meanwhile. The workers answer
  // errors themselves (Error and Respond are thread-safe) and hand accepted requests back to the loop.
  // Small bodies have a worker of their own, so a queue of megabyte prompts never delays a short request.
  const uint64_t token = ++prep_token_;
  if (preparing_.insert_or_assign(c, token).second) preparing_count_++;
  WorkQueue& queue = req.body.size() < kSmallBodyBytes ? *prep_small_ : *prep_;
  auto shared_req = std::make_shared<HttpRequest>(std::move(req));
  queue.Submit([this, c, token, shared_req] {
    HttpRequest& r = *shared_req;
    if (r.path == "/tokenize") Tokenize(c, r);
    else if (r.path == "/detokenize") Detokenize(c, r);
    else if (r.path == "/v1/responses") Responses(c, r);
    else Generate(c, r, r.path == "/v1/chat/completions");
    http_.RunOnLoop([this, c, token] {
      auto it = preparing_.find(c);
      if (it != preparing_.end() && it->second == token) {  // a later request on the connection keeps its own
        preparing_.erase(it);
        preparing_count_--;
      }
    });
  });
}

void OpenAiServer::Options(HttpServer::ConnId c, const HttpRequest& req) {
  // A CORS preflight (no credentials, so before authentication): which methods and headers the real request
  // may use. The Access-Control-Allow-Origin line itself is added by the HTTP layer to every answer.
  const std::string* origin = req.Header("origin");
  const std::string* method = req.Header("access-control-request-method");
  if (origin && method && !http_.OriginAllowed(*origin))
    return Error(c, 400, "disallowed CORS origin " + origin->substr(0, 200) + " (--allowed-origins)");
  std::vector<std::pair<std::string, std::string>> headers = {{"Allow", "GET, HEAD, POST, OPTIONS"}};
  if (origin && method) {
    const std::string* asked = req.Header("access-control-request-headers");
    headers.emplace_back("Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    headers.emplace_back("Access-Control-Allow-Headers", asked && !asked->empty() ? *asked : "*");
    headers.emplace_back("Access-Control-Max-Age", "600");
  }
  metrics_.requests_ok++;
  http_.Respond(c, 204, "text/plain", "", std::move(headers));
}

size_t OpenAiServer::PromptBytes(const json& body, bool chat) {
  size_t bytes = 0;
  auto text_of = [&](const json& v) {
    if (v.is_string()) bytes += v.get_ref<const std::string&>().size();
    else if (v.is_array())
      for (const auto& e : v) {
        if (e.is_string()) bytes += e.get_ref<const std::string&>().size();
        else if (e.is_object() && e.contains("text") && e["text"].is_string()) bytes += e["text"].get_ref<const std::string&>().size();
      }
  };
  if (chat) {
    if (auto m = body.find("messages"); m != body.end() && m->is_array())
      for (const auto& msg : *m)
        if (msg.is_object() && msg.contains("content")) text_of(msg["content"]);
  } else if (auto pr = body.find("prompt"); pr != body.end()) {
    text_of(*pr);
  }
  return bytes;
}

void OpenAiServer::Responses(HttpServer::ConnId c, HttpRequest& req) {
  // A Responses request runs as the chat request it is equivalent to; only its answer's shape differs.
  auto body = nlohmann::ordered_json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return Error(c, 400, "the request body is not valid JSON");
  auto rr = ResponsesToChat(body, responses_);
  if (!rr.ok()) {
    const std::string m = rr.status().message();
    const std::string param = m[0] == '\'' ? m.substr(1, m.find('\'', 1) - 1) : "";
    // OpenAI's answer for an unknown previous response: 404, code previous_response_not_found.
    if (rr.status().code() == StatusCode::kNotFound)
      return Error(c, 404, m, "invalid_request_error", param, "previous_response_not_found");
    return Error(c, 400, m, "", param);
  }
  req.body = rr->chat.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  Generate(c, req, true, std::make_shared<const ResponsesRequest>(std::move(*rr)));
}

void OpenAiServer::StoreResponse(const Call& k, const json& message, const std::string& finish_reason, const json& usage) {
  if (!k.resp_req || !k.resp_req->store || responses_.capacity() == 0) return;
  // The conversation as the next turn's chat messages: this input, then the answer (content and calls; reasoning
  // is not fed back, as chat templates drop it from earlier turns).
  nlohmann::ordered_json conversation = k.resp_req->conversation;
  // (A random model's text may not be UTF-8: its bytes become U+FFFD here, as in every answer the server sends.)
  auto copy = [](const json& j) { return nlohmann::ordered_json::parse(j.dump(-1, ' ', false, json::error_handler_t::replace)); };
  nlohmann::ordered_json answer = {{"role", "assistant"}, {"content", copy(message["content"])}};
  if (message.contains("tool_calls")) answer["tool_calls"] = copy(message["tool_calls"]);
  conversation.push_back(std::move(answer));
  responses_.Put(k.resp->id(), std::move(conversation), k.resp->Object(message, finish_reason, usage));
}

void OpenAiServer::Generate(HttpServer::ConnId c, const HttpRequest& req, bool chat, std::shared_ptr<const ResponsesRequest> responses) {
  // Runs on a prep worker (see Handle).
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) return Error(c, 400, "the request body is not valid JSON");
  if (!body.is_object()) return Error(c, 400, "the request body must be a JSON object");
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return Error(c, 400, "'model' must be a string", "", "model");
    if (m->get<std::string>() != name_)
      return Error(c, 404, "The model `" + m->get<std::string>().substr(0, 200) + "` does not exist.", "", "model", "model_not_found");
  }
  if (Status u = CheckUnsupportedFields(body, chat); !u.ok()) {
    const std::string& msg = u.message();
    return Error(c, 400, msg, "", msg.substr(1, msg.find('\'', 1) - 1));
  }
  // The cheap bound first: text this long cannot fit the context, so it is refused before it is tokenized.
  if (const size_t bytes = PromptBytes(body, chat); bytes > max_prompt_bytes_)
    return Error(c, 400, std::string(responses ? "the input holds " : chat ? "the messages hold " : "the prompt holds ") +
                             std::to_string(bytes) + " bytes of text; the limit is " + std::to_string(max_prompt_bytes_) +
                             " bytes (--max-prompt-bytes)", "", responses ? "input" : chat ? "messages" : "prompt");
  RequestParams defaults;
  if (chat) defaults.max_tokens = std::max(1, engine_.max_model_len() - 1);  // chat: until the context is full
  auto params = ParseRequestParams(body, defaults);
  if (!params.ok()) return Error(c, 400, params.status().message());
  std::vector<std::vector<int32_t>> prompts(1);
  std::vector<int32_t>& prompt = prompts[0];
  const bool echo = !chat && body.value("echo", false) == true;
  if (chat) {
    auto ids = chat_->EncodeRequest(nlohmann::ordered_json::parse(req.body), body.value("add_generation_prompt", true));
    if (!ids.ok()) return Error(c, 400, ids.status().message(), "", "messages");
    prompt = std::move(*ids);
  } else {
    // A list of strings (or of token-id lists) is a batch: one engine request per prompt, choices numbered
    // prompt_index * n + sample_index, as OpenAI and vLLM do.
    json list = json::array();
    if (auto pr = body.find("prompt"); pr != body.end() && pr->is_array() && !pr->empty() && ((*pr)[0].is_string() || (*pr)[0].is_array()))
      list = *pr;
    else
      list.push_back(body.contains("prompt") ? body["prompt"] : body.value("prompt_token_ids", json(nullptr)));
    if (list.size() > 256) return Error(c, 400, "at most 256 prompts per request", "", "prompt");
    prompts.clear();
    for (const auto& one : list) {
      auto ids = ParsePrompt(json{{"prompt", one}}, tok_);
      if (!ids.ok()) return Error(c, 400, ids.status().message(), "", "prompt");
      prompts.push_back(std::move(*ids));
    }
  }
  bool stream = false, include_usage = false;
  if (auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return Error(c, 400, "'stream' must be true or false", "", "stream");
    stream = s->get<bool>();
  }
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object())
    include_usage = so->value("include_usage", false) == true;
  auto parsing = ChatOutputParsing(body, chat, &*params);
  if (!parsing.ok()) {
    const std::string msg = parsing.status().message();  // starts with the quoted field
    return Error(c, 400, msg, "", msg.substr(1, msg.find('\'', 1) - 1));
  }
  // Every prompt is checked before any is queued: a bad one rejects the whole batch. Add does not check again.
  std::vector<ValidatedRequest> checked;
  checked.reserve(prompts.size());
  for (auto& p : prompts) {
    auto v = engine_.Check(std::move(p), *params);
    if (!v.ok()) return Error(c, 400, v.status().message());
    checked.push_back(std::move(*v));
  }
  // The rest runs on the loop thread, which owns calls_: queueing, and the client may have gone meanwhile.
  auto checked_ptr = std::make_shared<std::vector<ValidatedRequest>>(std::move(checked));
  auto params_ptr = std::make_shared<RequestParams>(std::move(*params));
  OutputParsing parse = *parsing;
  parse.responses = std::move(responses);
  http_.RunOnLoop([=, this] {
    Submit(c, chat, stream, include_usage, echo, parse, *params_ptr, std::move(*checked_ptr));
  });
}

void OpenAiServer::Submit(HttpServer::ConnId c, bool chat, bool stream, bool include_usage, bool echo, OutputParsing parse,
                          const RequestParams& params, std::vector<ValidatedRequest> checked) {
  if (!preparing_.count(c)) return;  // the client disconnected while its request was prepared
  if (metrics_.in_flight.load() >= opt_.max_pending) {
    metrics_.requests_rejected++;
    return Error(c, 429, "the server is at its queue limit (" + std::to_string(opt_.max_pending) + " requests); retry later");
  }
  auto call = std::make_shared<Call>();
  call->conn = c;
  call->chat = chat;
  call->stream = stream;
  call->include_usage = include_usage;
  call->echo = echo;
  call->parse_tools = parse.tools;
  call->parse_thinking = parse.thinking;
  call->tool_format = parse.format;
  call->single_call = parse.single_call;
  if (parse.responses) {
    call->resp = std::make_unique<ResponseBuilder>("resp_" + std::to_string(UnixNow()) + "_" + std::to_string(next_id_), UnixNow(),
                                                   name_, parse.responses->reasoning_summary, parse.responses->echo);
    call->resp_req = parse.responses;
  }
  call->logprobs = params.logprobs;
  call->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(UnixNow()) + "-" + std::to_string(next_id_++);
  call->created = UnixNow();
  const int n = params.n;
  call->choices.resize(checked.size() * n);
  call->unfinished = static_cast<int>(call->choices.size());
  if (chat && call->parse_thinking) {
    // Whether the generation prompt left a <think> open (its last tokens suffice; special tokens kept, since
    // <think> may be one).
    const auto& pr = checked[0].prompt();
    const std::vector<int32_t> tail(pr.size() > 32 ? pr.end() - 32 : pr.begin(), pr.end());
    call->opened = PromptOpensThinking(tok_.Decode(tail, /*skip_special=*/false));
    for (auto& ch : call->choices) ch.split = ReasoningSplitter(call->opened);
  }
  if (chat && call->parse_tools)
    for (auto& ch : call->choices) ch.tools = std::make_unique<ToolCallStreamer>(call->tool_format, call->single_call ? 1 : 1 << 30);
  for (size_t p = 0; p < checked.size(); ++p) {
    call->prompt_tokens += static_cast<int>(checked[p].prompt().size());
    if (echo) {
      const std::string text = tok_.Decode(checked[p].prompt());
      for (int i = 0; i < n; ++i) call->choices[p * n + i].echo = text;
    }
  }
  call->start = Clock::now();
  calls_[c] = call;
  metrics_.in_flight++;
  if (stream) http_.StartStream(c, 200, "text/event-stream");
  for (size_t p = 0; p < checked.size(); ++p) {
    const int offset = static_cast<int>(p) * n;
    auto id = engine_.Add(std::move(checked[p]), [this, call, offset](const RequestOutput& ev) { HandOff(call, offset, ev); });
    if (id.ok()) {
      call->engine_ids.push_back(*id);
      continue;
    }
    // Only a stopping engine refuses a validated request. Cancel what was queued; report the error.
    const bool forget = calls_.erase(c) > 0;
    for (uint64_t e : call->engine_ids) engine_.Abort(e);
    // Choices of prompts never queued will not finish: drop them; whoever reaches zero ends the call.
    call->unfinished -= static_cast<int>((checked.size() - p) * n);
    if (call->unfinished == 0 && forget) metrics_.in_flight--;
    if (stream) {  // headers are out: report in-band, as vLLM does, then end the stream
      json e = {{"error", {{"message", id.status().message()}, {"type", "server_error"}, {"param", nullptr}, {"code", 503}}}};
      http_.SendChunk(c, "data: " + Dump(e) + "\n\n");
      http_.SendChunk(c, "data: [DONE]\n\n");
      http_.EndStream(c);
      metrics_.requests_server_error++;
      return;
    }
    return Error(c, 503, id.status().message());
  }
  metrics_.prompt_tokens += call->prompt_tokens;
}

void OpenAiServer::HandOff(std::shared_ptr<Call> call, int choice_offset, const RequestOutput& ev) {
  // Runs on the engine thread, inside its host phase, which the overlap loop keeps short: a copy of the event
  // and, for the first of a batch, a wakeup. JSON, metrics and SSE happen on the HTTP thread (DrainOutputs).
  bool first;
  {
    std::lock_guard<std::mutex> lock(outputs_mu_);
    first = outputs_.empty();
    outputs_.push_back({std::move(call), choice_offset, ev});
  }
  if (first) http_.RunOnLoop([this] { DrainOutputs(); });
}

void OpenAiServer::DrainOutputs() {
  {
    std::lock_guard<std::mutex> lock(outputs_mu_);
    draining_.swap(outputs_);  // both keep their capacity: no allocation per batch
  }
  for (PendingOutput& o : draining_) OnOutput(o.call, o.event, o.choice_offset);
  draining_.clear();
}

// The usage with completion_tokens_details.reasoning_tokens: the tokens up to </think> when the answer has
// reasoning, else 0.
static json WithReasoningTokens(const json& usage, const json& message, int reasoning_tokens) {
  json u = usage;
  auto r = message.find("reasoning_content");
  const bool has = r != message.end() && r->is_string() && !r->get_ref<const std::string&>().empty();
  u["completion_tokens_details"] = {{"reasoning_tokens", has ? reasoning_tokens : 0}};
  return u;
}

void OpenAiServer::OnOutput(const std::shared_ptr<Call>& call, const RequestOutput& ev, int offset) {
  // Runs on the HTTP thread, in the engine's order of events.
  Call& k = *call;
  const int index = offset + ev.index;
  Call::Choice& ch = k.choices[index];
  const auto now = Clock::now();
  if (!ev.token_ids.empty()) {
    if (!k.first_token_seen) {
      k.first_token_seen = true;
      metrics_.ttft.Observe(std::chrono::duration<double>(now - k.start).count());
    } else if (ch.tokens > 0) {
      metrics_.inter_token.Observe(std::chrono::duration<double>(now - ch.last_token).count());
    }
    ch.last_token = now;
  }
  ch.tokens += static_cast<int>(ev.token_ids.size());
  ch.text += ev.text;
  const bool reasoning_event = k.parse_thinking && ch.CountReasoning(ev) && ch.StartsThinking(k.opened);
  if (ev.index == 0 && !ev.token_ids.empty() && ch.tokens == static_cast<int>(ev.token_ids.size()))
    k.cached_tokens += ev.cached_tokens;  // once per prompt
  metrics_.generation_tokens += ev.token_ids.size();
  json lp_delta = nullptr;
  if (k.logprobs >= 0 && !ev.logprobs.empty()) {
    ch.raw.insert(ch.raw.end(), ev.logprobs.begin(), ev.logprobs.end());
    if (k.stream) lp_delta = LogprobsJson(tok_, k.chat, ev.logprobs, nullptr);  // no text_offset in deltas
  }
  if (ev.finished) {
    ch.finish_reason = ev.finish_reason;
    (ev.finish_reason == "stop" ? metrics_.finish_stop : ev.finish_reason == "length" ? metrics_.finish_length : metrics_.finish_abort)++;
  }
  int completion_tokens = 0;
  for (const auto& x : k.choices) completion_tokens += x.tokens;
  const json usage = {{"prompt_tokens", k.prompt_tokens}, {"completion_tokens", completion_tokens},
                      {"total_tokens", k.prompt_tokens + completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", k.cached_tokens}}}};
  const char* object = k.chat ? "chat.completion.chunk" : "text_completion";
  if (k.stream && k.resp) {
    // Responses events: reasoning streams into its own item, then the text; with tools the text goes through the
    // tool-call parser first, and each call's item and argument fragments stream as they are generated.
    std::string events = ch.role_sent ? "" : k.resp->Start();
    ch.role_sent = true;
    std::string r, text = ev.text;
    if (k.parse_thinking) {
      text.clear();
      ch.Split(ev.text, ev.finished, &r, &text);
      events += k.resp->ReasoningDelta(r);
    }
    // The output text's log-probs: this event's tokens unless they were reasoning.
    const json lps = k.resp_req->output_logprobs && !reasoning_event && !ev.logprobs.empty()
                         ? LogprobsJson(tok_, true, ev.logprobs, nullptr)["content"] : json::array();
    if (!k.parse_tools) {
      events += k.resp->TextDelta(text, lps);
    } else {
      ToolStreamDelta td;
      ch.tools->Feed(text, &td);
      if (ev.finished) ch.tools->Finish(&td);
      events += k.resp->TextDelta(td.content, lps);
      const std::string id_prefix = "call_" + k.id + "_0_";
      for (const ToolCallDelta& d : td.calls) {
        const std::string call_id = id_prefix + std::to_string(d.index);
        if (d.first) events += k.resp->CallStart(d.index, call_id, d.name);
        events += k.resp->CallArgumentsDelta(d.index, call_id, d.arguments);
      }
    }
    if (ev.finished) {
      const json message = AssistantMessage(ch.text, k.tool_format, k.parse_tools, k.parse_thinking, k.single_call, k.opened,
                                            "call_" + k.id + "_0_");
      const json u = WithReasoningTokens(usage, message, ch.reasoning_tokens);
      events += k.resp->Finish(message, ev.finish_reason, u, k.OutputTextLogprobs(tok_, ch, message));
      StoreResponse(k, message, ev.finish_reason, u);
    }
    if (!events.empty()) http_.SendChunk(k.conn, events);
  } else if (k.stream) {
    std::string text = ev.text;
    if (!k.chat && k.echo && !ch.role_sent) text = ch.echo + text;
    // With tools the answer goes through the tool-call parser as it streams (tool_stream.h): content deltas
    // before the first call, then per call a delta with its index, id, type and name (arguments "") and its
    // arguments in fragments as they are generated, the shape OpenAI streams calls in; a <think> template's
    // reasoning is split off first. Without tools, a <think> template's text goes through the ReasoningSplitter:
    // reasoning_content deltas, then content.
    const bool held = k.chat && k.parse_tools;
    std::vector<json> deltas;  // chat: what this event sends, one chunk each
    if (k.chat) {
      json delta = json::object();
      if (!ch.role_sent) delta["role"] = "assistant";
      if (held) {
        std::string r, c = text;
        if (k.parse_thinking) {
          c.clear();
          ch.Split(text, ev.finished, &r, &c);
        }
        ToolStreamDelta td;
        ch.tools->Feed(c, &td);
        if (ev.finished) ch.tools->Finish(&td);
        if (!r.empty()) delta["reasoning_content"] = r;
        if (!td.content.empty()) delta["content"] = td.content;
        if (!td.calls.empty()) {
          if (!delta.empty()) deltas.push_back(std::move(delta));
          delta = json::object();
        }
        const std::string id_prefix = "call_" + k.id + "_" + std::to_string(index) + "_";
        for (const ToolCallDelta& d : td.calls) {
          if (d.first)
            deltas.push_back({{"tool_calls", json::array({{{"index", d.index}, {"id", id_prefix + std::to_string(d.index)},
                                                            {"type", "function"},
                                                            {"function", {{"name", d.name}, {"arguments", ""}}}}})}});
          if (!d.arguments.empty())
            deltas.push_back({{"tool_calls", json::array({{{"index", d.index}, {"function", {{"arguments", d.arguments}}}}})}});
        }
      } else if (k.parse_thinking) {
        std::string r, c;
        ch.Split(text, ev.finished, &r, &c);
        if (!r.empty()) delta["reasoning_content"] = r;
        if (!c.empty() || (!ch.role_sent && r.empty())) delta["content"] = c;
      } else if (!text.empty() || !ch.role_sent) {
        delta["content"] = text;
      }
      if (!delta.empty()) deltas.push_back(std::move(delta));
      if (deltas.empty() && (ev.finished || !lp_delta.is_null())) deltas.push_back(json::object());
    } else if (!text.empty() || ev.finished || !ch.role_sent || !lp_delta.is_null()) {
      deltas.push_back(nullptr);
    }
    const bool calls = held && ev.finished && ev.finish_reason == "stop" && !ch.tools->calls().empty();
    for (size_t d = 0; d < deltas.size(); ++d) {
      const bool last = d + 1 == deltas.size();
      json choice = {{"index", index}, {"logprobs", d == 0 ? lp_delta : json(nullptr)},
                     {"finish_reason", ev.finished && last ? json(calls ? "tool_calls" : ev.finish_reason) : json(nullptr)}};
      if (k.chat) choice["delta"] = std::move(deltas[d]);
      else choice["text"] = text;
      ch.role_sent = true;
      json chunk = {{"id", k.id}, {"object", object}, {"created", k.created}, {"model", name_}, {"choices", json::array({choice})}};
      if (k.include_usage) chunk["usage"] = nullptr;
      http_.SendChunk(k.conn, "data: " + Dump(chunk) + "\n\n");
    }
  }
  if (!ev.finished || --k.unfinished > 0) return;
  // The whole request is done: forget it first, so a client closing right after the answer is not counted
  // (or aborted) as a disconnect.
  if (auto it = calls_.find(k.conn); it != calls_.end() && it->second == call) calls_.erase(it);
  metrics_.e2e.Observe(std::chrono::duration<double>(now - k.start).count());
  if (k.stream && k.resp) {
    http_.EndStream(k.conn);
  } else if (k.stream) {
    if (k.include_usage) {
      json chunk = {{"id", k.id}, {"object", object}, {"created", k.created}, {"model", name_}, {"choices", json::array()}, {"usage", usage}};
      http_.SendChunk(k.conn, "data: " + Dump(chunk) + "\n\n");
    }
    http_.SendChunk(k.conn, "data: [DONE]\n\n");
    http_.EndStream(k.conn);
  } else {
    json choices = json::array();
    for (size_t i = 0; i < k.choices.size(); ++i) {
      const Call::Choice& x = k.choices[i];
      json lp = nullptr;
      if (k.logprobs >= 0) {
        const size_t text_start = x.echo.size();
        lp = LogprobsJson(tok_, k.chat, x.raw, &text_start);
      }
      json choice = {{"index", i}, {"logprobs", lp}, {"finish_reason", x.finish_reason}};
      if (k.chat) {
        choice["message"] = AssistantMessage(x.text, k.tool_format, k.parse_tools, k.parse_thinking, k.single_call, k.opened,
                                             "call_" + k.id + "_" + std::to_string(i) + "_");
        if (choice["message"].contains("tool_calls") && x.finish_reason == "stop") choice["finish_reason"] = "tool_calls";
      }
      else choice["text"] = x.echo + x.text;
      choices.push_back(std::move(choice));
    }
    json out = {{"id", k.id}, {"object", k.chat ? "chat.completion" : "text_completion"}, {"created", k.created},
                {"model", name_}, {"choices", choices}, {"usage", usage}};
    if (k.resp) {
      const json u = WithReasoningTokens(usage, choices[0]["message"], k.choices[0].reasoning_tokens);
      out = k.resp->Object(choices[0]["message"], k.choices[0].finish_reason, u, k.OutputTextLogprobs(tok_, k.choices[0], choices[0]["message"]));
      StoreResponse(k, choices[0]["message"], k.choices[0].finish_reason, u);
    }
    http_.Respond(k.conn, 200, "application/json", Dump(out) + "\n");
  }
  metrics_.requests_ok++;
  metrics_.in_flight--;
}

StatusOr<OpenAiServer::OutputParsing> OpenAiServer::ChatOutputParsing(const json& body, bool chat, RequestParams* params) const {
  OutputParsing parse;
  if (!chat) return parse;
  parse.thinking = parse_thinking_;
  auto tools = body.find("tools");
  const bool has_tools = tools != body.end() && tools->is_array() && !tools->empty();
  bool parallel = true;
  if (auto pt = body.find("parallel_tool_calls"); pt != body.end() && !pt->is_null()) {
    if (!pt->is_boolean()) return InvalidArgument("'parallel_tool_calls' must be true or false");
    parallel = pt->get<bool>();
  }
  const char* kChoices = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  std::string choice = has_tools ? "auto" : "none", named;
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
    } else if (tc->is_object()) {
      const json* fn = tc->contains("function") ? &(*tc)["function"] : nullptr;
      if (tc->value("type", std::string("function")) != "function" || !fn || !fn->is_object() || !fn->contains("name") ||
          !(*fn)["name"].is_string())
        return InvalidArgument(kChoices);
      choice = "named";
      named = (*fn)["name"].get<std::string>();
      if (named.empty()) return InvalidArgument("'tool_choice.function.name' is empty");
    } else {
      return InvalidArgument(kChoices);
    }
  }
  if (choice != "none" && choice != "auto" && choice != "required" && choice != "named") return InvalidArgument(kChoices);
  if (choice == "none") return parse;  // tools may be shown to the template, but calls are not parsed
  if (!has_tools) return InvalidArgument("'tool_choice' is \"" + choice + "\" but no 'tools' are given");
  parse.format = tool_format_;
  if (tool_format_ == ToolFormat::kNone) {
    // Forced calls need no parser of the template's: the grammar makes the model write them in a syntax deepinfer
    // reads (the Llama-3.x JSON call, name as a literal, arguments from the schema), and they come back as
    // tool_calls, as vLLM serves named and required tool choice on any model. "auto" would need the model to
    // choose a syntax of its own: that needs the template's.
    if (choice == "auto")
      return InvalidArgument("'tools': this model's chat template has no tool-call format deepinfer can parse (tool_choice "
                             "\"required\" or a named function work on any model)");
    parse.format = ToolFormat::kLlama3Json;
  }
  parse.tools = true;
  // A named function is called once (as OpenAI and vLLM answer a forced function).
  if (choice == "named") parallel = false;
  parse.single_call = !parallel;
  if (choice == "required" || choice == "named") {
    // Enforced by a grammar over the template's call syntax and each function's parameter schema.
    if (params->grammar)
      return InvalidArgument("'tool_choice' \"" + choice + "\" constrains the output itself; it cannot be combined with "
                             "response_format / structured_outputs / guided_*");
    DI_ASSIGN_OR_RETURN(const grammar::JsonWhitespace ws, JsonWhitespaceOf(body));
    auto gbnf = ToolCallGbnf(*tools, parse.format, named, parallel, ws);
    if (!gbnf.ok()) return gbnf.status();  // it names the field: tools[i].function.parameters or tool_choice
    auto g = grammar::CompileGbnf(*gbnf);
    if (!g.ok()) return Internal("tool-call grammar failed to compile: " + g.status().message());
    params->grammar = *g;
    params->grammar_source = std::move(*gbnf);
  }
  return parse;
}

void OpenAiServer::OnClose(HttpServer::ConnId c) {
  if (preparing_.erase(c) > 0) {
    preparing_count_--;
    metrics_.requests_aborted_by_client++;
  }
  auto it = calls_.find(c);
  if (it == calls_.end()) return;
  std::shared_ptr<Call> call = std::move(it->second);
  calls_.erase(it);
  metrics_.requests_aborted_by_client++;
  for (uint64_t id : call->engine_ids) engine_.Abort(id);  // frees their KV; final events still come (dropped)
}

void OpenAiServer::Tokenize(HttpServer::ConnId c, const HttpRequest& req) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return Error(c, 400, "the request body must be a JSON object");
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    auto text = chat_->RenderRequest(nlohmann::ordered_json::parse(req.body), body.value("add_generation_prompt", true));
    if (!text.ok()) return Error(c, 400, text.status().message(), "", "messages");
    ids = tok_.Encode(*text, false);
  } else {
    auto p = body.find("prompt");
    if (p == body.end() || !p->is_string()) return Error(c, 400, "'prompt' (a string) or 'messages' is required", "", "prompt");
    bool special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end() && a->is_boolean()) special = a->get<bool>();
    ids = tok_.Encode(p->get<std::string>(), special && tok_.add_bos() && tok_.bos_id() >= 0);
  }
  metrics_.requests_ok++;
  http_.Respond(c, 200, "application/json",
                Dump({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.max_model_len()}}) + "\n");
}

void OpenAiServer::Detokenize(HttpServer::ConnId c, const HttpRequest& req) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
    return Error(c, 400, "'tokens' (a list of token ids) is required", "", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok_.vocab_size())
      return Error(c, 400, "'tokens' must hold token ids in [0, " + std::to_string(tok_.vocab_size()) + ")", "", "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  metrics_.requests_ok++;
  http_.Respond(c, 200, "application/json", Dump({{"prompt", tok_.Decode(ids)}}) + "\n");
}

}  // namespace deepinfer
