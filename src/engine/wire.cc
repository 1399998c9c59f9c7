#include "engine/wire.h"

namespace deepinfer::wire {

void PutParams(Writer& w, const RequestParams& p) {
  const SamplingParams& s = p.sampling;
  w.Put(s.temperature), w.Put(s.top_k), w.Put(s.top_p), w.Put(s.min_p), w.Put(s.seed);
  w.Put(s.presence_penalty), w.Put(s.frequency_penalty), w.Put(s.repetition_penalty);
  w.PutVector(s.logit_bias);
  w.Put(p.has_seed), w.Put(p.max_tokens), w.Put(p.n);
  w.Put<uint64_t>(p.stop.size());
  for (const std::string& x : p.stop) w.PutString(x);
  w.PutVector(p.stop_token_ids);
  w.Put(p.ignore_eos), w.Put(p.logprobs), w.Put(p.include_stop_str_in_output);
  w.Put(p.priority);  // every rank's scheduler must order the same way
  w.PutString(p.grammar ? p.grammar_source : std::string());
  // The grammar's gate (gpt-oss's Harmony headers): without it another rank would constrain from the first token.
  const GrammarGate& g = p.gate;
  w.PutVector(g.header_begin);
  w.Put<uint64_t>(g.markers.size());
  for (const auto& [id, text] : g.markers) w.Put(id), w.PutString(text);
  for (const std::vector<std::string>* headers : {&g.open_headers, &g.free_headers}) {
    w.Put<uint64_t>(headers->size());
    for (const std::string& h : *headers) w.PutString(h);
  }
  w.Put(g.feed_header);
  w.PutString(g.open_after);
  w.PutVector(g.open_after_tokens);
}

RequestParams GetParams(Reader& r) {
  RequestParams p;
  SamplingParams& s = p.sampling;
  s.temperature = r.Get<float>(), s.top_k = r.Get<int>(), s.top_p = r.Get<float>(), s.min_p = r.Get<float>();
  s.seed = r.Get<uint64_t>();
  s.presence_penalty = r.Get<float>(), s.frequency_penalty = r.Get<float>(), s.repetition_penalty = r.Get<float>();
  s.logit_bias = r.GetVector<std::pair<int32_t, float>>();
  p.has_seed = r.Get<bool>(), p.max_tokens = r.Get<int>(), p.n = r.Get<int>();
  const uint64_t stops = r.Get<uint64_t>();
  for (uint64_t i = 0; i < stops && r.ok(); ++i) p.stop.push_back(r.GetString());
  p.stop_token_ids = r.GetVector<int32_t>();
  p.ignore_eos = r.Get<bool>(), p.logprobs = r.Get<int>(), p.include_stop_str_in_output = r.Get<bool>();
  p.priority = r.Get<int>();
  // The grammar travels as its GBNF source; it compiled on rank 0, so it compiles here too.
  p.grammar_source = r.GetString();
  if (r.ok() && !p.grammar_source.empty()) {
    auto g = grammar::ParseGbnf(p.grammar_source);
    if (g.ok()) p.grammar = *g;
  }
  GrammarGate& g = p.gate;
  g.header_begin = r.GetVector<int32_t>();
  const uint64_t markers = r.Get<uint64_t>();
  for (uint64_t i = 0; i < markers && r.ok(); ++i) {
    const int32_t id = r.Get<int32_t>();
    g.markers.emplace_back(id, r.GetString());
  }
  for (std::vector<std::string>* headers : {&g.open_headers, &g.free_headers}) {
    const uint64_t count = r.Get<uint64_t>();
    for (uint64_t i = 0; i < count && r.ok(); ++i) headers->push_back(r.GetString());
  }
  g.feed_header = r.Get<bool>();
  g.open_after = r.GetString();
  g.open_after_tokens = r.GetVector<int32_t>();
  return p;
}

void PutOutput(Writer& w, const RequestOutput& o) {
  w.Put(o.request_id), w.Put(o.index);
  w.PutVector(o.token_ids);
  w.PutString(o.text);
  w.Put<uint64_t>(o.logprobs.size());
  for (const TokenLogprob& lp : o.logprobs) {
    w.Put(lp.token), w.Put(lp.logprob);
    w.PutVector(lp.top);
  }
  w.Put(o.finished);
  w.PutString(o.finish_reason);
  w.PutString(o.stop_reason);
  w.Put(o.prompt_tokens), w.Put(o.cached_tokens), w.Put(o.completion_tokens), w.Put(o.replayed_tokens);
}

RequestOutput GetOutput(Reader& r) {
  RequestOutput o;
  o.request_id = r.Get<uint64_t>(), o.index = r.Get<int>();
  o.token_ids = r.GetVector<int32_t>();
  o.text = r.GetString();
  const uint64_t n = r.Get<uint64_t>();
  for (uint64_t i = 0; i < n && r.ok(); ++i) {
    TokenLogprob lp;
    lp.token = r.Get<int32_t>(), lp.logprob = r.Get<float>();
    lp.top = r.GetVector<std::pair<int32_t, float>>();
    o.logprobs.push_back(std::move(lp));
  }
  o.finished = r.Get<bool>();
  o.finish_reason = r.GetString();
  o.stop_reason = r.GetString();
  o.prompt_tokens = r.Get<int>(), o.cached_tokens = r.Get<int>(), o.completion_tokens = r.Get<int>();
  o.replayed_tokens = r.Get<int>();
  return o;
}

}  // namespace deepinfer::wire
