// The tensors of one part of a model (the model-level ones, one decoder layer, an MTP module's own), in the
// order files hold them, as its family declares them (model/arch/tensor_decl.h). The adders return the new
// declaration for its modifiers: t.Matrix(TensorId::kAttnQ, q_dim, hidden, &w.wq, std).ColumnParallel(TpBy::kHeads, head_dim).
#pragma once
#include <cstdint>
#include <vector>

#include "model/arch/tensor_decl.h"

namespace deepinfer {

class TensorList {
 public:
  explicit TensorList(int layer = -1, int mtp = -1) : layer_(layer), mtp_(mtp) {}

  // A weight matrix {rows, cols}; make-tiny draws it around 0 with standard deviation `std`.
  TensorDecl& Matrix(TensorId id, int64_t rows, int64_t cols, TensorView* dst, float std) {
    TensorDecl& d = Add(id, TensorForm::kMatrix, {rows, cols}, std, 0.f);
    d.matrix = dst;
    return d;
  }
  // An RMSNorm weight {n}; make-tiny draws it around 1.
  TensorDecl& Norm(TensorId id, int64_t n, std::vector<float>* dst) {
    TensorDecl& d = Vector(id, n, dst, 0.1f, 1.f);
    d.norm = true;
    return d;
  }
  // Any other vector {n} (biases), held in f32.
  TensorDecl& Vector(TensorId id, int64_t n, std::vector<float>* dst, float std, float center) {
    TensorDecl& d = Add(id, TensorForm::kVector, {n}, std, center);
    d.vector = dst;
    return d;
  }
  // A vector per routed expert {experts, n} (biases), held in f32 as experts * n floats in dst.
  TensorDecl& ExpertVectors(TensorId id, int64_t experts, int64_t n, std::vector<float>* dst, float std) {
    TensorDecl& d = Add(id, TensorForm::kExpertVectors, {experts, n}, std, 0.f);
    d.vector = dst;
    return d;
  }
  // Routed experts: `experts` matrices {rows, cols}, one view each in dst.
  TensorDecl& Experts(TensorId id, int64_t experts, int64_t rows, int64_t cols, std::vector<TensorView>* dst, float std) {
    TensorDecl& d = Add(id, TensorForm::kExperts, {experts, rows, cols}, std, 0.f);
    d.experts = dst;
    return d;
  }
  // A table of expert ids per token {vocab, k} (I32); make-tiny draws k distinct experts of n_experts per token.
  TensorDecl& TokenExperts(TensorId id, int64_t vocab, int64_t k, std::vector<int32_t>* dst) {
    TensorDecl& d = Add(id, TensorForm::kTokenExperts, {vocab, k}, 0.f, 0.f);
    d.ints = dst;
    return d;
  }
  // A matrix of another form (kGateVector, kMlaKvB, kMlaVB, kInputHalves), or a vector one (kMlaKB).
  TensorDecl& Other(TensorId id, TensorForm form, std::vector<int64_t> shape, TensorView* matrix, std::vector<float>* vector,
                    float std) {
    TensorDecl& d = Add(id, form, std::move(shape), std, 0.f);
    d.matrix = matrix;
    d.vector = vector;
    return d;
  }

  std::vector<TensorDecl>::const_iterator begin() const { return decls_.begin(); }
  std::vector<TensorDecl>::const_iterator end() const { return decls_.end(); }
  size_t size() const { return decls_.size(); }
  // The declaration of the given form (the kv_b forms find each other); null when the list has none.
  const TensorDecl* Find(TensorForm form) const {
    for (const TensorDecl& d : decls_)
      if (d.form == form) return &d;
    return nullptr;
  }

 private:
  TensorDecl& Add(TensorId id, TensorForm form, std::vector<int64_t> shape, float std, float center) {
    TensorDecl& d = decls_.emplace_back();
    d.id = id;
    d.layer = layer_;
    d.mtp = mtp_;
    d.form = form;
    d.shape = std::move(shape);
    d.tiny_std = std;
    d.tiny_center = center;
    return d;
  }

  int layer_, mtp_;
  std::vector<TensorDecl> decls_;
};

}  // namespace deepinfer
