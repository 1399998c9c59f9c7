// libFuzzer: the safetensors header parser must reject any byte string with a Status, never crash.
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto st = deepinfer::SafetensorsFile::Parse(data, size, "fuzz.safetensors");
  if (st.ok()) {
    volatile uint8_t sink = 0;
    for (auto& [name, t] : (*st)->tensors())
      if (t.nbytes) sink = sink ^ static_cast<const uint8_t*>(t.data)[0] ^ static_cast<const uint8_t*>(t.data)[t.nbytes - 1];
  }
  return 0;
}
