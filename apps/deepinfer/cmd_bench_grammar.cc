// `deepinfer bench grammar`: grammar compile time and per-token mask time over a JSON Schema corpus on real
// vocabularies, single thread. Each schema is walked as a random-weight model would walk it: at every step
// the mask is computed (timed), then a uniformly random allowed token is taken (seeded), until the grammar
// terminates or --steps tokens; the end-of-generation token is taken whenever allowed with probability 1/2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "args.h"
#include "commands.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

namespace {

using Clock = std::chrono::steady_clock;
double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

}  // namespace

int CmdBenchGrammar(int argc, char** argv) {
  Args args("bench grammar",
            "Grammar compile time and per-token mask time (avg, p50, p99, p99.9) over a JSON Schema corpus, on each\n"
            "given vocabulary, single thread. The corpus is a JSONL file of schemas (one per line); tests/server/\n"
            "structured_output.mjs --dump-schemas FILE writes the e2e test's 201-schema corpus.",
            {
                {"tokenizer", "", "LIST", "", "comma-separated tokenizers (GGUFs, tokenizer.json files, or their directories)"},
                {"schemas", "", "FILE", "", "JSONL: one JSON Schema per line"},
                {"steps", "", "N", "256", "tokens per schema at most"},
                {"seed", "", "N", "1", "seed of the random walk"},
                {"token-sets", "", "on|off", "on",
                 "precompute per-position token sets at compile time (what the engine does); off: every new state's\n"
                 "mask walks the whole vocabulary trie"},
                {"out", "", "FILE", "", "write the results as JSON"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  if (!args.Has("tokenizer") || !args.Has("schemas")) return Fail(InvalidArgument("--tokenizer and --schemas are required"));
  std::vector<nlohmann::json> schemas;
  {
    std::ifstream in(args.Get("schemas"));
    if (!in) return Fail(IoError("cannot read " + args.Get("schemas")));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) schemas.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  const int steps = static_cast<int>(args.GetInt("steps"));
  nlohmann::json results = nlohmann::json::array();
  std::string list = args.Get("tokenizer");
  for (size_t start = 0; start < list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string path = list.substr(start, comma - start);
    start = comma + 1;
    auto tok = TokenizerFromPath(path);
    if (!tok.ok()) return Fail(tok.status());
    auto t0 = Clock::now();
    auto trie = grammar::TokenTrie::FromTokenizer(**tok);
    const double trie_ms = Us(Clock::now() - t0) / 1000;
    const bool use_sets = args.Get("token-sets") != "off";
    std::vector<double> mask_us, compile_us;
    uint64_t uncertain_checked = 0, table_stacks = 0;
    std::vector<uint32_t> bits((trie->vocab_size() + 31) / 32);
    std::mt19937_64 rng(args.GetInt("seed"));
    int failed = 0, terminated = 0;
    uint64_t hits = 0, masks = 0;
    for (const auto& schema : schemas) {
      t0 = Clock::now();
      auto g = grammar::CompileJsonSchema(schema);
      compile_us.push_back(Us(Clock::now() - t0));
      if (!g.ok()) {
        ++failed;
        continue;
      }
      std::shared_ptr<const grammar::TokenSets> sets;
      if (use_sets) {
        sets = grammar::TokenSets::Build(*g, trie);
        compile_us.back() = Us(Clock::now() - t0);  // compile + token sets, as a request pays it
      }
      grammar::GrammarMatcher m = sets ? grammar::GrammarMatcher(sets) : grammar::GrammarMatcher(*g, trie);
      for (int s = 0; s < steps; ++s) {
        t0 = Clock::now();
        m.FillMask(bits.data());
        mask_us.push_back(Us(Clock::now() - t0));
        if (m.IsAccepting() && rng() % 2 == 0) {
          ++terminated;
          break;
        }
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->vocab_size(); ++id)
          if (((bits[id >> 5] >> (id & 31)) & 1) && !(*tok)->IsEog(id)) allowed.push_back(id);
        if (allowed.empty()) {
          ++terminated;
          break;
        }
        m.AcceptToken(allowed[rng() % allowed.size()]);
      }
      hits += m.stats().cache_hits;
      uncertain_checked += m.stats().uncertain_checked;
      table_stacks += m.stats().table_stacks;
      masks += m.stats().masks;
    }
    double sum = 0, csum = 0;
    for (double v : mask_us) sum += v;
    for (double v : compile_us) csum += v;
    nlohmann::json r = {{"tokenizer", path}, {"vocab", trie->vocab_size()}, {"trie_nodes", trie->num_nodes()},
                        {"trie_build_ms", trie_ms}, {"schemas", schemas.size()}, {"schemas_failed", failed},
                        {"walks_terminated", terminated}, {"masks", mask_us.size()},
                        {"mask_us_avg", mask_us.empty() ? 0 : sum / mask_us.size()}, {"mask_us_p50", Percentile(mask_us, 0.5)},
                        {"mask_us_p99", Percentile(mask_us, 0.99)}, {"mask_us_p999", Percentile(mask_us, 0.999)},
                        {"mask_cache_hit_rate", masks ? static_cast<double>(hits) / masks : 0},
                        {"compile_us_avg", compile_us.empty() ? 0 : csum / compile_us.size()},
                        {"compile_us_p99", Percentile(compile_us, 0.99)}, {"token_sets", use_sets},
                        {"table_stacks", table_stacks}, {"uncertain_bytes_fed", uncertain_checked}};
    std::printf("%s: vocab %d, trie %zu nodes built in %.0f ms; %zu masks: avg %.1f us, p50 %.1f, p99 %.1f, p99.9 %.1f "
                "(cache hits %.0f%%); compile%s avg %.0f us, p99 %.0f us; %d schemas failed to compile\n",
                path.c_str(), trie->vocab_size(), trie->num_nodes(), trie_ms, mask_us.size(), r["mask_us_avg"].get<double>(),
                r["mask_us_p50"].get<double>(), r["mask_us_p99"].get<double>(), r["mask_us_p999"].get<double>(),
                100 * r["mask_cache_hit_rate"].get<double>(), use_sets ? " (with token sets)" : "", r["compile_us_avg"].get<double>(),
                r["compile_us_p99"].get<double>(), failed);
    results.push_back(r);
  }
  if (args.Has("out")) std::ofstream(args.Get("out")) << results.dump(2) << "\n";
  return 0;
}

}  // namespace deepinfer::cli
