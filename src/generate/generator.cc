#include "generate/generator.h"

#include <chrono>

namespace deepinfer {

StatusOr<GenerateResult> Generate(Transformer& tf, KvCache& kv, const GenerateRequest& req,
                                  const std::function<bool(int32_t)>& on_token) {
  const ModelConfig& c = tf.model().config;
  const Tokenizer& tok = *tf.model().tokenizer;
  DI_RETURN_IF_ERROR(req.sampling.Validate());
  if (req.prompt.empty()) return InvalidArgument("the prompt is empty (no tokens)");
  if (req.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");
  if (static_cast<int>(req.prompt.size()) >= kv.capacity())
    return InvalidArgument("the prompt has " + std::to_string(req.prompt.size()) + " tokens; the context holds " +
                           std::to_string(kv.capacity()) + " (raise --ctx-size or shorten the prompt)");
  GenerateResult res;
  res.finish_reason = "length";
  std::vector<float> logits(c.vocab_size);
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  DI_RETURN_IF_ERROR(tf.Forward(req.prompt.data(), static_cast<int>(req.prompt.size()), 0, kv, logits.data(), false));
  auto t1 = Clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  int pos = static_cast<int>(req.prompt.size());
  for (int i = 0; i < req.max_tokens; ++i) {
    const int32_t next = SampleToken(logits.data(), c.vocab_size, req.sampling, static_cast<uint64_t>(pos));
    res.tokens.push_back(next);
    if (on_token && !on_token(next)) {
      res.finish_reason = "abort";
      break;
    }
    if (!req.ignore_eos && tok.IsEog(next)) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == req.max_tokens || pos + 1 >= kv.capacity()) break;
    DI_RETURN_IF_ERROR(tf.Forward(&next, 1, pos, kv, logits.data(), false));
    ++pos;
  }
  res.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return res;
}

}  // namespace deepinfer
