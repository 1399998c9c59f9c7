// Philox-4x32-10 counter-based generator (Salmon et al., SC'11). Random numbers are a pure function of
// (key, counter): a request's sample at a position never depends on batch row, thread or call order.
#pragma once
#include <cstdint>

namespace deepinfer {

struct Philox4x32 {
  static void Round(uint32_t ctr[4], const uint32_t key[2]) {
    constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0], p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr[0] = hi1 ^ ctr[1] ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ ctr[3] ^ key[1];
    ctr[3] = lo0;
  }
  // Four 32-bit words for counter (c0, c1, c2, c3) under a 64-bit key.
  static void Generate(uint64_t key64, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t out[4]) {
    uint32_t key[2] = {static_cast<uint32_t>(key64), static_cast<uint32_t>(key64 >> 32)};
    uint32_t ctr[4] = {c0, c1, c2, c3};
    for (int r = 0; r < 10; ++r) {
      Round(ctr, key);
      key[0] += 0x9E3779B9;
      key[1] += 0xBB67AE85;
    }
    for (int i = 0; i < 4; ++i) out[i] = ctr[i];
  }
};

// Uniform in [0, 1) with 24 random bits, keyed by (seed, absolute position, sub-stream).
inline float UniformAt(uint64_t seed, uint64_t position, uint32_t substream = 0) {
  uint32_t out[4];
  Philox4x32::Generate(seed, static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), substream, 0, out);
  return static_cast<float>(out[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace deepinfer
