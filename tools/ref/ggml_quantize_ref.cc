// Test tool for the quantized-GGUF parity test (tests/parity/quant_logprobs.mjs): rewrites a GGUF with its
// matrices quantized by the ggml library node-llama-cpp ships (ggml_quantize_chunk, the same code llama.cpp's
// llama-quantize runs), so deepinfer and llama.cpp are compared on files quantized by llama.cpp itself. Metadata
// and 1-D tensors are copied as they are. Built only as a test tool (tests/CMakeLists.txt); it is not part of
// deepinfer.
//
// usage: ggml_quantize_ref IN.gguf OUT.gguf DEFAULT_TYPE [NAME=TYPE ...]
//   Each tensor of 2 or more dimensions gets the type of the first rule whose NAME starts its name or follows a
//   '.' in it ("output" matches output.weight, not blk.0.attn_output.weight; "attn_v" matches blk.N.attn_v.weight),
//   else DEFAULT_TYPE (I32 tensors are copied as they are). Types are ggml names (q4_K, q6_K, q8_0, iq4_nl, f16, ...).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ggml.h"
#include "gguf.h"

namespace {

void Die(const std::string& what) {
  std::fprintf(stderr, "ggml_quantize_ref: %s\n", what.c_str());
  std::exit(1);
}

ggml_type TypeFromName(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(static_cast<ggml_type>(t));
    if (n && name == n) return static_cast<ggml_type>(t);
  }
  Die("unknown type " + name);
  return GGML_TYPE_COUNT;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) Die("usage: ggml_quantize_ref IN.gguf OUT.gguf DEFAULT_TYPE [NAME=TYPE ...]");
  const ggml_type def = TypeFromName(argv[3]);
  std::vector<std::pair<std::string, ggml_type>> rules;
  for (int i = 4; i < argc; ++i) {
    const char* eq = std::strchr(argv[i], '=');
    if (!eq) Die(std::string("bad rule ") + argv[i]);
    rules.emplace_back(std::string(argv[i], static_cast<size_t>(eq - argv[i])), TypeFromName(eq + 1));
  }
  ggml_context* in_ctx = nullptr;
  gguf_init_params params{/*no_alloc=*/false, &in_ctx};
  gguf_context* in = gguf_init_from_file(argv[1], params);
  if (!in) Die(std::string("cannot read ") + argv[1]);

  gguf_context* out = gguf_init_empty();
  gguf_set_kv(out, in);
  const int64_t n = gguf_get_n_tensors(in);
  // Tensor metadata of the output lives in its own context; the quantized bytes in `buffers`.
  ggml_init_params cp{static_cast<size_t>(n + 1) * ggml_tensor_overhead(), nullptr, /*no_alloc=*/true};
  ggml_context* meta = ggml_init(cp);
  std::vector<std::vector<uint8_t>> buffers(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const char* name = gguf_get_tensor_name(in, i);
    ggml_tensor* src = ggml_get_tensor(in_ctx, name);
    if (!src) Die(std::string("no tensor ") + name);
    ggml_type type = src->type;
    if (ggml_n_dims(src) >= 2 && src->type != GGML_TYPE_I32) {  // integer tables (DeepSeek-V4's tid2eid) as they are
      type = def;
      for (const auto& [sub, t] : rules)
        if (std::strncmp(name, sub.c_str(), sub.size()) == 0 || std::strstr(name, ("." + sub).c_str())) {
          type = t;
          break;
        }
      if (src->type != GGML_TYPE_F32) Die(std::string(name) + ": input matrices must be f32");
      if (src->ne[0] % ggml_blck_size(type)) Die(std::string(name) + ": row size not a multiple of the block size");
    }
    ggml_tensor* dst = ggml_new_tensor(meta, type, GGML_MAX_DIMS, src->ne);
    ggml_set_name(dst, name);
    auto& buf = buffers[static_cast<size_t>(i)];
    buf.resize(ggml_nbytes(dst));
    if (type == src->type) {
      std::memcpy(buf.data(), src->data, buf.size());
    } else {
      const int64_t rows = ggml_nrows(src), cols = src->ne[0];
      ggml_quantize_chunk(type, static_cast<const float*>(src->data), buf.data(), 0, rows, cols, nullptr);
    }
    dst->data = buf.data();
    gguf_add_tensor(out, dst);
  }
  if (!gguf_write_to_file(out, argv[2], false)) Die(std::string("cannot write ") + argv[2]);
  gguf_free(out);
  gguf_free(in);
  ggml_free(meta);
  ggml_free(in_ctx);
  return 0;
}
