#include "server/responses.h"

#include <algorithm>

namespace deepinfer {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// input item content -> chat content: a string, or the text of input_text / output_text parts.
StatusOr<std::string> ContentText(const ordered_json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return InvalidArgument("'" + field + "' must be a string or a list of text parts");
  std::string out;
  for (const auto& part : c) {
    const std::string t = part.is_object() ? part.value("type", std::string()) : "";
    if ((t != "input_text" && t != "output_text" && t != "text") || !part.contains("text") || !part["text"].is_string())
      return InvalidArgument("'" + field + "': only input_text / output_text parts are supported, not '" + t + "'");
    out += part["text"].get<std::string>();
  }
  return out;
}

// What the response object reports of its request: the request's values (OpenAI's defaults where it gave none),
// checked here, so a response never claims settings it did not run with.
Status EchoedFields(const ordered_json& b, ResponsesRequest* rr) {
  auto given = [&](const char* k) { return b.contains(k) && !b[k].is_null() ? &b[k] : nullptr; };
  json e = json::object();
  for (const char* k : {"temperature", "top_p"}) {
    const ordered_json* v = given(k);
    if (v && !v->is_number()) return InvalidArgument(std::string("'") + k + "' must be a number");
    e[k] = v ? json(v->get<double>()) : json(1.0);
  }
  if (const ordered_json* v = given("instructions")) e["instructions"] = *v;
  else e["instructions"] = nullptr;
  for (const char* k : {"max_output_tokens", "max_tool_calls"}) {
    const ordered_json* v = given(k);
    if (v && (!v->is_number_integer() || v->get<int64_t>() < 1)) return InvalidArgument(std::string("'") + k + "' must be a positive integer");
    e[k] = v ? json(v->get<int64_t>()) : json(nullptr);
  }
  const ordered_json* ptc = given("parallel_tool_calls");
  if (ptc && !ptc->is_boolean()) return InvalidArgument("'parallel_tool_calls' must be true or false");
  e["parallel_tool_calls"] = ptc ? ptc->get<bool>() : true;
  if (e["max_tool_calls"] == 1) e["parallel_tool_calls"] = false;
  e["previous_response_id"] = given("previous_response_id") ? json(*given("previous_response_id")) : json(nullptr);
  e["store"] = given("store") ? json(*given("store")) : json(true);
  e["tool_choice"] = given("tool_choice") ? json(*given("tool_choice")) : json("auto");
  e["tools"] = given("tools") ? json(*given("tools")) : json::array();
  e["text"] = given("text") ? json(*given("text")) : json{{"format", {{"type", "text"}}}};
  if (const ordered_json* m = given("metadata")) {
    if (!m->is_object()) return InvalidArgument("'metadata' must be an object of strings");
    for (const auto& [k, v] : m->items())
      if (!v.is_string()) return InvalidArgument("'metadata." + k.substr(0, 64) + "' must be a string");
    e["metadata"] = *m;
  } else {
    e["metadata"] = json::object();
  }
  for (const char* k : {"user", "prompt_cache_key", "safety_identifier"}) {
    const ordered_json* v = given(k);
    if (v && !v->is_string()) return InvalidArgument(std::string("'") + k + "' must be a string");
    e[k] = v ? json(*v) : json(nullptr);
  }
  // One tier here: any requested tier is served by it and reported as "default", as OpenAI reports the tier used.
  if (const ordered_json* v = given("service_tier")) {
    static const std::vector<std::string> tiers = {"auto", "default", "flex", "scale", "priority"};
    if (!v->is_string() || std::find(tiers.begin(), tiers.end(), v->get<std::string>()) == tiers.end())
      return InvalidArgument("'service_tier' must be one of auto, default, flex, scale, priority");
  }
  e["service_tier"] = "default";
  // truncation "auto" (dropping the oldest input to fit the context) is not implemented: an input that does not
  // fit is an error, which is what "disabled" asks for.
  if (const ordered_json* v = given("truncation"); v && *v != "disabled")
    return InvalidArgument(v->is_string() && *v == "auto" ? "'truncation' \"auto\" is not supported: only \"disabled\""
                                                          : "'truncation' must be \"auto\" or \"disabled\"");
  e["truncation"] = "disabled";
  // include: only the output text's log-probs can be added (reasoning is not encrypted, nor are there built-in
  // tools whose outputs could be included).
  if (const ordered_json* v = given("include")) {
    if (!v->is_array()) return InvalidArgument("'include' must be a list");
    for (const auto& x : *v) {
      if (x == "message.output_text.logprobs") rr->output_logprobs = true;
      else return InvalidArgument("'include' value " + x.dump().substr(0, 100) + " is not supported: only \"message.output_text.logprobs\"");
    }
  }
  const ordered_json* tl = given("top_logprobs");
  if (tl && (!tl->is_number_integer() || tl->get<int64_t>() < 0 || tl->get<int64_t>() > 20))
    return InvalidArgument("'top_logprobs' must be an integer from 0 to 20");
  e["top_logprobs"] = tl ? tl->get<int64_t>() : 0;
  rr->echo = std::move(e);
  return Status::Ok();
}

}  // namespace

std::optional<ordered_json> ResponseStore::Conversation(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.conversation;
}

std::optional<json> ResponseStore::Object(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.object;
}

void ResponseStore::Put(const std::string& id, ordered_json conversation, json object) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(id); it != entries_.end()) {
    order_.erase(it->second.age);
    entries_.erase(it);
  }
  while (entries_.size() >= capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(id);
  entries_[id] = Entry{std::move(conversation), std::move(object), std::prev(order_.end())};
}

StatusOr<ResponsesRequest> ResponsesToChat(const ordered_json& b, const ResponseStore& store) {
  if (!b.is_object()) return InvalidArgument("the request body must be a JSON object");
  for (const char* k : {"conversation", "background", "prompt"})
    if (b.contains(k) && !b[k].is_null()) return InvalidArgument(std::string("'") + k + "' is not supported");
  // Every field is honoured or refused by name, as on the other endpoints (OpenAI refuses unknown arguments too).
  static const std::vector<std::string> kFields = {
      "model", "input", "instructions", "previous_response_id", "store", "reasoning", "tools", "tool_choice", "text",
      "max_output_tokens", "max_tool_calls", "temperature", "top_p", "top_logprobs", "include", "truncation", "stream",
      "stream_options", "parallel_tool_calls", "user", "metadata", "service_tier", "prompt_cache_key",
      "safety_identifier", "conversation", "background", "prompt",
      // the sampling extensions vLLM's Responses endpoint also takes, as on chat completions
      "seed", "stop", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "structured_outputs"};
  for (const auto& [k, v] : b.items())
    if (std::find(kFields.begin(), kFields.end(), k) == kFields.end())
      return InvalidArgument("'" + k.substr(0, 100) + "' is not a field of a Responses request");
  ResponsesRequest rr;
  DI_RETURN_IF_ERROR(EchoedFields(b, &rr));
  if (auto s = b.find("store"); s != b.end() && !s->is_null()) {
    if (!s->is_boolean()) return InvalidArgument("'store' must be true or false");
    rr.store = s->get<bool>();
  }
  ordered_json chat = ordered_json::object();
  if (auto r = b.find("reasoning"); r != b.end() && !r->is_null()) {
    // effort goes to the chat template as reasoning_effort (templates that read it, as vLLM passes it); "none"
    // also turns thinking off in the templates that have a switch (Qwen3's enable_thinking, DeepSeek-V3.1's
    // thinking). summary: the reasoning itself is given as the summary (see ResponsesRequest).
    if (!r->is_object()) return InvalidArgument("'reasoning' must be an object");
    ordered_json kwargs = ordered_json::object();
    if (auto e = r->find("effort"); e != r->end() && !e->is_null()) {
      static const std::vector<std::string> efforts = {"none", "minimal", "low", "medium", "high", "xhigh"};
      if (!e->is_string() || std::find(efforts.begin(), efforts.end(), e->get<std::string>()) == efforts.end())
        return InvalidArgument("'reasoning.effort' must be one of none, minimal, low, medium, high, xhigh");
      kwargs["reasoning_effort"] = *e;
      if (*e == "none") {
        kwargs["enable_thinking"] = false;
        kwargs["thinking"] = false;
      }
    }
    for (const char* k : {"summary", "generate_summary"})
      if (auto m = r->find(k); m != r->end() && !m->is_null()) {
        if (!m->is_string() || (*m != "auto" && *m != "concise" && *m != "detailed"))
          return InvalidArgument(std::string("'reasoning.") + k + "' must be auto, concise or detailed");
        rr.reasoning_summary = true;
      }
    rr.echo["reasoning"] = json{{"effort", r->value("effort", json(nullptr))},
                        {"summary", r->contains("summary") ? json((*r)["summary"]) : r->value("generate_summary", json(nullptr))}};
    if (!kwargs.empty()) chat["chat_template_kwargs"] = std::move(kwargs);
  }
  ordered_json msgs = ordered_json::array();
  if (auto i = b.find("instructions"); i != b.end() && !i->is_null()) {
    if (!i->is_string()) return InvalidArgument("'instructions' must be a string");
    msgs.push_back({{"role", "system"}, {"content", *i}});
  }
  const size_t first_input = msgs.size();  // the conversation to store starts here (instructions are not kept)
  if (auto p = b.find("previous_response_id"); p != b.end() && !p->is_null()) {
    if (!p->is_string()) return InvalidArgument("'previous_response_id' must be a string");
    auto previous = store.Conversation(p->get<std::string>());
    if (!previous)
      return Status(StatusCode::kNotFound, "'previous_response_id': previous response with id '" +
                                               p->get<std::string>().substr(0, 200) + "' not found" +
                                               (store.capacity() == 0 ? " (storing responses is off: --max-stored-responses 0)" : ""));
    for (auto& m : *previous) msgs.push_back(std::move(m));
  }
  auto in = b.find("input");
  if (in == b.end() || in->is_null()) return InvalidArgument("'input' is required");
  if (in->is_string()) {
    msgs.push_back({{"role", "user"}, {"content", *in}});
  } else if (in->is_array()) {
    std::string pending_reasoning;  // from a reasoning item, for the assistant turn after it
    for (size_t n = 0; n < in->size(); ++n) {
      const ordered_json& it = (*in)[n];
      const std::string field = "input[" + std::to_string(n) + "]";
      const std::string type = it.is_object() ? it.value("type", std::string("message")) : "";
      if (type == "message") {
        if (!it.contains("role") || !it["role"].is_string()) return InvalidArgument("'" + field + ".role' is required");
        DI_ASSIGN_OR_RETURN(std::string text, ContentText(it.value("content", ordered_json("")), field + ".content"));
        std::string role = it["role"].get<std::string>();
        if (role == "developer") role = "system";
        msgs.push_back({{"role", role}, {"content", text}});
        if (role == "assistant" && !pending_reasoning.empty()) msgs.back()["reasoning_content"] = pending_reasoning;
        pending_reasoning.clear();
      } else if (type == "function_call") {
        // The model's earlier call: an assistant turn with that call (merged into the previous one if it is).
        ordered_json call = {{"id", it.value("call_id", std::string())}, {"type", "function"},
                             {"function", {{"name", it.value("name", std::string())}, {"arguments", it.value("arguments", std::string("{}"))}}}};
        if (!msgs.empty() && msgs.back()["role"] == "assistant" && msgs.back().contains("tool_calls")) msgs.back()["tool_calls"].push_back(call);
        else msgs.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ordered_json::array({call})}});
        if (!pending_reasoning.empty()) msgs.back()["reasoning_content"] = pending_reasoning;
        pending_reasoning.clear();
      } else if (type == "reasoning") {
        // A reasoning item handed back from an earlier answer: its text becomes the reasoning_content of the
        // assistant turn that follows (templates decide: Qwen3 keeps it inside a tool loop, most drop it).
        std::string text;
        for (const char* k : {"content", "summary"}) {
          if (!it.contains(k) || !it[k].is_array()) continue;
          for (const auto& part : it[k])
            if (part.is_object() && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
          if (!text.empty()) break;
        }
        pending_reasoning = std::move(text);
        continue;
      } else if (type == "function_call_output") {
        const ordered_json& out = it.value("output", ordered_json(""));
        msgs.push_back({{"role", "tool"}, {"tool_call_id", it.value("call_id", std::string())},
                        {"content", out.is_string() ? out.get<std::string>() : out.dump()}});
      } else {
        return InvalidArgument("'" + field + ".type' must be message, function_call, function_call_output or reasoning, not '" + type + "'");
      }
    }
  } else {
    return InvalidArgument("'input' must be a string or a list of input items");
  }
  rr.conversation = ordered_json::array();
  for (size_t i = first_input; i < msgs.size(); ++i) rr.conversation.push_back(msgs[i]);
  chat["messages"] = std::move(msgs);
  if (auto t = b.find("tools"); t != b.end() && !t->is_null()) {
    if (!t->is_array()) return InvalidArgument("'tools' must be a list");
    ordered_json tools = ordered_json::array();
    for (size_t n = 0; n < t->size(); ++n) {
      const ordered_json& tool = (*t)[n];
      if (!tool.is_object() || tool.value("type", std::string()) != "function" || !tool.contains("name"))
        return InvalidArgument("'tools[" + std::to_string(n) + "]': only function tools ({\"type\": \"function\", \"name\": ...}) are supported");
      ordered_json fn = {{"name", tool["name"]}};
      for (const char* k : {"description", "parameters"})
        if (tool.contains(k) && !tool[k].is_null()) fn[k] = tool[k];
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (auto tc = b.find("tool_choice"); tc != b.end() && !tc->is_null()) {
    if (tc->is_object() && tc->value("type", std::string()) == "function" && tc->contains("name"))
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    else chat["tool_choice"] = *tc;
  }
  if (auto f = b.find("text"); f != b.end() && f->is_object() && f->contains("format")) {
    const ordered_json& fmt = (*f)["format"];
    const std::string type = fmt.is_object() ? fmt.value("type", std::string()) : "";
    if (type == "json_schema") {
      ordered_json js = {{"name", fmt.value("name", std::string("schema"))}, {"schema", fmt.value("schema", ordered_json())}};
      if (fmt.contains("strict")) js["strict"] = fmt["strict"];
      chat["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
    } else if (type == "json_object") {
      chat["response_format"] = {{"type", "json_object"}};
    } else if (type != "text") {
      return InvalidArgument("'text.format.type' must be text, json_object or json_schema");
    }
  }
  if (auto m = b.find("max_output_tokens"); m != b.end() && !m->is_null()) chat["max_tokens"] = *m;
  // max_tool_calls 1 is one call per answer (parallel_tool_calls false); more than one already holds, since
  // every function call ends the response here (the client runs the tools and sends a new request).
  if (rr.echo["max_tool_calls"] == 1) chat["parallel_tool_calls"] = false;
  if (rr.output_logprobs) {
    chat["logprobs"] = true;
    chat["top_logprobs"] = rr.echo["top_logprobs"].get<int64_t>();
  }
  // structured_outputs: vLLM's extension field (json, regex, choice, grammar), as on chat completions.
  for (const char* k : {"model", "temperature", "top_p", "seed", "stream", "parallel_tool_calls", "structured_outputs", "stop",
                        "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"})
    if (b.contains(k) && !b[k].is_null()) chat[k] = b[k];
  rr.chat = std::move(chat);
  return rr;
}

json ResponseBuilder::Base(const char* status) const {
  json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status}, {"model", model_},
            {"output", json::array()}, {"error", nullptr}, {"incomplete_details", nullptr}, {"usage", nullptr}};
  if (echo_.is_object())
    for (const auto& [k, v] : echo_.items()) r[k] = v;
  if (!r.contains("reasoning")) r["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  return r;
}

std::string ResponseBuilder::Event(const char* type, json data) {
  data["type"] = type;
  data["sequence_number"] = seq_++;
  return std::string("event: ") + type + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

static json TextPart(const std::string& text, json logprobs = json::array()) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", std::move(logprobs)}};
}
static json SummaryPart(const std::string& text) { return {{"type", "summary_text"}, {"text", text}}; }

static std::string ReasoningOf(const json& message) {
  auto r = message.find("reasoning_content");
  return r != message.end() && r->is_string() ? r->get<std::string>() : "";
}

json ResponseBuilder::ReasoningItem(const std::string& text, const char* status) const {
  json item = {{"id", "rs_" + id_}, {"type", "reasoning"}, {"status", status}, {"summary", json::array()},
               {"content", json::array()}};
  if (!text.empty()) {
    item["content"].push_back({{"type", "reasoning_text"}, {"text", text}});
    if (summary_) item["summary"].push_back(SummaryPart(text));
  }
  return item;
}

std::string ResponseBuilder::Start() {
  std::string s = Event("response.created", {{"response", Base("in_progress")}});
  s += Event("response.in_progress", {{"response", Base("in_progress")}});
  return s;
}

std::string ResponseBuilder::ReasoningDelta(const std::string& text) {
  // Reasoning precedes the answer; once the message item is open, late reasoning has no place in the stream.
  if (text.empty() || message_index_ >= 0) return "";
  std::string s;
  const std::string item = "rs_" + id_;
  if (reasoning_index_ < 0) {
    reasoning_index_ = next_index_++;
    s += Event("response.output_item.added", {{"output_index", reasoning_index_}, {"item", ReasoningItem("", "in_progress")}});
    if (summary_)
      s += Event("response.reasoning_summary_part.added",
                 {{"item_id", item}, {"output_index", reasoning_index_}, {"summary_index", 0}, {"part", SummaryPart("")}});
  }
  reasoning_text_ += text;
  s += Event("response.reasoning_text.delta",
             {{"item_id", item}, {"output_index", reasoning_index_}, {"content_index", 0}, {"delta", text}});
  if (summary_)
    s += Event("response.reasoning_summary_text.delta",
               {{"item_id", item}, {"output_index", reasoning_index_}, {"summary_index", 0}, {"delta", text}});
  return s;
}

std::string ResponseBuilder::CloseReasoning() {
  if (reasoning_index_ < 0 || reasoning_closed_) return "";
  reasoning_closed_ = true;
  const std::string item = "rs_" + id_;
  std::string s = Event("response.reasoning_text.done", {{"item_id", item}, {"output_index", reasoning_index_},
                                                         {"content_index", 0}, {"text", reasoning_text_}});
  if (summary_) {
    s += Event("response.reasoning_summary_text.done",
               {{"item_id", item}, {"output_index", reasoning_index_}, {"summary_index", 0}, {"text", reasoning_text_}});
    s += Event("response.reasoning_summary_part.done", {{"item_id", item}, {"output_index", reasoning_index_},
                                                        {"summary_index", 0}, {"part", SummaryPart(reasoning_text_)}});
  }
  s += Event("response.output_item.done", {{"output_index", reasoning_index_}, {"item", ReasoningItem(reasoning_text_, "completed")}});
  return s;
}

std::string ResponseBuilder::OpenMessage() {
  if (message_index_ >= 0) return "";
  std::string s = CloseReasoning();
  message_index_ = next_index_++;
  s += Event("response.output_item.added", {{"output_index", message_index_}, {"item", {{"id", "msg_" + id_}, {"type", "message"},
            {"status", "in_progress"}, {"role", "assistant"}, {"content", json::array()}}}});
  s += Event("response.content_part.added", {{"item_id", "msg_" + id_}, {"output_index", message_index_}, {"content_index", 0},
                                             {"part", TextPart("")}});
  return s;
}

std::string ResponseBuilder::TextDelta(const std::string& text, const json& logprobs) {
  for (const auto& l : logprobs) unsent_logprobs_.push_back(l);
  if (text.empty()) return "";  // the tokens' log-probs go with the text they end up in
  std::string s = OpenMessage();
  text_ += text;
  json sent = std::move(unsent_logprobs_);
  unsent_logprobs_ = json::array();
  sent_logprobs_ += sent.size();
  return s + Event("response.output_text.delta", {{"item_id", "msg_" + id_}, {"output_index", message_index_}, {"content_index", 0},
                                                  {"delta", text}, {"logprobs", sent}});
}

std::string ResponseBuilder::CallStart(int index, const std::string& call_id, const std::string& name) {
  std::string s = OpenMessage();  // the message item comes before the calls, even when it stays empty
  calls_started_ = std::max(calls_started_, index + 1);
  return s + Event("response.output_item.added",
                   {{"output_index", message_index_ + 1 + index},
                    {"item", {{"id", "fc_" + call_id}, {"type", "function_call"}, {"status", "in_progress"}, {"call_id", call_id},
                              {"name", name}, {"arguments", ""}}}});
}

std::string ResponseBuilder::CallArgumentsDelta(int index, const std::string& call_id, const std::string& fragment) {
  if (fragment.empty()) return "";
  return Event("response.function_call_arguments.delta",
               {{"item_id", "fc_" + call_id}, {"output_index", message_index_ + 1 + index}, {"delta", fragment}});
}

json ResponseBuilder::Object(const json& message, const std::string& finish_reason, const json& usage, const json& logprobs) {
  json r = Base(finish_reason == "length" ? "incomplete" : "completed");
  if (finish_reason == "length") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  const std::string text = message["content"].is_string() ? message["content"].get<std::string>() : "";
  const std::string reasoning = ReasoningOf(message);
  json out = json::array();
  if (!reasoning.empty()) out.push_back(ReasoningItem(reasoning, "completed"));
  if (!text.empty() || !message.contains("tool_calls"))
    out.push_back({{"id", "msg_" + id_}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"},
                   {"content", json::array({TextPart(text, logprobs)})}});
  if (message.contains("tool_calls"))
    for (const auto& c : message["tool_calls"])
      out.push_back({{"id", "fc_" + c["id"].get<std::string>()}, {"type", "function_call"}, {"status", "completed"},
                     {"call_id", c["id"]}, {"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}});
  r["output"] = out;
  int reasoning_tokens = 0;
  if (auto d = usage.find("completion_tokens_details"); d != usage.end() && d->is_object())
    reasoning_tokens = d->value("reasoning_tokens", 0);
  r["usage"] = {{"input_tokens", usage["prompt_tokens"]}, {"output_tokens", usage["completion_tokens"]},
                {"total_tokens", usage["total_tokens"]},
                {"input_tokens_details", {{"cached_tokens", usage["prompt_tokens_details"]["cached_tokens"]}}},
                {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}}};
  return r;
}

std::string ResponseBuilder::Finish(const json& message, const std::string& finish_reason, const json& usage, const json& logprobs) {
  std::string s;
  // Reasoning held back by the splitter (an unclosed <think> at the end), then the message item: opened now if
  // no text came, so the streamed output always has one.
  const std::string reasoning = ReasoningOf(message);
  if (reasoning.size() > reasoning_text_.size() && reasoning.compare(0, reasoning_text_.size(), reasoning_text_) == 0)
    s += ReasoningDelta(reasoning.substr(reasoning_text_.size()));
  s += OpenMessage();
  const std::string text = message["content"].is_string() ? message["content"].get<std::string>() : "";
  // Log-probs of tokens whose text the splitters held back until now come with that text.
  json rest = json::array();
  for (size_t i = sent_logprobs_ + unsent_logprobs_.size(); i < logprobs.size(); ++i) rest.push_back(logprobs[i]);
  if (text.size() > text_.size() && text.compare(0, text_.size(), text_) == 0) s += TextDelta(text.substr(text_.size()), rest);
  json r = Object(message, finish_reason, usage, logprobs);
  const std::string item = "msg_" + id_;
  s += Event("response.output_text.done", {{"item_id", item}, {"output_index", message_index_}, {"content_index", 0}, {"text", text},
                                           {"logprobs", logprobs}});
  s += Event("response.content_part.done", {{"item_id", item}, {"output_index", message_index_}, {"content_index", 0},
                                            {"part", TextPart(text, logprobs)}});
  s += Event("response.output_item.done", {{"output_index", message_index_}, {"item", {{"id", item}, {"type", "message"}, {"status", "completed"},
            {"role", "assistant"}, {"content", json::array({TextPart(text, logprobs)})}}}});
  // The object's output lists the streamed items in their stream order.
  json out = json::array();
  if (reasoning_index_ >= 0) out.push_back(ReasoningItem(reasoning_text_, "completed"));
  out.push_back({{"id", item}, {"type", "message"}, {"status", "completed"}, {"role", "assistant"},
                 {"content", json::array({TextPart(text, logprobs)})}});
  int index = message_index_ + 1, call = 0;
  for (const auto& it : r["output"]) {
    if (it["type"] != "function_call") continue;
    if (call >= calls_started_) {  // not streamed as it was generated: added and sent whole now
      json added = it;
      added["status"] = "in_progress";
      added["arguments"] = "";
      s += Event("response.output_item.added", {{"output_index", index}, {"item", added}});
      s += Event("response.function_call_arguments.delta", {{"item_id", it["id"]}, {"output_index", index}, {"delta", it["arguments"]}});
    }
    s += Event("response.function_call_arguments.done", {{"item_id", it["id"]}, {"output_index", index}, {"arguments", it["arguments"]}});
    s += Event("response.output_item.done", {{"output_index", index}, {"item", it}});
    out.push_back(it);
    ++index;
    ++call;
  }
  r["output"] = out;
  s += Event(r["status"] == "incomplete" ? "response.incomplete" : "response.completed", {{"response", r}});
  return s;
}

}  // namespace deepinfer
