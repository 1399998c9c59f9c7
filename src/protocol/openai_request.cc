#include "protocol/openai_request.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/speculative.h"
#include "protocol/structured_output.h"

namespace deepinfer {
namespace {

using nlohmann::json;

Status TypeError(const std::string& field, const char* want) {
  return InvalidArgument("'" + field + "' must be " + want);
}

Status GetFloat(const json& b, const char* field, float* out) {
  auto it = b.find(field);
  if (it == b.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return TypeError(field, "a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) return TypeError(field, "a finite number");
  *out = static_cast<float>(v);
  return Status::Ok();
}

Status GetInt(const json& b, const char* field, int64_t* out) {
  auto it = b.find(field);
  if (it == b.end() || it->is_null()) return Status::Ok();
  if (it->is_number_integer() || it->is_number_unsigned()) {
    *out = it->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX))
                                    : it->get<int64_t>();
    return Status::Ok();
  }
  if (it->is_number_float()) {  // 16.0 is accepted, 16.5 is not
    const double v = it->get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
      *out = static_cast<int64_t>(v);
      return Status::Ok();
    }
  }
  return TypeError(field, "an integer");
}

Status GetBool(const json& b, const char* field, bool* out) {
  auto it = b.find(field);
  if (it == b.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return TypeError(field, "true or false");
  *out = it->get<bool>();
  return Status::Ok();
}

Status ToInt32(const std::string& field, int64_t v, int64_t lo, int64_t hi, int* out) {
  if (v < lo || v > hi)
    return InvalidArgument("'" + field + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = static_cast<int>(v);
  return Status::Ok();
}

}  // namespace

StatusOr<RequestParams> ParseRequestParams(const json& b, const RequestParams& defaults) {
  if (!b.is_object()) return InvalidArgument("the request body must be a JSON object");
  RequestParams p = defaults;
  SamplingParams& s = p;  // the request's sampling part
  DI_RETURN_IF_ERROR(GetFloat(b, "temperature", &s.temperature));
  DI_RETURN_IF_ERROR(GetFloat(b, "top_p", &s.top_p));
  DI_RETURN_IF_ERROR(GetFloat(b, "min_p", &s.min_p));
  DI_RETURN_IF_ERROR(GetFloat(b, "presence_penalty", &s.presence_penalty));
  DI_RETURN_IF_ERROR(GetFloat(b, "frequency_penalty", &s.frequency_penalty));
  DI_RETURN_IF_ERROR(GetFloat(b, "repetition_penalty", &s.repetition_penalty));
  int64_t v = s.top_k;
  DI_RETURN_IF_ERROR(GetInt(b, "top_k", &v));
  if (v == -1) v = 0;  // vLLM spells "off" as -1
  DI_RETURN_IF_ERROR(ToInt32("top_k", v, 0, INT32_MAX, &s.top_k));
  if (auto it = b.find("seed"); it != b.end() && !it->is_null()) {
    int64_t seed = 0;
    DI_RETURN_IF_ERROR(GetInt(b, "seed", &seed));
    s.seed = static_cast<uint64_t>(seed);
  }
  v = p.max_tokens;
  if (b.contains("max_completion_tokens") && !b["max_completion_tokens"].is_null()) {
    DI_RETURN_IF_ERROR(GetInt(b, "max_completion_tokens", &v));
    DI_RETURN_IF_ERROR(ToInt32("max_completion_tokens", v, 1, INT32_MAX, &p.max_tokens));
  } else {
    DI_RETURN_IF_ERROR(GetInt(b, "max_tokens", &v));
    DI_RETURN_IF_ERROR(ToInt32("max_tokens", v, 1, INT32_MAX, &p.max_tokens));
  }
  v = p.n;
  DI_RETURN_IF_ERROR(GetInt(b, "n", &v));
  DI_RETURN_IF_ERROR(ToInt32("n", v, 1, 128, &p.n));
  // logprobs: an integer (completions API) or a boolean with top_logprobs (chat API).
  if (auto it = b.find("logprobs"); it != b.end() && !it->is_null()) {
    if (it->is_boolean()) {
      p.logprobs = -1;
      if (it->get<bool>()) {
        int64_t k = 0;
        DI_RETURN_IF_ERROR(GetInt(b, "top_logprobs", &k));
        DI_RETURN_IF_ERROR(ToInt32("top_logprobs", k, 0, 20, &p.logprobs));
      }
    } else {
      int64_t k = 0;
      DI_RETURN_IF_ERROR(GetInt(b, "logprobs", &k));
      DI_RETURN_IF_ERROR(ToInt32("logprobs", k, 0, 20, &p.logprobs));
    }
  }
  if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
    p.stop.clear();
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& e : *it) {
        if (!e.is_string()) return TypeError("stop", "a string or a list of strings");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      return TypeError("stop", "a string or a list of strings");
    }
    if (p.stop.size() > 16) return InvalidArgument("'stop' has more than 16 entries");
  }
  if (auto it = b.find("stop_token_ids"); it != b.end() && !it->is_null()) {
    if (!it->is_array()) return TypeError("stop_token_ids", "a list of token ids");
    p.stop_token_ids.clear();
    for (const auto& e : *it) {
      if (!e.is_number_integer()) return TypeError("stop_token_ids", "a list of token ids");
      p.stop_token_ids.push_back(static_cast<int32_t>(std::clamp<int64_t>(e.get<int64_t>(), -1, INT32_MAX)));
    }
  }
  if (auto it = b.find("logit_bias"); it != b.end() && !it->is_null()) {
    if (!it->is_object()) return TypeError("logit_bias", "an object mapping token ids to numbers");
    s.logit_bias.clear();
    for (auto e = it->begin(); e != it->end(); ++e) {
      char* end = nullptr;
      const long long id = std::strtoll(e.key().c_str(), &end, 10);
      if (e.key().empty() || *end != '\0' || id < 0 || id > INT32_MAX)
        return InvalidArgument("logit_bias keys must be token ids, not '" + e.key() + "'");
      if (!e.value().is_number()) return TypeError("logit_bias values", "numbers");
      s.logit_bias.emplace_back(static_cast<int32_t>(id), e.value().get<float>());
    }
  }
  DI_RETURN_IF_ERROR(GetBool(b, "ignore_eos", &p.ignore_eos));
  if (auto it = b.find("priority"); it != b.end() && !it->is_null()) {  // vLLM's extension: lower runs first
    int64_t prio = 0;
    DI_RETURN_IF_ERROR(GetInt(b, "priority", &prio));
    DI_RETURN_IF_ERROR(ToInt32("priority", prio, -1000000, 1000000, &p.priority));
  }
  DI_RETURN_IF_ERROR(GetBool(b, "include_stop_str_in_output", &p.include_stop_str_in_output));
  if (auto it = b.find("num_speculative_tokens"); it != b.end() && !it->is_null()) {
    // deepinfer's extension: drafts per step for this request (0 turns speculative decoding off for it).
    int64_t k = 0;
    DI_RETURN_IF_ERROR(GetInt(b, "num_speculative_tokens", &k));
    DI_RETURN_IF_ERROR(ToInt32("num_speculative_tokens", k, 0, kMaxSpecTokens, &p.num_speculative_tokens));
  }
  DI_RETURN_IF_ERROR(s.Validate());
  DI_RETURN_IF_ERROR(ParseStructuredOutput(b, &p));
  return p;
}

StatusOr<std::vector<int32_t>> ParsePrompt(const json& b, const Tokenizer& tok) {
  const json* pr = nullptr;
  if (auto it = b.find("prompt"); it != b.end() && !it->is_null()) pr = &*it;
  else if (auto it2 = b.find("prompt_token_ids"); it2 != b.end() && !it2->is_null()) pr = &*it2;
  if (!pr) return InvalidArgument("'prompt' is required");
  if (pr->is_string()) {
    const std::string text = pr->get<std::string>();
    const bool bos = tok.bos_id() >= 0 && (tok.add_bos() || text.empty());
    auto ids = tok.Encode(text, bos);
    if (ids.empty()) return InvalidArgument("'prompt' is empty and the tokenizer has no BOS token");
    return ids;
  }
  if (pr->is_array()) {
    std::vector<int32_t> ids;
    for (const auto& e : *pr) {
      if (!e.is_number_integer()) return TypeError("prompt", "a string or a list of token ids");
      const int64_t id = e.get<int64_t>();
      if (id < 0 || id >= tok.vocab_size())
        return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary");
      ids.push_back(static_cast<int32_t>(id));
    }
    if (ids.empty()) return InvalidArgument("'prompt' is an empty list");
    return ids;
  }
  return TypeError("prompt", "a string or a list of token ids");
}

}  // namespace deepinfer

namespace deepinfer {

Status CheckUnsupportedFields(const json& b, bool chat) {
  // Fields that change what the client gets back: ignoring one would hand back a different answer than asked
  // for without saying so (OpenAI and vLLM honour these), so each is refused by name.
  auto present = [&](const char* f) {
    auto it = b.find(f);
    return it != b.end() && !it->is_null() ? &*it : nullptr;
  };
  auto refuse = [](const std::string& field, const std::string& why) {
    return InvalidArgument("'" + field + "' is not supported: " + why);
  };
  if (const json* s = present("suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
    return refuse("suffix", "deepinfer does not do fill-in-the-middle completions");
  if (const json* bo = present("best_of")) {
    int64_t n = 1;
    if (const json* nn = present("n"); nn && nn->is_number_integer()) n = nn->get<int64_t>();
    if (!bo->is_number_integer()) return InvalidArgument("'best_of' must be an integer");
    if (bo->get<int64_t>() != n)
      return refuse("best_of", "only best_of == n (" + std::to_string(n) + ") is served; ranking extra samples is not implemented");
  }
  if (chat) {
    if (present("audio")) return refuse("audio", "audio output is not implemented");
    if (const json* m = present("modalities"); m && m->is_array())
      for (const auto& e : *m)
        if (!(e.is_string() && e.get_ref<const std::string&>() == "text")) return refuse("modalities", "only [\"text\"] is served");
    if (present("prediction")) return refuse("prediction", "predicted outputs are not implemented");
    if (present("functions") || present("function_call"))
      return refuse(present("functions") ? "functions" : "function_call", "the legacy function-calling fields are not implemented; use 'tools'");
    if (const json* e = present("echo"); e && e->is_boolean() && e->get<bool>())
      return refuse("echo", "echo is a /v1/completions field");
  } else {
    if (const json* e = present("echo"); e && !e->is_boolean()) return InvalidArgument("'echo' must be true or false");
  }
  return Status::Ok();
}

}  // namespace deepinfer
