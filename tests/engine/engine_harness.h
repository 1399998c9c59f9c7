// Shared helpers for the engine tests: a mixed request workload, and a runner that collects every event.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/make_tiny.h"
#include "model/model.h"
#include "unit/test_util.h"

namespace deepinfer::testing {

// stories260K (a real trained model) from the shared models, loaded once per test binary. Without it the tests
// that need it cannot run at all: the binary stops with the reason (a test must not pass, skip or crash silently).
inline const Model& Stories() {
  static std::unique_ptr<Model> m = [] {
    auto r = LoadModelFromPath(SharedModels() + "/stories260K.gguf");
    if (!r.ok()) {
      std::fprintf(stderr, "engine tests: cannot load the shared model stories260K (%s); the tests expect ../shared/models "
                           "next to the repository\n", r.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(r).value();
  }();
  return *m;
}

// A fresh directory per test (the process id keeps parallel test binaries apart), removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("deepinfer_kvstore_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// An engine for `m` (nullptr, with a test failure naming the reason, when it cannot be made).
inline std::unique_ptr<Engine> MakeEngine(const Model& m, const EngineOptions& o) {
  auto e = Engine::Create(m, o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// A random model of the given layout, written as GGUF and loaded once per test binary.
inline std::unique_ptr<Model> MakeTiny(TinySpec s, const std::string& tag) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("deepinfer_engine_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(MakeTinyModel(s, TinyFormat::kGguf, (dir / "m.gguf").string(), true).ok());
  auto r = LoadModelFromPath((dir / "m.gguf").string());
  std::filesystem::remove_all(dir);
  if (!r.ok()) {
    ADD_FAILURE() << r.status().ToString();
    return nullptr;
  }
  return std::move(r).value();
}

inline TinySpec SmallSpec(Arch arch) {
  TinySpec s;
  s.arch = arch;
  s.vocab = 384;
  s.layers = 2;
  s.ctx = 512;
  return s;
}


struct TestRequest {
  std::vector<int32_t> prompt;
  RequestParams params;
  int abort_after = -1;  // abort when sample 0 has this many tokens (n must be 1)
};

struct SampleResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  std::string text, finish_reason, stop_reason;
  int finals = 0;  // final events received (must be exactly 1)
};
struct RequestResult {
  std::vector<SampleResult> samples;
  int cached_tokens = 0, replayed_tokens = 0;
  std::string error;
};

// Runs every request through one engine (RunUntilIdle on this thread); returns results in request order.
inline std::vector<RequestResult> RunRequests(const Model& model, const EngineOptions& opt,
                                              const std::vector<TestRequest>& reqs, EngineStats* stats = nullptr,
                                              Status* leak_check = nullptr) {
  auto eng = Engine::Create(model, opt);
  EXPECT_TRUE(eng.ok()) << eng.status().ToString();
  if (!eng.ok()) return {};
  Engine& e = **eng;
  std::vector<RequestResult> out(reqs.size());
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].samples.resize(reqs[i].params.n);
    const int abort_after = reqs[i].abort_after;
    auto id = e.Add(reqs[i].prompt, reqs[i].params, [&out, &e, i, abort_after](const RequestOutput& ev) {
      SampleResult& s = out[i].samples[ev.index];
      s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const auto& lp : ev.logprobs) {
        s.logprobs.push_back(lp.logprob);
        s.top.push_back(lp.top);
      }
      s.text += ev.text;
      out[i].cached_tokens = ev.cached_tokens;
      if (ev.finished) {
        ++s.finals;
        s.finish_reason = ev.finish_reason;
        s.stop_reason = ev.stop_reason;
      } else if (abort_after >= 0 && static_cast<int>(s.tokens.size()) >= abort_after) {
        e.Abort(ev.request_id);
      }
    });
    if (!id.ok()) out[i].error = id.status().message();
  }
  Status run = e.RunUntilIdle();
  EXPECT_TRUE(run.ok()) << run.ToString();
  Status leaks = e.CheckNoLeaks();
  EXPECT_TRUE(leaks.ok()) << leaks.ToString();
  if (leak_check) *leak_check = leaks;
  if (stats) *stats = e.Stats();
  return out;
}

// A test pool of `blocks` blocks for model m. The tiny DeepSeek-V4's packed KV layout has one plane per block and
// 23 groups (its compressed rows packed into a single full-attention plane), so a sequence needs about twice the
// blocks it needs in the other tiny models' layouts, each block half the bytes.
inline int TestPoolBlocks(const Model& m, int blocks) { return m.config.is_dsv4() ? 2 * blocks : blocks; }

inline void ExpectSameResults(const std::vector<RequestResult>& a, const std::vector<RequestResult>& b,
                              const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].error, b[i].error) << what << " request " << i;
    ASSERT_EQ(a[i].samples.size(), b[i].samples.size());
    for (size_t j = 0; j < a[i].samples.size(); ++j) {
      const SampleResult &x = a[i].samples[j], &y = b[i].samples[j];
      ASSERT_EQ(x.tokens, y.tokens) << what << " request " << i << " sample " << j;
      ASSERT_EQ(x.finish_reason, y.finish_reason) << what << " request " << i << " sample " << j;
      ASSERT_EQ(x.text, y.text) << what << " request " << i << " sample " << j;
      ASSERT_EQ(x.logprobs.size(), y.logprobs.size());
      for (size_t k = 0; k < x.logprobs.size(); ++k) {  // bit-identical, not "close"
        ASSERT_EQ(std::memcmp(&x.logprobs[k], &y.logprobs[k], sizeof(float)), 0) << what << " request " << i;
        ASSERT_EQ(x.top[k], y.top[k]) << what << " request " << i;
      }
      ASSERT_EQ(x.finals, 1) << what << " request " << i << " sample " << j;
      ASSERT_EQ(y.finals, 1) << what << " request " << i << " sample " << j;
    }
  }
}

// A mixed workload: greedy and seeded sampling (top-k/p, min-p, penalties, logit bias), prompt lengths from 1
// to ~120 tokens drawn from a few shared stems (so prefixes repeat), stop strings, n > 1, logprobs, EOS
// allowed, and aborts at random token counts.
inline std::vector<TestRequest> MixedWorkload(int count, int vocab, int32_t bos, uint32_t seed,
                                              const std::vector<std::string>& stops) {
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> stems(4);
  for (auto& s : stems) {
    if (bos >= 0) s.push_back(bos);
    const int len = uni(20, 90);
    for (int i = 0; i < len; ++i) s.push_back(uni(3, vocab - 1));
  }
  std::vector<TestRequest> reqs(count);
  for (auto& r : reqs) {
    r.prompt = uni(0, 4) == 0 ? std::vector<int32_t>{bos >= 0 ? bos : 1} : stems[uni(0, 3)];
    if (r.prompt.size() > 1) r.prompt.resize(uni(1, static_cast<int>(r.prompt.size())));
    for (int i = uni(0, 30); i > 0; --i) r.prompt.push_back(uni(3, vocab - 1));
    RequestParams& p = r.params;
    p.max_tokens = uni(1, 60);
    p.has_seed = true;
    p.sampling.seed = rng();
    switch (uni(0, 3)) {
      case 0: break;  // greedy
      case 1: p.sampling.temperature = 0.9f, p.sampling.top_k = 40, p.sampling.top_p = 0.95f; break;
      case 2: p.sampling.temperature = 1.2f, p.sampling.min_p = 0.05f; break;
      case 3:
        p.sampling.temperature = 0.7f;
        p.sampling.presence_penalty = 0.5f;
        p.sampling.frequency_penalty = 0.3f;
        p.sampling.repetition_penalty = 1.1f;
        p.sampling.logit_bias = {{uni(3, vocab - 1), 5.f}, {uni(3, vocab - 1), -100.f}};
        break;
    }
    if (uni(0, 3) == 0 && !stops.empty()) p.stop = {stops[uni(0, static_cast<int>(stops.size()) - 1)]};
    if (uni(0, 4) == 0) p.logprobs = uni(0, 5);
    if (uni(0, 6) == 0) {
      p.n = uni(2, 3);
    } else if (uni(0, 7) == 0) {
      r.abort_after = uni(1, 10);
    }
  }
  return reqs;
}

}  // namespace deepinfer::testing
