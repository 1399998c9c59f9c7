// OLMo 2 (AllenAI; HF Olmo2ForCausalLM, GGUF `olmo2`): Llama's tensors arranged as a post-norm layer. No norm
// before attention or the MLP; each block's output is RMS-normed (post_attention_layernorm,
// post_feedforward_layernorm) before it joins the residual; q and k are RMS-normed over the whole projection
// (weights of heads * head_dim and kv_heads * head_dim), then NeoX RoPE (GGUF keeps HF's row order). Its forward:
// model/models/olmo2.cc.
//
// Under tensor parallelism the q/k norms split with the heads and GqaAttention completes each row's statistic
// across the group (WholeNormSplit). Not here: OLMo 3's sliding-window layers (GGUF `olmo2` with
// attention.sliding_window; HF `olmo3`).
#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/arch/tensor_list.h"
#include "model/model.h"

namespace deepinfer {
namespace {

// q, k, v, o and the whole-projection q/k norms; the attention output's norm; the SwiGLU and its output's norm.
void Olmo2LayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t) {
  GqaTensors(c, w.gqa, t);
  t.Norm(TensorId::kAttnPostNorm, c.hidden, &w.attn_post_norm);
  FfnTensors(c, layer, w, t);
  t.Norm(TensorId::kFfnPostNorm, c.hidden, &w.ffn_post_norm);
}

}  // namespace

const ArchSpec& Olmo2Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kOlmo2,
      .name = "olmo2",
      .hf_names = {"olmo2", "Olmo2ForCausalLM"},
      .hf_class = "Olmo2ForCausalLM",
      .gguf_arch = "olmo2",
      .qk_norm = QkNorm::kWhole,
      .gguf_config = [](const GgufConfigReader& g, ModelConfig*) -> Status {
        DI_ASSIGN_OR_RETURN(int64_t window, g.Int("attention.sliding_window", 0, false));
        if (window > 0) return Unimplemented(g.path() + ": OLMo 3's sliding-window layers are not supported yet");
        return Status::Ok();
      },
      .forward = Olmo2Forward,
      .layer_tensors = Olmo2LayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
