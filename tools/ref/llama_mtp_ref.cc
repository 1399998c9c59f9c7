// Reference for deepinfer's MTP parity test: llama.cpp (the library node-llama-cpp ships, same release as the
// headers extracted from its source bundle) runs a GGUF's main model over a token sequence and then its MTP
// (next-n) module, and prints full-vocabulary log-probabilities as JSON:
//   {"main": [[...], ...n rows], "mtp": [[...], ...n-1 rows]}
// MTP row i pairs token i+1 with the main model's state at position i (llama.cpp's "h_nextn" output: the
// final-normed hidden state, or DeepSeek-V4's un-collapsed residual streams) and predicts token i+2; it runs at position i, as deepinfer, vLLM and SGLang place it.
// Built only as a test tool (tests/CMakeLists.txt); it is not part of deepinfer.
//
// usage: llama_mtp_ref BACKEND_DIR MODEL.gguf 1,2,3,... [MTP.gguf]
// MTP.gguf: the MTP block from a GGUF of its own (DeepSeek-V4's mtp-*.gguf, as llama.cpp's converter writes it and
// llama.cpp's MTP speculation loads it as the draft model); MODEL.gguf then runs the main model only.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "llama-ext.h"
#include "llama.h"

namespace {

void Die(const char* what) {
  std::fprintf(stderr, "llama_mtp_ref: %s\n", what);
  std::exit(1);
}

void PrintLogSoftmaxRow(const float* logits, int n_vocab, bool first) {
  double mx = -INFINITY;
  for (int t = 0; t < n_vocab; ++t) mx = std::max(mx, static_cast<double>(logits[t]));
  double sum = 0;
  for (int t = 0; t < n_vocab; ++t) sum += std::exp(static_cast<double>(logits[t]) - mx);
  const double lse = mx + std::log(sum);
  std::printf(first ? "[" : ",[");
  for (int t = 0; t < n_vocab; ++t) std::printf(t ? ",%.9g" : "%.9g", static_cast<double>(logits[t]) - lse);
  std::printf("]");
}

llama_context* MakeContext(llama_model* model, int n_ctx, llama_context_type type) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_ubatch = n_ctx;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.ctx_type = type;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  return llama_init_from_model(model, cp);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) Die("usage: llama_mtp_ref BACKEND_DIR MODEL.gguf 1,2,3,... [MTP.gguf]");
  std::vector<llama_token> toks;
  std::stringstream ss(argv[3]);
  for (std::string item; std::getline(ss, item, ',');) toks.push_back(std::atoi(item.c_str()));
  const int n = static_cast<int>(toks.size());
  if (n < 2) Die("need at least two tokens");

  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
  }, nullptr);
  ggml_backend_load_all_from_path(argv[1]);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.load_mtp = argc == 4;
  mp.progress_callback = [](float, void*) { return true; };  // no progress dots on stderr
  llama_model* model = llama_model_load_from_file(argv[2], mp);
  if (!model) Die("cannot load the model");
  llama_model* mtp_model = model;
  if (argc == 5) {
    mp.load_mtp = true;
    mtp_model = llama_model_load_from_file(argv[4], mp);
    if (!mtp_model) Die("cannot load the MTP model");
  }
  if (llama_model_n_layer_nextn(mtp_model) < 1) Die("the model has no MTP layer");
  // The main model's state the MTP block reads: n_embd floats (V3), or DeepSeek-V4's hc x n_embd residual streams.
  const int n_embd = llama_model_n_embd_out(model);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n_ctx = ((n + 255) / 256) * 256;

  // Main model over all tokens: logits and h_nextn for every position.
  llama_context* tgt = MakeContext(model, n_ctx, LLAMA_CONTEXT_TYPE_DEFAULT);
  if (!tgt) Die("cannot create the main context");
  llama_set_embeddings_nextn(tgt, true, /*masked=*/false);
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = toks[i];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  if (llama_decode(tgt, b) != 0) Die("main decode failed");
  std::printf("{\"main\":[");
  for (int i = 0; i < n; ++i) PrintLogSoftmaxRow(llama_get_logits_ith(tgt, i), n_vocab, i == 0);
  std::vector<float> h(static_cast<size_t>(n) * n_embd);
  const float* hn = llama_get_embeddings_nextn(tgt);
  if (!hn) Die("no h_nextn output");
  std::memcpy(h.data(), hn, h.size() * sizeof(float));
  llama_batch_free(b);

  // MTP context: each row carries a token AND a hidden state (llama_batch_init allocates only one of them).
  llama_context* dft = MakeContext(mtp_model, n_ctx, LLAMA_CONTEXT_TYPE_MTP);
  if (!dft) Die("cannot create the MTP context");
  llama_set_embeddings_nextn(dft, true, /*masked=*/true);
  llama_batch m = llama_batch_init(n, n_embd, 1);
  std::vector<llama_token> mtok(n);
  m.token = mtok.data();
  for (int i = 0; i + 1 < n; ++i) {
    m.token[i] = toks[i + 1];
    std::memcpy(m.embd + static_cast<size_t>(i) * n_embd, h.data() + static_cast<size_t>(i) * n_embd, sizeof(float) * n_embd);
    m.pos[i] = i;
    m.n_seq_id[i] = 1;
    m.seq_id[i][0] = 0;
    m.logits[i] = 1;
  }
  m.n_tokens = n - 1;
  if (llama_decode(dft, m) != 0) Die("MTP decode failed");
  std::printf("],\"mtp\":[");
  for (int i = 0; i + 1 < n; ++i) PrintLogSoftmaxRow(llama_get_logits_ith(dft, i), n_vocab, i == 0);
  std::printf("]}\n");
  m.token = nullptr;  // ours, not malloc'd
  llama_batch_free(m);
  llama_free(dft);
  llama_free(tgt);
  if (mtp_model != model) llama_model_free(mtp_model);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
