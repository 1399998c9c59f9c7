// What the paged KV cache needs to know about a model: how many layers it stores and how many elements one
// token's K and V rows hold in each. The cache is sized from this alone, never from a whole model
// configuration, so kv/ does not depend on model/ (ModelConfig::kv_layout() builds it).
#pragma once

namespace deepinfer {

struct KvLayout {
  int num_layers = 0;
  int k_elems = 0;  // per token per layer (MLA: kv_lora_rank + qk_rope_dim)
  int v_elems = 0;  // per token per layer (MLA: 0, V is read from the latent in K)
};

}  // namespace deepinfer
