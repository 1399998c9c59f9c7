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
#include "protocol/prompt_digest.h"
#include "grammar/compile.h"
#include "server/answer_encoder.h"
#include "server/answer_json.h"
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

HttpServerOptions HttpOptions(const api::ServerOptions& o) {
  HttpServerOptions h;
  h.host = o.host;
  h.port = o.port;
  h.limits.max_body_bytes = o.max_body_bytes;
  h.max_connections = o.max_connections;
  h.request_timeout_s = o.request_timeout_s;
  h.idle_timeout_s = o.idle_timeout_s;
  h.allowed_origins = SplitOrigins(o.allowed_origins);
  return h;
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

}  // namespace

OpenAiServer::OpenAiServer(Engine& engine, const Model& model, api::ServerOptions opt)
    : engine_(engine),
      model_(model),
      tok_(*model.tokenizer),
      opt_(std::move(opt)),
      http_(HttpOptions(opt_), [this](HttpServer::ConnId c, HttpRequest& r) { Handle(c, r); },
            [this](HttpServer::ConnId c) { OnClose(c); }),
      responses_(opt_.max_stored_responses) {
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
  if (tool_format_ == ToolFormat::kHarmony) {
    harmony_ = FindHarmonyTokens(tok_);
    if (!harmony_.usable()) {  // a Harmony template over a vocabulary without its markers: nothing to parse
      DI_LOG_WARN("the chat template is Harmony's (gpt-oss) but the vocabulary lacks its special tokens: answers are "
                  "not parsed");
      tool_format_ = ToolFormat::kNone;
    }
  }
  if (opt_.webui) webui_ = std::make_unique<WebUi>();
  prep_ = std::make_unique<WorkQueue>(opt_.prep_threads, 5);
  prep_small_ = std::make_unique<WorkQueue>(1, 5);
  KvEventPublisherOptions kv_opt;
  kv_opt.model_name = name_;
  kv_opt.prompt_digest = prompt_digest_ = PromptDigest(tok_, chat_->source());
  kv_opt.max_hashes_per_snapshot_event = opt_.kv_events_slice;
  kv_events_ = std::make_unique<KvEventPublisher>(engine_, http_, kv_opt);
}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::Listen() {
  DI_RETURN_IF_ERROR(http_.Listen());
  DI_LOG_INFO("serving %s on http://%s:%d (%sOpenAI API at /v1; /health, /metrics)%s", name_.c_str(),
              opt_.host.c_str(), http_.port(), webui_ ? "web chat at /; " : "",
              opt_.api_key.empty() ? "" : "; API key required");
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
  http_.Respond(c, status, "application/json", DumpJson(e) + "\n", std::move(headers));
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
  if (webui_ && (p == "/" || p == "/index.html")) {
    // No key needed for the page itself: it holds no data, and asks for the key its API calls then send.
    if (!is_get) return Error(c, 405, "use GET");
    WebUi::Answer a = webui_->Get(req.Header("if-none-match"), req.Header("accept-encoding"), req.method == "HEAD");
    metrics_.requests_ok++;
    return http_.Respond(c, a.status, "text/html; charset=utf-8", std::move(a.body), std::move(a.headers));
  }
  if (p == "/version") {  // vLLM's route (no key needed, like /health): what is serving
    if (!is_get) return Error(c, 405, "use GET");
    metrics_.requests_ok++;
    return http_.Respond(c, 200, "application/json", DumpJson(json{{"version", DEEPINFER_VERSION}, {"engine", "deepinfer"},
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
    return http_.Respond(c, 200, "application/json", DumpJson(*object) + "\n");
  }
  if (p == "/v1/kv_events") {
    if (!Authorized(req)) return Error(c, 401, "missing or invalid API key (Authorization: Bearer KEY)");
    if (!is_get) return Error(c, 405, "use GET");
    metrics_.requests_ok++;
    return kv_events_->Subscribe(c);
  }
  const bool model_route = p.rfind("/v1/models/", 0) == 0 && p.size() > 11;
  const bool known = model_route || p == "/v1/models" || p == "/v1/completions" || p == "/v1/chat/completions" || p == "/v1/responses" || p == "/tokenize" ||
                     p == "/detokenize";
  if (!known) return Error(c, 404, "no route for " + req.method + " " + p.substr(0, 200));
  if (!Authorized(req)) return Error(c, 401, "missing or invalid API key (Authorization: Bearer KEY)");
  if (p == "/v1/models" || model_route) {
    if (!is_get) return Error(c, 405, "use GET");
    // kv_digest: the model and KV identity (kv_identity.h); prompt_digest: what turns requests into token ids
    // (protocol/prompt_digest.h), which `deepinfer route --model` compares with its own.
    const json model = {{"id", name_}, {"object", "model"}, {"created", UnixNow()}, {"owned_by", "deepinfer"},
                        {"max_model_len", engine_.max_model_len()},
                        {"kv_digest", KvEventPublisher::Hex(engine_.model_digest())},
                        {"prompt_digest", KvEventPublisher::Hex(prompt_digest_)}};
    if (model_route) {
      // OpenAI's shape for a missing model: 404, invalid_request_error, code model_not_found.
      const std::string id = PercentDecode(p.substr(11));
      if (id != name_)
        return Error(c, 404, "The model `" + id.substr(0, 200) + "` does not exist.", "invalid_request_error", "model",
                     "model_not_found");
      metrics_.requests_ok++;
      return http_.Respond(c, 200, "application/json", DumpJson(model) + "\n");
    }
    metrics_.requests_ok++;
    return http_.Respond(c, 200, "application/json", DumpJson(json{{"object", "list"}, {"data", json::array({model})}}) + "\n");
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
  bool opens_thinking = false;
  if (chat && parse_thinking_) {
    // Whether the generation prompt left a <think> open (its last tokens suffice; special tokens kept, since
    // <think> may be one).
    const std::vector<int32_t> tail(prompt.size() > 32 ? prompt.end() - 32 : prompt.begin(), prompt.end());
    opens_thinking = PromptOpensThinking(tok_.Decode(tail, /*skip_special=*/false));
  }
  auto parsing = ChatOutputParsing(body, chat, opens_thinking, &*params);
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
  AnswerShape shape;
  shape.endpoint = responses ? Endpoint::kResponses : chat ? Endpoint::kChat : Endpoint::kCompletions;
  shape.stream = stream;
  shape.include_usage = include_usage;
  shape.echo = echo;
  shape.opens_thinking = opens_thinking;
  shape.parse = *parsing;
  shape.responses = std::move(responses);
  http_.RunOnLoop([=, this] { Submit(c, shape, *params_ptr, std::move(*checked_ptr)); });
}

void OpenAiServer::Submit(HttpServer::ConnId c, const AnswerShape& shape, const RequestParams& params,
                          std::vector<ValidatedRequest> checked) {
  if (!preparing_.count(c)) return;  // the client disconnected while its request was prepared
  if (metrics_.in_flight.load() >= opt_.max_pending) {
    metrics_.requests_rejected++;
    return Error(c, 429, "the server is at its queue limit (" + std::to_string(opt_.max_pending) + " requests); retry later");
  }
  auto call = std::make_shared<ApiCall>();
  call->conn = c;
  call->shape = shape;
  const bool chat = call->chat();
  call->logprobs = params.logprobs;
  call->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(UnixNow()) + "-" + std::to_string(next_id_);
  call->created = UnixNow();
  switch (shape.endpoint) {
    case Endpoint::kCompletions: call->encoder = MakeCompletionsEncoder(tok_, name_); break;
    case Endpoint::kChat: call->encoder = MakeChatEncoder(tok_, name_); break;
    case Endpoint::kResponses:
      call->encoder = MakeResponsesEncoder(tok_, name_, "resp_" + std::to_string(UnixNow()) + "_" + std::to_string(next_id_),
                                           UnixNow(), shape.responses, responses_);
      break;
  }
  next_id_++;
  const int n = params.n;
  call->choices.resize(checked.size() * n);
  call->unfinished = static_cast<int>(call->choices.size());
  if (chat && shape.parse.thinking) {
    call->opened = shape.opens_thinking;
    for (auto& ch : call->choices) ch.split = ReasoningSplitter(call->opened);
  }
  if (chat && shape.parse.harmony)
    for (auto& ch : call->choices)
      ch.harmony = std::make_unique<HarmonyParser>(tok_, harmony_, shape.parse.tools, shape.parse.single_call ? 1 : 1 << 30);
  if (chat && shape.parse.tools)
    for (auto& ch : call->choices)
      ch.tools = std::make_unique<ToolCallStreamer>(shape.parse.format, shape.parse.single_call ? 1 : 1 << 30);
  for (size_t p = 0; p < checked.size(); ++p) {
    call->prompt_tokens += static_cast<int>(checked[p].prompt().size());
    if (shape.echo) {
      const std::string text = tok_.Decode(checked[p].prompt());
      for (int i = 0; i < n; ++i) call->choices[p * n + i].echo = text;
    }
  }
  call->start = Clock::now();
  calls_[c] = call;
  metrics_.in_flight++;
  if (shape.stream) http_.StartStream(c, 200, "text/event-stream");
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
    if (shape.stream) {  // headers are out: report in-band, as vLLM does, then end the stream
      json e = {{"error", {{"message", id.status().message()}, {"type", "server_error"}, {"param", nullptr}, {"code", 503}}}};
      http_.SendChunk(c, "data: " + DumpJson(e) + "\n\n");
      http_.SendChunk(c, "data: [DONE]\n\n");
      http_.EndStream(c);
      metrics_.requests_server_error++;
      return;
    }
    return Error(c, 503, id.status().message());
  }
  metrics_.prompt_tokens += call->prompt_tokens;
}

void OpenAiServer::HandOff(std::shared_ptr<ApiCall> call, int choice_offset, const RequestOutput& ev) {
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

void OpenAiServer::OnOutput(const std::shared_ptr<ApiCall>& call, const RequestOutput& ev, int offset) {
  // Runs on the HTTP thread, in the engine's order of events. What every endpoint shares is here; the bytes
  // are the call's encoder's (answer_encoder.h).
  ApiCall& k = *call;
  const int index = offset + ev.index;
  ApiCall::Choice& ch = k.choices[index];
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
  if (k.shape.parse.harmony) ch.token_ids.insert(ch.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
  const bool reasoning_event = k.shape.parse.thinking && ch.CountReasoning(ev) && ch.StartsThinking(k.opened);
  if (ev.index == 0 && !ev.token_ids.empty() && ch.tokens == static_cast<int>(ev.token_ids.size()))
    k.cached_tokens += ev.cached_tokens;  // once per prompt
  metrics_.generation_tokens += ev.token_ids.size();
  if (k.logprobs >= 0 && !ev.logprobs.empty()) ch.raw.insert(ch.raw.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (ev.finished) {
    ch.finish_reason = ev.finish_reason;
    (ev.finish_reason == "stop" ? metrics_.finish_stop : ev.finish_reason == "length" ? metrics_.finish_length : metrics_.finish_abort)++;
  }
  const json usage = k.Usage();
  if (k.shape.stream) {
    const std::string bytes = k.encoder->StreamEvent(k, index, ev, reasoning_event, usage);
    if (!bytes.empty()) http_.SendChunk(k.conn, bytes);
  }
  if (!ev.finished || --k.unfinished > 0) return;
  // The whole request is done: forget it first, so a client closing right after the answer is not counted
  // (or aborted) as a disconnect.
  if (auto it = calls_.find(k.conn); it != calls_.end() && it->second == call) calls_.erase(it);
  metrics_.e2e.Observe(std::chrono::duration<double>(now - k.start).count());
  if (k.shape.stream) {
    const std::string bytes = k.encoder->StreamEnd(k, usage);
    if (!bytes.empty()) http_.SendChunk(k.conn, bytes);
    http_.EndStream(k.conn);
  } else {
    http_.Respond(k.conn, 200, "application/json", DumpJson(k.encoder->Body(k, usage)) + "\n");
  }
  metrics_.requests_ok++;
  metrics_.in_flight--;
}

StatusOr<OutputParsing> OpenAiServer::ChatOutputParsing(const json& body, bool chat, bool prompt_opens_thinking,
                                                        RequestParams* params) const {
  OutputParsing parse;
  if (!chat) return parse;
  parse.thinking = parse_thinking_;
  parse.harmony = tool_format_ == ToolFormat::kHarmony;
  parse.harmony_tokens = harmony_;
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
  if (parse.harmony && params->grammar && choice != "required" && choice != "named") {
    // response_format on Harmony: the schema is the final answer's, after free analysis messages. Other
    // constraints (guided_grammar, structured_outputs) keep constraining the whole output: a GBNF grammar is the
    // way to spell the Harmony markers themselves.
    const auto rf = body.find("response_format");
    const std::string type = rf != body.end() && rf->is_object() ? rf->value("type", std::string()) : std::string();
    if (type == "json_object" || type == "json_schema") HarmonyFinalGate(harmony_, &params->gate);
  }
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
    auto gbnf = parse.harmony ? HarmonyToolCallGbnf(*tools, named, ws, harmony_, &params->gate)
                              : ToolCallGbnf(*tools, parse.format, named, parallel, ws);
    if (!gbnf.ok()) return gbnf.status();  // it names the field: tools[i].function.parameters or tool_choice
    if (!parse.harmony && parse.thinking && prompt_opens_thinking) {
      // The prompt opened <think> (DeepSeek-R1, V4 with thinking on): the answer is reasoning up to </think>, so
      // the calls are enforced only after it, as the model would write them; a grammar from the first token
      // would make the reasoning the call.
      params->gate.open_after = "</think>";
      const std::vector<int32_t> ids = tok_.EncodeWithSpecials("</think>", false);
      if (ids.size() == 1 && tok_.IsControl(ids[0])) params->gate.open_after_tokens = ids;
      gbnf = AfterReasoningGbnf(*gbnf);
    }
    auto g = grammar::CompileGbnf(*gbnf);
    if (!g.ok()) return Internal("tool-call grammar failed to compile: " + g.status().message());
    params->grammar = *g;
    params->grammar_source = std::move(*gbnf);
  }
  return parse;
}

void OpenAiServer::OnClose(HttpServer::ConnId c) {
  kv_events_->Unsubscribe(c);
  if (preparing_.erase(c) > 0) {
    preparing_count_--;
    metrics_.requests_aborted_by_client++;
  }
  auto it = calls_.find(c);
  if (it == calls_.end()) return;
  std::shared_ptr<ApiCall> call = std::move(it->second);
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
    ids = tok_.EncodeWithSpecials(*text, false);  // as the chat prompt is tokenized (ChatFormatter)
  } else {
    auto p = body.find("prompt");
    if (p == body.end() || !p->is_string()) return Error(c, 400, "'prompt' (a string) or 'messages' is required", "", "prompt");
    bool special = true;
    if (auto a = body.find("add_special_tokens"); a != body.end() && a->is_boolean()) special = a->get<bool>();
    ids = tok_.Encode(p->get<std::string>(), special && tok_.add_bos() && tok_.bos_id() >= 0);
  }
  metrics_.requests_ok++;
  http_.Respond(c, 200, "application/json",
                DumpJson({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", engine_.max_model_len()}}) + "\n");
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
  http_.Respond(c, 200, "application/json", DumpJson({{"prompt", tok_.Decode(ids)}}) + "\n");
}

}  // namespace deepinfer
