// deepinfer eplb: DeepSeek's expert-parallel load balancer (src/dist/eplb.h) over a load file, printing the
// placement as JSON (the reference's three tensors) or as a per-rank table next to the naive placement.
#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "dist/eplb.h"

namespace deepinfer::cli {
namespace {

// The load file: [[load per logical expert] per layer], numbers >= 0 (RebalanceExperts checks shape and values).
StatusOr<std::vector<std::vector<double>>> ReadLoad(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  const std::string shape = " (expected [[load per logical expert] per layer])";
  if (!j.is_array()) return InvalidArgument(path + ": the top level is not an array" + shape);
  std::vector<std::vector<double>> load;
  for (size_t l = 0; l < j.size(); ++l) {
    if (!j[l].is_array()) return InvalidArgument(path + ": layer " + std::to_string(l) + " is not an array" + shape);
    auto& row = load.emplace_back();
    for (size_t e = 0; e < j[l].size(); ++e) {
      if (!j[l][e].is_number())
        return InvalidArgument(path + ": layer " + std::to_string(l) + " expert " + std::to_string(e) +
                               " is not a number: " + j[l][e].dump());
      row.push_back(j[l][e].get<double>());
    }
  }
  return load;
}

// Python's json.dumps spacing ("[1, 2]", "\"key\": "), the form the reference's users see.
template <typename T>
void AppendJson(std::string* out, const std::vector<T>& v) {
  *out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) *out += ", ";
    if constexpr (std::is_integral_v<T>) *out += std::to_string(v[i]);
    else AppendJson(out, v[i]);
  }
  *out += ']';
}

void PrintTable(const std::vector<std::vector<double>>& load, const dist::EplbPlacement& p, int ranks, int nodes) {
  const int slots = static_cast<int>(p.phy2log[0].size()), per_rank = slots / ranks, ranks_per_node = ranks / nodes;
  const auto before = dist::RankImbalance(load, dist::RoundRobinPlacement(static_cast<int>(load.size()),
                                                                           static_cast<int>(load[0].size()), slots),
                                          ranks);
  const auto after = dist::RankImbalance(load, p, ranks);
  for (size_t l = 0; l < load.size(); ++l) {
    std::printf("layer %zu: max/mean rank load %.3f round-robin -> %.3f eplb\n", l, before[l], after[l]);
    std::printf("  rank  node        load  experts (e/n: one of n replicas of expert e)\n");
    for (int r = 0; r < ranks; ++r) {
      double rank_load = 0;
      std::string experts;
      for (int s = r * per_rank; s < (r + 1) * per_rank; ++s) {
        const int e = p.phy2log[l][s], n = p.logcnt[l][e];
        rank_load += load[l][e] / n;
        if (!experts.empty()) experts += ' ';
        experts += std::to_string(e);
        if (n > 1) experts.append(1, '/').append(std::to_string(n));
      }
      std::printf("  %4d  %4d  %10.1f  %s\n", r, r / ranks_per_node, rank_load, experts.c_str());
    }
  }
}

}  // namespace

int CmdEplb(int argc, char** argv) {
  Args args("eplb",
            "Expert placement with DeepSeek's EPLB: replicate hot MoE experts and spread the replicas over ranks so\n"
            "that every rank gets about the same load. LOAD.json is [[load per logical expert] per layer] (token\n"
            "counts, e.g. a moving average of routing statistics). Slot p lives on rank p / (R/P), ranks\n"
            "n*(P/NODES) .. (n+1)*(P/NODES)-1 on node n. Policy: hierarchical when G % NODES == 0 (groups packed\n"
            "onto nodes, replicas stay on their group's node), otherwise global (all slots, all ranks).\n"
            "--json prints {\"phy2log\": [[...]], \"log2phy\": [[[...]]], \"logcnt\": [[...]]} on one line: slot ->\n"
            "expert, expert -> its slots (padded with -1), expert -> replica count, per layer. Without it: a table\n"
            "per layer and the max/mean rank load of the result and of the plain round-robin placement, which\n"
            "puts logical expert p mod E in slot p (every expert once in order, then extra replicas of experts\n"
            "0, 1, 2, ... in the R-E redundant slots). A slot carries its expert's load / the expert's replica count.",
            {
                {"weights", "", "LOAD.json", "", "per-layer load of every logical expert (required)"},
                {"replicas", "", "R", "", "physical expert slots per layer: logical + redundant, a multiple of P (required)"},
                {"groups", "", "G", "1", "expert groups of the router (DeepSeek-V3: 8); must divide the expert count"},
                {"nodes", "", "NODES", "1", "nodes (fast links inside a node); must divide P"},
                {"ranks", "", "P", "", "expert-parallel ranks (GPUs) in all (required)"},
                {"json", "", "", "", "print the placement as one JSON object"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  for (const char* required : {"weights", "replicas", "ranks"})
    if (!args.Has(required)) {
      std::fprintf(stderr, "deepinfer eplb: --%s is required (see --help)\n", required);
      return 2;
    }
  if (!args.positional().empty()) {
    std::fprintf(stderr, "deepinfer eplb: unexpected argument '%s' (see --help)\n", args.positional()[0].c_str());
    return 2;
  }
  int values[4];
  const char* names[4] = {"replicas", "groups", "nodes", "ranks"};
  for (int i = 0; i < 4; ++i) {
    const long long v = args.GetInt(names[i]);
    if (v < INT_MIN || v > INT_MAX) return Fail(InvalidArgument(std::string("--") + names[i] + " is out of range"));
    values[i] = static_cast<int>(v);
  }
  const auto [replicas, groups, nodes, ranks] = values;
  auto load = ReadLoad(args.Get("weights"));
  if (!load.ok()) return Fail(load.status());
  auto placement = dist::RebalanceExperts(*load, replicas, groups, nodes, ranks);
  if (!placement.ok()) return Fail(placement.status());
  if (args.Has("json")) {
    std::string out = "{\"phy2log\": ";
    AppendJson(&out, placement->phy2log);
    out += ", \"log2phy\": ";
    AppendJson(&out, placement->log2phy);
    out += ", \"logcnt\": ";
    AppendJson(&out, placement->logcnt);
    out += "}\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  const bool hierarchical = groups % nodes == 0;
  std::printf("policy: %s; %d slots over %d ranks (%d per rank), %d nodes\n",
              hierarchical ? "hierarchical (groups packed onto nodes)" : "global (groups % nodes != 0)",
              replicas, ranks, replicas / ranks, nodes);
  PrintTable(*load, *placement, ranks, nodes);
  return 0;
}

}  // namespace deepinfer::cli
