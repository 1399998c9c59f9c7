// The one hash of token prefixes: block b's chain hash covers every token of blocks 0..b (each block's hash
// continues from the previous one's), so equal hashes name equal prefixes up to collisions. The prefix cache
// keys its blocks by it (BlockPool, which also compares the tokens, so a collision never aliases two prefixes),
// and the routers score replicas (deepinfer route) and data-parallel groups (serve --dp, DistControl) by the
// leading hashes of a prompt that each one's KV events report.
#pragma once
#include <cstdint>
#include <vector>

namespace deepinfer {

constexpr uint64_t kPrefixHashSeed = 1469598103934665603ull;  // the FNV-1a offset basis

// The chain hash after `n` more tokens, continuing from `h` (kPrefixHashSeed for the first block): 64-bit FNV-1a
// over each token id's two 16-bit halves.
inline uint64_t ChainHash(uint64_t h, const int32_t* tokens, int n) {
  for (int t = 0; t < n; ++t) {
    const uint64_t v = static_cast<uint32_t>(tokens[t]);
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (16 * i)) & 0xffff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// The chain hashes of the full blocks of tokens[0, n) (a trailing partial block has none).
inline std::vector<uint64_t> PrefixChainHashes(const int32_t* tokens, int n, int block_size) {
  std::vector<uint64_t> out;
  uint64_t h = kPrefixHashSeed;
  for (int b = 0; (b + 1) * block_size <= n; ++b) out.push_back(h = ChainHash(h, tokens + b * block_size, block_size));
  return out;
}

}  // namespace deepinfer
