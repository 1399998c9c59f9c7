#include <cstdio>
#include <nlohmann/json.hpp>

#include "args.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "kernels/cpu/ops.h"
#include "model/transformer.h"

namespace deepinfer::cli {

int CmdLogprobs(int argc, char** argv) {
  Args args("logprobs", "Full-vocabulary log-probabilities of the next token at every position of a token sequence, as JSON\n"
                        "{\"logprobs\": [[...vocab...], ...]} (one row per input token). Used by the parity tests.",
            {
                {"model", "m", "MODEL", "", "GGUF file, HF model directory or hub reference"},
                {"tokens", "", "JSON", "", "token ids as a JSON array, e.g. [1,2,3]"},
                {"chunk", "", "N", "512", "tokens per forward chunk"},
                {"threads", "t", "N", "all cores", "compute threads"},
                DI_WEIGHT_FLAGS,
            });
  if (!args.Parse(argc, argv)) return 2;
  if (args.help_requested()) {
    args.PrintHelp();
    return 0;
  }
  SetLogLevel(LogLevel::kWarn);
  if (args.Has("threads")) SetComputeThreads(static_cast<int>(args.GetInt("threads")));
  auto j = nlohmann::json::parse(args.Get("tokens"), nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) return Fail(InvalidArgument("--tokens must be a non-empty JSON array of ids"));
  std::vector<int32_t> ids;
  for (auto& v : j) {
    if (!v.is_number_integer()) return Fail(InvalidArgument("--tokens must hold integers"));
    ids.push_back(v.get<int32_t>());
  }
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  const int n = static_cast<int>(ids.size()), V = model->config.vocab_size;
  Transformer tf(*model, static_cast<int>(args.GetInt("chunk")));
  KvCache kv(model->config, n);
  std::vector<float> logits(static_cast<size_t>(n) * V), lp(V);
  if (Status s = tf.Forward(ids.data(), n, 0, kv, logits.data(), true); !s.ok()) return Fail(s);
  std::string out = "{\"logprobs\":[";
  char buf[32];
  for (int i = 0; i < n; ++i) {
    LogSoftmax(logits.data() + static_cast<size_t>(i) * V, lp.data(), V);
    out += i ? ",[" : "[";
    for (int t = 0; t < V; ++t) {
      std::snprintf(buf, sizeof buf, t ? ",%.9g" : "%.9g", lp[t]);
      out += buf;
    }
    out += "]";
  }
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace deepinfer::cli
