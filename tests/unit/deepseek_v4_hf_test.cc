// DeepSeek-V4 HF checkpoints in DeepSeek's own format (the one llama.cpp's converter reads): make-tiny's HF
// directory (FP8 linear weights with E8M0 128x128 block scales, MXFP4 experts packed per expert, the MTP block's
// e_proj / h_proj and own hc head) loads into the weights of the GGUF beside it: the experts bitwise ggml's MXFP4
// blocks, the FP8 weights to the GGUF's f32 values, eh_proj = [e_proj | h_proj]. Checkpoints with a scale missing
// or of the wrong shape are refused with an error naming the tensor.
// And in transformers' renamed layout (make-tiny --hf-layout transformers): the same seed loads to bitwise the same
// weights as DeepSeek's layout, its config.json keys (layer_types, compress_rates, mlp_layer_types,
// partial_rotary_factor, rope_parameters) to the same configuration; a directory mixing the layouts, or with a
// tensor misnamed, is refused naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "model/arch/arch.h"
#include "model/arch/model_tensors.h"
#include "model/make_tiny.h"
#include "model/model.h"

namespace deepinfer {
namespace {
namespace fs = std::filesystem;

// A copy of the HF directory `from` as `dir`, its tensors edited by `edit` (return false to drop one).
fs::path CopyVariant(const fs::path& from, const fs::path& dir, const std::function<bool(SafetensorsEntry&)>& edit) {
  auto st = SafetensorsModel::OpenDir(from.string());
  EXPECT_TRUE(st.ok());
  fs::create_directories(dir);
  std::vector<SafetensorsEntry> entries;
  for (const auto& [n, v] : (*st)->tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    SafetensorsEntry e{n, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes)};
    if (edit(e)) entries.push_back(std::move(e));
  }
  EXPECT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), entries).ok());
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(from / f, dir / f);
  return dir;
}

// Loading `dir` fails with a message holding every one of `needles`.
void ExpectRefused(const fs::path& dir, std::initializer_list<const char*> needles) {
  auto m = LoadModelFromPath(dir.string());
  ASSERT_FALSE(m.ok()) << dir;
  for (const char* n : needles) EXPECT_NE(m.status().message().find(n), std::string::npos) << m.status().ToString();
}

class DeepseekV4Hf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("deepinfer_dsv4_hf_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    TinySpec s;
    s.arch = Arch::kDeepseekV4;
    s.dtype = DType::kF8E4M3;
    s.expert_dtype = DType::kMXFP4;
    s.mtp = true;
    ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kBoth, (base_ / "plain").string(), true).ok());
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }

  // A copy of the tiny HF directory with its tensors edited by `edit` (return false to drop one).
  static fs::path Variant(const std::string& name, const std::function<bool(SafetensorsEntry&)>& edit) {
    return CopyVariant(base_ / "plain", base_ / name, edit);
  }

  static std::vector<float> Rows(const TensorView& t) {
    std::vector<float> out(static_cast<size_t>(t.rows() * t.cols()));
    for (int64_t r = 0; r < t.rows(); ++r) t.RowToF32(r, out.data() + r * t.cols());
    return out;
  }

  static fs::path base_;
};
fs::path DeepseekV4Hf::base_;

TEST_F(DeepseekV4Hf, LoadsTheGgufsWeights) {
  auto hf = LoadModelFromPath((base_ / "plain").string());
  auto gg = LoadModelFromPath((base_ / "plain" / "model.gguf").string());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  const Model &a = **hf, &b = **gg;
  ASSERT_EQ(a.layers.size(), b.layers.size());
  ASSERT_EQ(a.mtp.size(), 1u);
  ASSERT_EQ(b.mtp.size(), 1u);
  auto same_values = [&](const TensorView& x, const TensorView& y, const char* what) {
    ASSERT_EQ(x.shape, y.shape) << what;
    EXPECT_EQ(Rows(x), Rows(y)) << what;
  };
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerWeights &x = a.layers[l], &y = b.layers[l];
    EXPECT_EQ(x.dsv4.wq_a.dtype, DType::kF8E4M3);  // FP8 with its E8M0 scales as f32 block scales
    ASSERT_NE(x.dsv4.wq_a.block_scale, nullptr);
    same_values(x.dsv4.wq_a, y.dsv4.wq_a, "wq_a");
    same_values(x.dsv4.wo_b, y.dsv4.wo_b, "wo_b");
    same_values(x.moe.shared.down, y.moe.shared.down, "shared down");
    EXPECT_EQ(x.moe.tid2eid, y.moe.tid2eid);
    for (size_t e = 0; e < x.moe.gate.size(); ++e)
      for (auto [p, q] : {std::pair{&x.moe.gate[e], &y.moe.gate[e]}, std::pair{&x.moe.up[e], &y.moe.up[e]},
                          std::pair{&x.moe.down[e], &y.moe.down[e]}}) {
        ASSERT_EQ(p->dtype, DType::kMXFP4);
        ASSERT_EQ(p->nbytes, q->nbytes);
        EXPECT_EQ(std::memcmp(p->data, q->data, p->nbytes), 0) << "layer " << l << " expert " << e;  // ggml's blocks
      }
  }
  same_values(a.mtp[0].eh_proj, b.mtp[0].eh_proj, "eh_proj");  // [e_proj | h_proj]
  EXPECT_EQ(a.mtp[0].hc_head.fn, a.hc_head.fn);  // the block's own, written equal to the model's
  EXPECT_EQ(b.mtp[0].hc_head.fn, b.hc_head.fn);  // GGUF: the model's stands in
  EXPECT_EQ(a.mtp[0].embed.data, a.tok_embd.data);  // V4's block has no embedding or head of its own
}

TEST_F(DeepseekV4Hf, BrokenScalesAreRefused) {
  ExpectRefused(Variant("no_fp8_scale", [](SafetensorsEntry& e) { return e.name != "layers.2.attn.wq_a.scale"; }),
                {"layers.2.attn.wq_a.weight", "layers.2.attn.wq_a.scale"});
  ExpectRefused(Variant("fp8_scale_shape", [](SafetensorsEntry& e) {
                  if (e.name == "layers.0.attn.wkv.scale") {  // {1, 2} -> {2, 1}
                    e.shape = {2, 1};
                  }
                  return true;
                }),
                {"layers.0.attn.wkv.scale", "{1, 2}"});
  ExpectRefused(Variant("fp8_scale_f32", [](SafetensorsEntry& e) {
                  if (e.name == "layers.1.ffn.shared_experts.w2.scale") {
                    e.dtype = DType::kF32;
                    e.bytes.resize(e.bytes.size() * 4);
                  }
                  return true;
                }),
                {"layers.1.ffn.shared_experts.w2.scale", "E8M0"});
  ExpectRefused(Variant("no_expert_scale", [](SafetensorsEntry& e) { return e.name != "layers.3.ffn.experts.5.w2.scale"; }),
                {"layers.3.ffn.experts.5.w2.scale"});
  ExpectRefused(Variant("expert_scale_shape", [](SafetensorsEntry& e) {
                  if (e.name == "layers.4.ffn.experts.0.w1.scale") {  // [128, 8] -> [64, 16]
                    e.shape = {64, 16};
                  }
                  return true;
                }),
                {"layers.4.ffn.experts.0.w1.scale", "[128, 8]"});
  ExpectRefused(Variant("no_h_proj", [](SafetensorsEntry& e) { return e.name != "mtp.0.h_proj.weight"; }), {"mtp.0.h_proj.weight"});
}

// Every tensor the two models declare, bitwise.
void ExpectSameWeights(Model& x, Model& y) {
  const ModelTensors tx = DeclareModelTensors(x.config, x), ty = DeclareModelTensors(y.config, y);
  std::vector<std::pair<const TensorList*, const TensorList*>> lists = {{&tx.embedding, &ty.embedding}, {&tx.head, &ty.head}};
  ASSERT_EQ(tx.layers.size(), ty.layers.size());
  for (size_t l = 0; l < tx.layers.size(); ++l) lists.emplace_back(&tx.layers[l], &ty.layers[l]);
  auto same = [](const TensorView& u, const TensorView& v, const std::string& what) {
    ASSERT_EQ(u.dtype, v.dtype) << what;
    ASSERT_EQ(u.shape, v.shape) << what;
    ASSERT_EQ(u.nbytes, v.nbytes) << what;
    EXPECT_EQ(std::memcmp(u.data, v.data, u.nbytes), 0) << what;
  };
  size_t compared = 0;
  for (const auto& [lx, ly] : lists) {
    ASSERT_EQ(lx->size(), ly->size());
    for (size_t i = 0; i < lx->size(); ++i) {
      const TensorDecl &u = *(lx->begin() + i), &v = *(ly->begin() + i);
      const std::string what = TensorName(GetArch(Arch::kDeepseekV4), WeightFormat::kHf, u.id, u.layer);
      ASSERT_EQ(u.id, v.id) << what;
      if (u.matrix) same(*u.matrix, *v.matrix, what);
      if (u.vector) {
        EXPECT_EQ(*u.vector, *v.vector) << what;
      }
      if (u.ints) {
        EXPECT_EQ(*u.ints, *v.ints) << what;
      }
      if (u.experts) {
        ASSERT_EQ(u.experts->size(), v.experts->size()) << what;
        for (size_t e = 0; e < u.experts->size(); ++e) same((*u.experts)[e], (*v.experts)[e], what + " expert " + std::to_string(e));
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100u);
}

// The same tiny V4 (every layer kind, hash and biased routing) in both HF layouts, f32 so that transformers' float
// experts hold exactly DeepSeek's values.
class DeepseekV4TransformersLayout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("deepinfer_dsv4_tf_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    TinySpec s;
    s.arch = Arch::kDeepseekV4;
    s.seed = 7;
    for (const char* layout : {"deepseek", "transformers"}) {
      s.hf_layout = layout;
      const Status made = MakeTinyModel(s, TinyFormat::kHf, (base_ / layout).string(), true);
      ASSERT_TRUE(made.ok()) << made.ToString();
    }
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }
  static fs::path base_;
};
fs::path DeepseekV4TransformersLayout::base_;

TEST_F(DeepseekV4TransformersLayout, WritesTransformersNames) {
  auto st = SafetensorsModel::OpenDir((base_ / "transformers").string());
  ASSERT_TRUE(st.ok());
  const SafetensorsModel& t = **st;
  // Names and shapes of transformers' DeepseekV4ForCausalLM (modeling_deepseek_v4.py); the tiny model: D 256,
  // 4 streams, 2 experts of 128, head 128, 32 indexer heads of 64.
  const std::pair<const char*, std::vector<int64_t>> want[] = {
      {"model.embed_tokens.weight", {512, 256}},
      {"model.hc_head.hc_fn", {4, 1024}},
      {"model.layers.0.attn_hc.fn", {24, 1024}},
      {"model.layers.0.attn_hc.scale", {3}},
      {"model.layers.0.self_attn.q_a_norm.weight", {64}},
      {"model.layers.0.self_attn.kv_proj.weight", {128, 256}},
      {"model.layers.0.self_attn.sinks", {4}},
      {"model.layers.0.mlp.gate.tid2eid", {512, 2}},
      {"model.layers.0.mlp.experts.gate_up_proj", {8, 256, 256}},
      {"model.layers.0.mlp.experts.down_proj", {8, 256, 128}},
      {"model.layers.2.self_attn.compressor.position_bias", {4, 256}},
      {"model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight", {32, 256}},
      {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", {32 * 64, 64}},
      {"model.layers.3.self_attn.compressor.kv_proj.weight", {128, 256}},
      {"model.layers.4.mlp.gate.e_score_correction_bias", {8}},
      {"lm_head.weight", {512, 256}},
  };
  for (const auto& [name, shape] : want) {
    const TensorView* v = t.Find(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->shape, shape) << name;
  }
  for (const auto& [name, view] : t.tensors()) EXPECT_EQ(name.rfind("layers.", 0), std::string::npos) << name;
}

TEST_F(DeepseekV4TransformersLayout, LoadsTheSameWeightsAndConfig) {
  auto a = LoadModelFromPath((base_ / "deepseek").string());
  auto b = LoadModelFromPath((base_ / "transformers").string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  Model &x = **a, &y = **b;
  const ModelConfig &p = x.config, &q = y.config;
  EXPECT_EQ(p.dsv4.compress_ratio, q.dsv4.compress_ratio);
  EXPECT_EQ(p.dsv4.hash_layers, q.dsv4.hash_layers);
  EXPECT_EQ(p.qk_rope_dim, q.qk_rope_dim);
  EXPECT_EQ(p.rope_theta, q.rope_theta);
  EXPECT_EQ(p.dsv4.compress_rope_theta, q.dsv4.compress_rope_theta);
  EXPECT_EQ(p.yarn.factor, q.yarn.factor);
  EXPECT_EQ(p.yarn.original_ctx, q.yarn.original_ctx);
  EXPECT_EQ(p.dsv4.swiglu_limit, q.dsv4.swiglu_limit);
  EXPECT_EQ(p.dsv4.swiglu_limit_shared, q.dsv4.swiglu_limit_shared);
  ExpectSameWeights(x, y);
}

// transformers' own renaming of DeepSeek's names, restated here independently of the family file: the rules of
// conversion_mapping.py's "deepseek_v4" entry in their order (structural prefixes, then the in-prefix leaves), the
// indexer's head weights under its `scorer` module (modeling_deepseek_v4.py: DeepseekV4Indexer.scorer.weights_proj),
// the base model under "model." (base_model_prefix) but lm_head; routed experts fused apart (below).
std::string TransformersName(std::string n) {
  static const std::pair<const char*, const char*> kRules[] = {
      {R"(^embed\.weight$)", "embed_tokens.weight"},
      {R"(^head\.weight$)", "lm_head.weight"},
      {R"(^hc_head_(fn|base|scale)$)", "hc_head.hc_$1"},
      {R"(^layers\.(\d+)\.attn_norm\.)", "layers.$1.input_layernorm."},
      {R"(^layers\.(\d+)\.ffn_norm\.)", "layers.$1.post_attention_layernorm."},
      {R"(^layers\.(\d+)\.hc_attn_(fn|base|scale)$)", "layers.$1.attn_hc.$2"},
      {R"(^layers\.(\d+)\.hc_ffn_(fn|base|scale)$)", "layers.$1.ffn_hc.$2"},
      {R"(^layers\.(\d+)\.attn\.)", "layers.$1.self_attn."},
      {R"(^layers\.(\d+)\.ffn\.)", "layers.$1.mlp."},
      {R"(^layers\.(\d+)\.self_attn\.attn_sink$)", "layers.$1.self_attn.sinks"},
      {R"(^layers\.(\d+)\.self_attn\.indexer\.compressor\.norm\.)", "layers.$1.self_attn.compressor.indexer.kv_norm."},
      {R"(^layers\.(\d+)\.self_attn\.indexer\.compressor\.ape$)", "layers.$1.self_attn.compressor.indexer.position_bias"},
      {R"(^layers\.(\d+)\.self_attn\.indexer\.compressor\.)", "layers.$1.self_attn.compressor.indexer."},
      {R"(^layers\.(\d+)\.self_attn\.indexer\.)", "layers.$1.self_attn.compressor.indexer."},
      {R"(^layers\.(\d+)\.self_attn\.compressor\.norm\.)", "layers.$1.self_attn.compressor.kv_norm."},
      {R"(^layers\.(\d+)\.self_attn\.compressor\.ape$)", "layers.$1.self_attn.compressor.position_bias"},
      {R"(^layers\.(\d+)\.self_attn\.(.*?)\.wq_b\.)", "layers.$1.self_attn.$2.q_b_proj."},
      {R"(^layers\.(\d+)\.self_attn\.(.*?)\.wkv\.)", "layers.$1.self_attn.$2.kv_proj."},
      {R"(^layers\.(\d+)\.self_attn\.(.*?)\.wgate\.)", "layers.$1.self_attn.$2.gate_proj."},
      {R"(^layers\.(\d+)\.self_attn\.wq_a\.)", "layers.$1.self_attn.q_a_proj."},
      {R"(^layers\.(\d+)\.self_attn\.wq_b\.)", "layers.$1.self_attn.q_b_proj."},
      {R"(^layers\.(\d+)\.self_attn\.wkv\.)", "layers.$1.self_attn.kv_proj."},
      {R"(^layers\.(\d+)\.self_attn\.wo_a\.)", "layers.$1.self_attn.o_a_proj."},
      {R"(^layers\.(\d+)\.self_attn\.wo_b\.)", "layers.$1.self_attn.o_b_proj."},
      {R"(^layers\.(\d+)\.self_attn\.q_norm\.)", "layers.$1.self_attn.q_a_norm."},
      {R"(^layers\.(\d+)\.mlp\.gate\.bias$)", "layers.$1.mlp.gate.e_score_correction_bias"},
      {R"(^layers\.(\d+)\.mlp\.shared_experts\.w1\.)", "layers.$1.mlp.shared_experts.gate_proj."},
      {R"(^layers\.(\d+)\.mlp\.shared_experts\.w2\.)", "layers.$1.mlp.shared_experts.down_proj."},
      {R"(^layers\.(\d+)\.mlp\.shared_experts\.w3\.)", "layers.$1.mlp.shared_experts.up_proj."},
      {R"(\.compressor\.indexer\.weights_proj\.)", ".compressor.indexer.scorer.weights_proj."},
  };
  for (const auto& [from, to] : kRules) n = std::regex_replace(n, std::regex(from), to);
  return n == "lm_head.weight" ? n : "model." + n;
}

TEST_F(DeepseekV4TransformersLayout, TransformersRenamingOfDeepseeksDirectoryLoadsTheSame) {
  // DeepSeek's directory renamed by the rules above, its experts fused as transformers' WeightConverter does
  // (MergeModulelist(dim=0) of each of w1 / w3 / w2, then Concatenate(dim=1) of w1's and w3's): the same model.
  const fs::path from = base_ / "deepseek", dir = base_ / "renamed";
  auto st = SafetensorsModel::OpenDir(from.string());
  ASSERT_TRUE(st.ok());
  std::map<std::string, std::map<int, const TensorView*>> experts;  // "layers.L.ffn.experts.w1" -> e -> tensor
  std::vector<SafetensorsEntry> out;
  const std::regex expert(R"(^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.weight$)");
  for (const auto& [n, v] : (*st)->tensors()) {
    std::smatch m;
    if (std::regex_match(n, m, expert)) {
      experts["model.layers." + m[1].str() + ".mlp.experts." + m[3].str()][std::stoi(m[2].str())] = &v;
      continue;
    }
    const uint8_t* p = static_cast<const uint8_t*>(v.data);
    out.push_back({TransformersName(n), v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes)});
  }
  ASSERT_FALSE(experts.empty());
  for (const auto& [key, by_expert] : experts) {
    if (key.back() == '3') continue;  // with w1
    const std::string layer = key.substr(0, key.size() - 2);
    const bool down = key.back() == '2';
    const std::map<int, const TensorView*>& up = experts[layer + "w3"];
    SafetensorsEntry e{layer + (down ? "down_proj" : "gate_up_proj"), by_expert.begin()->second->dtype, {}, {}};
    for (const auto& [i, t] : by_expert)
      for (const TensorView* part : down ? std::vector<const TensorView*>{t} : std::vector<const TensorView*>{t, up.at(i)})
        e.bytes.insert(e.bytes.end(), static_cast<const uint8_t*>(part->data), static_cast<const uint8_t*>(part->data) + part->nbytes);
    const std::vector<int64_t>& s = by_expert.begin()->second->shape;
    e.shape = {static_cast<int64_t>(by_expert.size()), down ? s[0] : 2 * s[0], s[1]};
    out.push_back(std::move(e));
  }
  fs::create_directories(dir);
  ASSERT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), out).ok());
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(base_ / "transformers" / f, dir / f);
  auto a = LoadModelFromPath(from.string());
  auto b = LoadModelFromPath(dir.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectSameWeights(**a, **b);
}

TEST_F(DeepseekV4TransformersLayout, ParsesTransformersConfigKeys) {
  // transformers' keys alone (no top-level compress_rope_theta or rope_scaling): the bases and YaRN from
  // rope_parameters, the ratios from layer_types + compress_rates (a non-default rate of 4 for HCA is refused
  // by the family's checks, as compress_ratios [.., 4, ..] is not), the hash layers from mlp_layer_types.
  nlohmann::json cfg = {
      {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", 512}, {"hidden_size", 256},
      {"num_hidden_layers", 3}, {"num_attention_heads", 8}, {"num_key_value_heads", 1}, {"head_dim", 128},
      {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-5}, {"n_routed_experts", 8}, {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 128}, {"q_lora_rank", 64}, {"sliding_window", 16}, {"o_groups", 2}, {"o_lora_rank", 32},
      {"index_n_heads", 4}, {"index_head_dim", 64}, {"index_topk", 4}, {"hc_mult", 4}, {"swiglu_limit", 10.0},
      {"partial_rotary_factor", 0.25},
      {"layer_types", {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"}},
      {"compress_rates", {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}}},
      {"mlp_layer_types", {"hash_moe", "hash_moe", "moe"}},
      {"rope_parameters", {{"main", {{"rope_type", "default"}, {"rope_theta", 20000.0}}},
                           {"compress", {{"rope_type", "yarn"}, {"rope_theta", 40000.0}, {"factor", 8.0},
                                         {"original_max_position_embeddings", 512}, {"attention_factor", 1.0}}}}}};
  auto c = ParseHfConfig(cfg.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->dsv4.compress_ratio, (std::vector<int>{0, 4, 128}));
  EXPECT_EQ(c->dsv4.hash_layers, 2);
  EXPECT_EQ(c->qk_rope_dim, 32);
  EXPECT_EQ(c->rope_theta, 20000.0);
  EXPECT_EQ(c->dsv4.compress_rope_theta, 40000.0);
  EXPECT_EQ(c->yarn.factor, 8.0);
  EXPECT_EQ(c->yarn.original_ctx, 512.0);
  auto refused = [&](nlohmann::json bad, const char* needle) {
    auto r = ParseHfConfig(bad.dump(), "config.json");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
  };
  nlohmann::json bad = cfg;
  bad["layer_types"][1] = "full_attention";
  refused(bad, "layer_types");
  bad = cfg;
  bad["mlp_layer_types"] = {"moe", "hash_moe", "moe"};
  refused(bad, "hash-routed layers after");
  bad = cfg;
  bad["compress_rates"]["heavily_compressed_attention"] = 64;
  refused(bad, "compress ratio 64");
  bad = cfg;
  bad["rope_parameters"]["compress"]["attention_factor"] = 1.2;
  refused(bad, "attention_factor");
}

TEST_F(DeepseekV4TransformersLayout, MixedOrMisnamedIsRefused) {
  const fs::path tf = base_ / "transformers";
  // One tensor under DeepSeek's name among transformers' ones.
  ExpectRefused(CopyVariant(tf, base_ / "mixed", [](SafetensorsEntry& e) {
                  if (e.name == "model.layers.1.self_attn.kv_proj.weight") e.name = "layers.1.attn.wkv.weight";
                  return true;
                }),
                {"mixes two tensor layouts", "'layers.1.attn.wkv.weight' is a deepseek-layout name", "a transformers-layout one"});
  // The indexer's head weights outside its scorer (another transformers version's spelling): missing.
  ExpectRefused(CopyVariant(tf, base_ / "misnamed", [](SafetensorsEntry& e) {
                  const std::string from = "model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight";
                  if (e.name == from) e.name = "model.layers.2.self_attn.compressor.indexer.weights_proj.weight";
                  return true;
                }),
                {"missing tensor", "model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight"});
  // Fused experts of the wrong height (gate alone, not gate and up).
  ExpectRefused(CopyVariant(tf, base_ / "half_experts", [](SafetensorsEntry& e) {
                  if (e.name == "model.layers.3.mlp.experts.gate_up_proj") {
                    e.shape[1] /= 2;
                    e.bytes.resize(e.bytes.size() / 2);
                  }
                  return true;
                }),
                {"model.layers.3.mlp.experts.gate_up_proj", "[8, 256, 256]"});
}

}  // namespace
}  // namespace deepinfer
