// libFuzzer: the GGUF parser must reject any byte string with a Status, never crash or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = deepinfer::GgufFile::Parse(data, size, "fuzz.gguf");
  if (g.ok()) {
    // Touch every tensor's bytes: the parser promised they lie inside the buffer.
    volatile uint8_t sink = 0;
    for (auto& [name, t] : (*g)->tensors())
      if (t.nbytes) sink = sink ^ static_cast<const uint8_t*>(t.data)[0] ^ static_cast<const uint8_t*>(t.data)[t.nbytes - 1];
    (void)(*g)->GetString("general.architecture");
    (void)(*g)->GetInt("llama.block_count");
  }
  return 0;
}
