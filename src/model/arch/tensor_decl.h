// One weight tensor as a model family declares it: which tensor (its TensorId, hence its name in each format),
// its shape for the configuration, whether a checkpoint may lack it, how tensor parallelism splits it, how
// `make-tiny` fills it, and the weight-struct member its data lands in. Families list their tensors with these
// (model/arch/tensor_list.h; shared blocks in model/arch/blocks.h), and the loader, `convert`, `make-tiny` and
// the sharder (model/shard.cc) all read those lists instead of naming tensors themselves, as llama.cpp's
// create_tensor calls (with TENSOR_NOT_REQUIRED) and LLM_TENSOR_INFOS do between them.
#pragma once
#include <cstdint>
#include <vector>

#include "model/arch/tensor_names.h"
#include "model/layers/linear.h"

namespace deepinfer {

// How the tensor is stored where the formats (or the structs the loader fills) differ.
enum class TensorForm : uint8_t {
  kMatrix,      // {rows, cols} in both formats
  kVector,      // {n} (norms, biases), held in f32
  kExpertVectors,  // one vector per routed expert {E, n} (gpt-oss's expert biases), held in f32 as E * n floats
  kExperts,     // routed experts {E, rows, cols}: HF has one {rows, cols} tensor per expert ("{e}" in the name),
                // GGUF one stacked tensor; held as one view per expert
  kGateVector,  // HF a {1, n} linear, GGUF an f32 vector {n} (Qwen2-MoE's shared-expert gate); held as {1, n}
  // MLA's key/value up-projection kv_b {H (nope + v), kv_lora} (W_UK and W_UV interleaved per head), as HF and
  // older GGUFs store it; llama.cpp's converter splits it into the two below, which follow it in the list. The
  // loader reads one form or the other, `convert` always writes the split one.
  kMlaKvB,
  kMlaKB,  // W_UK^T per head {H, kv_lora, nope}: held as f32 (MlaWeights::uk_t), also derived from kv_b
  kMlaVB,  // W_UV {H, v, kv_lora}: held as {H v, kv_lora}
  // DeepSeek-V4's hash routing table {vocab, top_k} of expert ids, I32 in both formats; held as int32s.
  kTokenExperts,
  // {rows, cols}: GGUF one matrix; HF its two input halves {rows, cols / 2} as two tensors (DeepSeek-V4's MTP
  // eh_proj = [e_proj | h_proj]: TensorIds kMtpEProj, kMtpHProj), joined by the loader.
  kInputHalves,
};

// Whether a checkpoint of the configuration has the tensor.
enum class Presence : uint8_t {
  kRequired,   // it must: a missing one is an error naming the tensor and the file
  kOptional,   // usually (make-tiny writes it), but one without it loads: the fallback stands in
  kIfPresent,  // the configuration does not call for it, but a checkpoint that carries it is honoured (attention
               // biases in a llama GGUF); make-tiny writes none
  kNotStored,  // the configuration has none (a tied head): the fallback stands in, no file holds it
};

// How a tensor-parallel rank takes its part of the tensor: TpSplit (model/layers/linear.h) says which dimension
// (kColumn: the rank's output rows, views into the file; a vector: its elements; kRow: the rank's input columns
// of every row, copied out), TpBy what the part counts in, tp_unit rows or columns per unit (model/shard.cc).
enum class TpBy : uint8_t {
  kHeads,      // the rank's attention heads
  kOutGroups,  // DeepSeek-V4's output groups (a rank's heads are whole groups of them)
  kKvHeads,    // its GQA KV heads (one replicated head when the ranks outnumber them)
  kFfn,        // the dense MLP's intermediate columns
  kSharedFfn,  // the shared experts' (split only under pure tensor parallelism)
  kExpertFfn,  // each routed expert's (tensor parallelism, or the ranks of an expert-parallel group)
  kVocab,      // vocabulary rows
};

struct TensorDecl {
  TensorId id = TensorId::kCount;
  int layer = -1;  // -1: model-level
  int mtp = -1;    // the MTP module whose tensor it is (its layer is n_layers + mtp), else -1
  TensorForm form = TensorForm::kMatrix;
  // As the loader checks it: {rows, cols}; {n}; kExperts {E, rows, cols}; kGateVector {1, n}; kMlaKB
  // {H, kv_lora, nope}; kMlaVB {H, v, kv_lora}.
  std::vector<int64_t> shape;
  Presence presence = Presence::kRequired;
  // kIfPresent: present exactly when the declaration before it is (the k and v biases follow the q bias).
  bool with_previous = false;

  // Where the data lands (by form: matrix, vector or experts) and, for kOptional / kNotStored, what stands in
  // when the checkpoint has none (another declaration's destination: the model's embedding, head, final norm).
  TensorView* matrix = nullptr;
  std::vector<float>* vector = nullptr;
  std::vector<TensorView>* experts = nullptr;
  std::vector<int32_t>* ints = nullptr;  // kTokenExperts
  const TensorView* fallback_matrix = nullptr;
  const std::vector<float>* fallback_vector = nullptr;

  TpSplit tp_split = TpSplit::kReplicated;
  TpBy tp_by = TpBy::kHeads;
  int64_t tp_unit = 1;

  bool norm = false;  // an RMSNorm weight (ArchSpec::hf_norm_offset applies to HF's)
  // make-tiny: values uniform around tiny_center with standard deviation tiny_std (seeded by the HF name).
  float tiny_std = 0.f, tiny_center = 0.f;
  // GGUF of llama-style RoPE families: the rows of each of this many heads reordered from rotate-half to
  // adjacent-pair order, as llama.cpp's converter writes q and k (0: stored as is).
  int gguf_permute_heads = 0;

  // Modifiers, chained on the declaration a TensorList adder returns.
  TensorDecl& ColumnParallel(TpBy by, int64_t unit = 1) { return Split(TpSplit::kColumn, by, unit); }
  TensorDecl& RowParallel(TpBy by, int64_t unit = 1) { return Split(TpSplit::kRow, by, unit); }
  // The bias of a product split RowParallel(by): kept by the part-0 rank only (model/layers/linear.h).
  TensorDecl& RowParallelBias(TpBy by) { return Split(TpSplit::kRowBias, by, 1); }
  TensorDecl& Optional(const TensorView* fallback) { return Present(Presence::kOptional, fallback); }
  TensorDecl& Optional(const std::vector<float>* fallback) {
    presence = Presence::kOptional;
    fallback_vector = fallback;
    return *this;
  }
  TensorDecl& NotStored(const TensorView* fallback) { return Present(Presence::kNotStored, fallback); }
  TensorDecl& IfPresent(bool with_prev = false) {
    presence = Presence::kIfPresent;
    with_previous = with_prev;
    return *this;
  }
  TensorDecl& PermuteHeads(int heads) {
    gguf_permute_heads = heads;
    return *this;
  }
 private:
  TensorDecl& Split(TpSplit s, TpBy by, int64_t unit) {
    tp_split = s;
    tp_by = by;
    tp_unit = unit;
    return *this;
  }
  TensorDecl& Present(Presence p, const TensorView* fallback) {
    presence = p;
    fallback_matrix = fallback;
    return *this;
  }
};

}  // namespace deepinfer
