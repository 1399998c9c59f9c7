// Every tensor a model declares (model/arch/tensor_decl.h), list by list, the parts in the order files hold
// them: the embedding, the decoder layers, the MTP modules (each its decoder layer and its own tensors), the
// final norm and head. The loader, `convert`, `make-tiny` and the sharder each walk this one plan.
#pragma once
#include <vector>

#include "model/arch/tensor_list.h"

namespace deepinfer {

struct Model;
struct ModelConfig;

struct ModelTensors {
  struct Mtp {
    TensorList layer, own;
  };
  TensorList embedding, head;
  std::vector<TensorList> layers;
  std::vector<Mtp> mtp;
};

// The declarations of c's model, landing in m (blocks.cc). m.layers and m.mtp are sized to c first, as the
// declarations point into them: resizing them afterwards invalidates the plan.
ModelTensors DeclareModelTensors(const ModelConfig& c, Model& m);

}  // namespace deepinfer
