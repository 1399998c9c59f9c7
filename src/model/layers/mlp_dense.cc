#include "model/layers/mlp_dense.h"


namespace deepinfer {

DenseMlp::DenseMlp(const Ops& ops, int max_tokens, int ff, FfnAct act) : ops_(ops), ff_(ff), act_(act), gate_(static_cast<size_t>(max_tokens) * ff), up_(gate_.size()) {}

void DenseMlp::Forward(const DenseMlpWeights& w, const float* xn, int n, float* out) {
  // gate and up in one pool dispatch (bitwise what two MatMul calls give).
  const MatMulJob gate_up[2] = {{&w.gate, xn, n, gate_.data()}, {&w.up, xn, n, up_.data()}};
  ops_.MatMulMany(gate_up, 2);
  if (act_ == FfnAct::kGeluTanh) ops_.GeGLU(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(n) * ff_);
  else if (act_ == FfnAct::kSwigluOai) ops_.SwiGluOai(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(n) * ff_);
  else ops_.SwiGLU(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(n) * ff_);
  ops_.MatMul(w.down, gate_.data(), n, out);
}

}  // namespace deepinfer
