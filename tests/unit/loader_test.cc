// Model loading end to end: the same tiny weights from HF and GGUF give the same logits, and every broken input
// is refused with a message naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/make_tiny.h"
#include "model/model.h"
#include "model/transformer.h"

namespace deepinfer {
namespace {
namespace fs = std::filesystem;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_loader_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    TinySpec s;
    s.arch = Arch::kQwen2;
    s.vocab = 300;
    s.layers = 2;
    ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kBoth, dir_.string(), true).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  void EditConfig(const std::function<void(nlohmann::json&)>& fn) {
    std::ifstream in(dir_ / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    fn(j);
    std::ofstream(dir_ / "config.json") << j.dump();
  }
  std::string LoadError(const fs::path& p) {
    auto m = LoadModelFromPath(p.string());
    EXPECT_FALSE(m.ok());
    return m.ok() ? "" : m.status().message();
  }

  fs::path dir_;
};

TEST_F(LoaderTest, HfAndGgufGiveTheSameLogits) {
  auto hf = LoadModelFromPath(dir_.string());
  auto gg = LoadModelFromPath((dir_ / "model.gguf").string());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  EXPECT_EQ((*hf)->config.Summary(), (*gg)->config.Summary());
  const std::vector<int32_t> toks = {1, 17, 250, 3, 99, 42, 7};
  std::vector<float> a(7 * 300), b(7 * 300);
  Transformer ta(**hf, 512, nullptr), tb(**gg, 512, nullptr);
  SequenceKvCache ka((*hf)->config.kv_layout(), 16), kb((*gg)->config.kv_layout(), 16);
  ASSERT_TRUE(ta.Forward(toks.data(), 7, 0, ka, a.data(), true).ok());
  ASSERT_TRUE(tb.Forward(toks.data(), 7, 0, kb, b.data(), true).ok());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

TEST_F(LoaderTest, ChunkedPrefillEqualsOneShotAndDecode) {
  auto m = LoadModelFromPath(dir_.string());
  ASSERT_TRUE(m.ok());
  const std::vector<int32_t> toks = {5, 6, 7, 8, 9, 10, 11, 12, 13};
  const int V = (*m)->config.vocab_size, n = static_cast<int>(toks.size());
  std::vector<float> full(n * V), step(V);
  Transformer whole(**m, 512, nullptr), chunked(**m, 2, nullptr);
  SequenceKvCache k1((*m)->config.kv_layout(), 16), k2((*m)->config.kv_layout(), 16);
  ASSERT_TRUE(whole.Forward(toks.data(), n, 0, k1, full.data(), true).ok());
  // Token by token through a 2-token-chunk transformer: the last row must match.
  for (int i = 0; i < n; ++i) ASSERT_TRUE(chunked.Forward(&toks[i], 1, i, k2, step.data(), false).ok());
  for (int v = 0; v < V; ++v) ASSERT_NEAR(step[v], full[(n - 1) * V + v], 1e-4);
}

TEST_F(LoaderTest, RejectsUnknownArchitecture) {
  EditConfig([](nlohmann::json& j) { j["model_type"] = "gptj"; });
  const std::string e = LoadError(dir_);
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown architecture 'gptj'"), std::string::npos) << e;

  GgufWriter w;
  w.SetString("general.architecture", "falcon");
  ASSERT_TRUE(w.Write((dir_ / "falcon.gguf").string()).ok());
  EXPECT_NE(LoadError(dir_ / "falcon.gguf").find("unknown architecture 'falcon'"), std::string::npos);
}

TEST_F(LoaderTest, RejectsShapeMismatch) {
  EditConfig([](nlohmann::json& j) { j["intermediate_size"] = 96; });
  const std::string e = LoadError(dir_);
  EXPECT_NE(e.find("mlp.gate_proj.weight' has shape [128, 64], expected [96, 64]"), std::string::npos) << e;
}

TEST_F(LoaderTest, RejectsMissingTensor) {
  EditConfig([](nlohmann::json& j) { j["num_hidden_layers"] = 3; });
  const std::string e = LoadError(dir_);
  EXPECT_NE(e.find("missing tensor 'model.layers.2.input_layernorm.weight'"), std::string::npos) << e;
}

TEST_F(LoaderTest, RejectsTruncatedFiles) {
  const auto gguf = dir_ / "model.gguf";
  fs::resize_file(gguf, fs::file_size(gguf) - 100);
  std::string e = LoadError(gguf);
  EXPECT_NE(e.find("model.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  const auto st = dir_ / "model.safetensors";
  fs::resize_file(st, fs::file_size(st) / 2);
  e = LoadError(dir_);
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("past the end"), std::string::npos) << e;
}

TEST_F(LoaderTest, RejectsInvalidConfigValues) {
  EditConfig([](nlohmann::json& j) { j["num_key_value_heads"] = 3; });
  EXPECT_NE(LoadError(dir_).find("multiple of head_count_kv"), std::string::npos);
  EditConfig([](nlohmann::json& j) { j["hidden_size"] = "big"; });
  EXPECT_NE(LoadError(dir_).find("'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(LoadError(dir_ / "nope.gguf").find("no such file"), std::string::npos);
}

TEST_F(LoaderTest, ForwardRejectsBadTokensAndOverflow) {
  auto m = LoadModelFromPath(dir_.string());
  ASSERT_TRUE(m.ok());
  Transformer t(**m, 512, nullptr);
  SequenceKvCache kv((*m)->config.kv_layout(), 4);
  std::vector<float> logits(300);
  const int32_t bad = 300;
  EXPECT_FALSE(t.Forward(&bad, 1, 0, kv, logits.data(), false).ok());
  const int32_t toks[5] = {1, 2, 3, 4, 5};
  EXPECT_EQ(t.Forward(toks, 5, 0, kv, logits.data(), false).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// MLA: the absorbed form (W_UK folded into the query, attention over the cached latent, W_UV afterwards) and the
// decompressed form (per-head K/V up-projected from the same cached latent) give the same logits; the cache
// holds exactly kv_lora_rank + qk_rope_head_dim values per token per layer.
TEST(MlaTest, AbsorbedAndDecompressedAttentionAgreeAndTheCacheHoldsOnlyTheLatent) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("deepinfer_mla_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  TinySpec s;
  s.arch = Arch::kDeepseekV3;
  s.layers = 3;
  s.experts = 8;
  s.experts_used = 2;
  s.n_group = 2;
  s.topk_group = 1;
  ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kGguf, (dir / "m.gguf").string(), true).ok());
  auto m = LoadModelFromPath((dir / "m.gguf").string());
  fs::remove_all(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelConfig& c = (*m)->config;
  ASSERT_TRUE(c.mla);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(3 + (i * 37) % 500);
  const int V = c.vocab_size, n = static_cast<int>(tokens.size());
  std::vector<float> a(static_cast<size_t>(n) * V), b(a.size());
  for (bool absorb : {true, false}) {
    Transformer tf(**m, 64, nullptr);
    tf.set_mla_absorb(absorb);
    SequenceKvCache kv(c.kv_layout(), 64);
    EXPECT_EQ(kv.paged().bytes_per_token_per_layer(), static_cast<size_t>(c.kv_lora_rank + c.qk_rope_dim) * sizeof(float));
    // Prefill 25 tokens, then decode the rest one at a time (the decode rows read the prefilled latent).
    std::vector<float>& out = absorb ? a : b;
    ASSERT_TRUE(tf.Forward(tokens.data(), 25, 0, kv, out.data(), true).ok());
    for (int i = 25; i < n; ++i)
      ASSERT_TRUE(tf.Forward(tokens.data() + i, 1, i, kv, out.data() + static_cast<size_t>(i) * V, false).ok());
  }
  // Relative error per position, norm-wise: max_t |a_t - b_t| / max_t |b_t| over the vocabulary.
  double worst = 0, worst_abs = 0;
  for (int i = 0; i < n; ++i) {
    double diff = 0, scale = 0;
    for (int t = 0; t < V; ++t) {
      diff = std::max(diff, std::fabs(static_cast<double>(a[static_cast<size_t>(i) * V + t]) - b[static_cast<size_t>(i) * V + t]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[static_cast<size_t>(i) * V + t])));
    }
    worst = std::max(worst, diff / scale);
    worst_abs = std::max(worst_abs, diff);
  }
  EXPECT_LT(worst, 1e-5) << "absorbed vs decompressed MLA (max abs " << worst_abs << ")";
  EXPECT_GT(worst, 0.0) << "the two paths should differ in rounding: are both really computed?";
  std::printf("MLA absorbed vs decompressed: max relative %.3g, max abs %.3g\n", worst, worst_abs);
  SequenceKvCache bf16(c.kv_layout(), 16, DType::kBF16);
  EXPECT_EQ(bf16.paged().bytes_per_token_per_layer(), static_cast<size_t>(c.kv_lora_rank + c.qk_rope_dim) * 2);
}

// A multimodal Gemma 3 checkpoint (Gemma3ForConditionalGeneration, 4B and up) loads as its text model: the
// config's sparse text_config (the family's defaults fill the rest) and the weights under the wrapper's prefix,
// in both layouts transformers has written; the vision tower's tensors are not read. Logits bitwise those of the
// plain text checkpoint with the same weights.
TEST(LoaderWrapped, Gemma3ConditionalGenerationLoadsItsTextModel) {
  const fs::path base = fs::temp_directory_path() / ("deepinfer_gemma3_wrap_" + std::to_string(::getpid()));
  fs::remove_all(base);
  TinySpec s;
  s.arch = Arch::kGemma3;
  s.vocab = 300;
  s.layers = 3;
  s.window = 5;
  s.swa_period = 3;
  const fs::path plain = base / "plain";
  ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kHf, plain.string(), true).ok());
  std::ifstream cin(plain / "config.json");
  const nlohmann::json text = nlohmann::json::parse(cin);
  auto st = SafetensorsModel::OpenDir(plain.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const std::vector<int32_t> toks = {1, 17, 250, 3, 99, 42, 7, 8, 9, 10, 11, 12};
  const int n = static_cast<int>(toks.size());
  auto logits = [&](const fs::path& dir) {
    auto m = LoadModelFromPath(dir.string());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    std::vector<float> out(static_cast<size_t>(n) * 300);
    if (!m.ok()) return out;
    Transformer t(**m, 64, nullptr);
    SequenceKvCache kv((*m)->config.kv_layout(), 32);
    EXPECT_TRUE(t.Forward(toks.data(), n, 0, kv, out.data(), true).ok());
    return out;
  };
  const std::vector<float> want = logits(plain);
  for (const std::string layout : {"model.language_model.", "language_model.model."}) {
    const fs::path dir = base / layout;
    fs::create_directories(dir);
    std::vector<SafetensorsEntry> entries;
    for (const auto& [name, v] : (*st)->tensors()) {
      std::string renamed = name.rfind("model.", 0) == 0 ? layout + name.substr(6)
                            : layout == "language_model.model." ? "language_model." + name : name;
      const uint8_t* p = static_cast<const uint8_t*>(v.data);
      entries.push_back({renamed, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes)});
    }
    entries.push_back({"model.vision_tower.patch_embedding.weight", DType::kF32, {2, 2}, std::vector<uint8_t>(16, 0)});
    ASSERT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), entries).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(plain / f)) fs::copy_file(plain / f, dir / f, fs::copy_options::overwrite_existing);
    nlohmann::json tc = text;
    tc.erase("architectures");
    tc.erase("num_attention_heads");  // left to the family's defaults: 8 would not fit this model
    nlohmann::json cfg = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                          {"text_config", tc}, {"vision_config", {{"model_type", "siglip_vision_model"}}}};
    std::ofstream(dir / "config.json") << cfg.dump();
    // Without num_attention_heads the default (8 heads of 16 over hidden 64) gives another q shape: refused.
    auto bad = LoadModelFromPath(dir.string());
    ASSERT_FALSE(bad.ok()) << layout;
    EXPECT_NE(bad.status().message().find("self_attn.q_proj.weight"), std::string::npos) << bad.status().message();
    cfg["text_config"]["num_attention_heads"] = text["num_attention_heads"];
    std::ofstream(dir / "config.json") << cfg.dump();
    const std::vector<float> got = logits(dir);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << layout << " logit " << i;
  }
  fs::remove_all(base);
}

}  // namespace
}  // namespace deepinfer
