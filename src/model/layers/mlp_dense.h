// The dense gated MLP: down(act(gate(x)) * up(x)), act SiLU (SwiGLU) or tanh-GELU (GeGLU, Gemma). Also the shape
// of every routed and shared expert.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct DenseMlpWeights {
  TensorView gate, up;  // {ff, hidden}, column-parallel
  TensorView down;      // {hidden, ff}, row-parallel
  bool empty() const { return gate.data == nullptr; }
};

class DenseMlp {
 public:
  DenseMlp(const Ops& ops, int max_tokens, int ff, FfnAct act = FfnAct::kSilu);
  // out = down(act(gate(xn)) * up(xn)) for n rows of xn (hidden each).
  void Forward(const DenseMlpWeights& w, const float* xn, int n, float* out);

 private:
  const Ops& ops_;
  int ff_;
  FfnAct act_;
  std::vector<float> gate_, up_;
};

}  // namespace deepinfer
