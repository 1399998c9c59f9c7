#include <cstdio>
#include <nlohmann/json.hpp>

#include "args.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "deepinfer/parallel.h"
#include "engine_flags.h"
#include "kernels/cpu/ops.h"
#include "dist/communicator.h"
#include "dist/parallel.h"
#include "model/transformer.h"

namespace deepinfer::cli {

int CmdLogprobs(int argc, char** argv) {
  Args args("logprobs", "Full-vocabulary log-probabilities of the next token at every position of a token sequence, as JSON\n"
                        "{\"logprobs\": [[...vocab...], ...]} (one row per input token). Used by the parity tests.\n"
                        "With --mtp (DeepSeek-V3 or V4 checkpoints with an MTP module) the output adds \"mtp\": n-1 rows, row i\n"
                        "being the MTP module's prediction of token i+2 from token i+1 and the model's hidden state at i.",
            {
                {"model", "m", "MODEL", "", "GGUF file, HF model directory or hub reference"},
                {"tokens", "", "JSON", "", "token ids as a JSON array, e.g. [1,2,3]"},
                {"chunk", "", "N", "512", "tokens per forward chunk"},
                {"mtp", "", "", "", "also run the MTP (next-n) module and print its log-probabilities"},
                {"threads", "t", "N", "all cores", "compute threads"},
                DI_WEIGHT_FLAGS,
                DI_PARALLEL_FLAGS,
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  SetLogLevel(LogLevel::kWarn);
  if (args.Has("threads")) SetComputeThreads(static_cast<int>(args.GetInt("threads")));
  auto j = nlohmann::json::parse(args.Get("tokens"), nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) return Fail(InvalidArgument("--tokens must be a non-empty JSON array of ids"));
  std::vector<int32_t> ids;
  for (auto& v : j) {
    if (!v.is_number_integer()) return Fail(InvalidArgument("--tokens must hold integers"));
    ids.push_back(v.get<int32_t>());
  }
  // Under mpirun every rank runs the same sequence (the parallel layers' collectives need all of them); rank 0
  // prints.
  if (Status s = SetupParallel(args); !s.ok()) return Fail(s);
  auto model = LoadModelOrDie(args.Get("model"), LoadOptionsFromArgs(args));
  if (Status s = api::CheckSameModelEverywhere(model->source); !s.ok()) return Fail(s);
  const int n = static_cast<int>(ids.size()), V = model->config.vocab_size;
  Transformer tf(*model, static_cast<int>(args.GetInt("chunk")), dist::Context());
  SequenceKvCache kv(RankKvLayout(*model), n);  // this rank's KV heads under tensor parallelism
  const bool mtp = args.Has("mtp");
  if (mtp && model->mtp.empty()) return Fail(InvalidArgument(args.Get("model") + ": the model has no MTP module"));
  if (mtp && n < 2) return Fail(InvalidArgument("--mtp needs at least two tokens"));
  std::vector<float> logits(static_cast<size_t>(n) * V), lp(V), hidden;
  if (mtp) hidden.resize(static_cast<size_t>(n) * model->config.mtp_hidden());
  if (Status s = tf.Forward(ids.data(), n, 0, kv, logits.data(), true, mtp ? hidden.data() : nullptr); !s.ok()) return Fail(s);
  std::string out = "{\"logprobs\":[";
  char buf[32];
  auto append_rows = [&](const float* rows, int count) {
    for (int i = 0; i < count; ++i) {
      LogSoftmax(rows + static_cast<size_t>(i) * V, lp.data(), V);
      out += i ? ",[" : "[";
      for (int t = 0; t < V; ++t) {
        std::snprintf(buf, sizeof buf, t ? ",%.9g" : "%.9g", lp[t]);
        out += buf;
      }
      out += "]";
    }
  };
  append_rows(logits.data(), n);
  if (mtp) {
    // Row i: token i+1 with h_i at position i, one row per SeqForward so every row yields logits.
    SequenceKvCache mtp_kv(tf.MtpKvLayout(), n);
    const int nb = static_cast<int>(mtp_kv.block_table().size()), chunk = tf.max_batch_tokens();
    std::vector<SeqForward> rows;
    for (int done = 0; done < n - 1; done += chunk) {
      const int len = std::min(chunk, n - 1 - done);
      rows.clear();
      for (int i = done; i < done + len; ++i) rows.push_back({&ids[i + 1], 1, i, mtp_kv.block_table().data(), nb, true});
      if (Status s = tf.ForwardMtp(0, rows.data(), len, hidden.data() + static_cast<size_t>(done) * model->config.mtp_hidden(),
                                   mtp_kv.paged(), logits.data() + static_cast<size_t>(done) * V);
          !s.ok())
        return Fail(s);
    }
    out += "],\"mtp\":[";
    append_rows(logits.data(), n - 1);
  }
  out += "]}\n";
  if (const dist::DistContext* d = dist::Context(); d && d->pc.cp > 1)
    // The balance of the context-parallel split (query x key pairs each rank's attention computed).
    std::fprintf(stderr, "context parallel: rank %d (cp %d/%d): attention work %lld query-key pairs, K/V exchange sent %.3f MB\n",
                 d->pc.rank, d->pc.cp_rank(), d->pc.cp, static_cast<long long>(d->attention_work.load()),
                 d->cp->bytes_sent() / 1e6);
  if (dist::World().rank() != 0) return 0;
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace deepinfer::cli
