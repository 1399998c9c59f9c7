// What the KV tiers (kv/kv_tiers.h) store per prefix block, and the on-disk form of it.
//
// A tier entry is one full KV block of a prefix: the block's own tokens, the chain hash of the prefix it ends
// (kv/prefix_hash.h) and of the prefix before it, and the block's K/V bytes in PagedKvCache::ReadBlock's order.
// Entries are keyed by the chain hash salted with the model-identity digest (engine/kv_identity.h), so two
// models, dtypes or block sizes never share a key; the tokens and the parent hash are compared on every load,
// as BlockPool compares them, so a 64-bit collision can never serve another prefix's K/V.
//
// Disk file: DiskBlockHeader, then the payload (tokens as int32, then the K/V bytes). The header carries its own
// checksum and the payload's, so a torn, truncated or bit-flipped file is a miss, never served.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace deepinfer {

// A tier key: the prefix's chain hash salted with the model digest (splitmix64 over both).
inline uint64_t TierKey(uint64_t model_digest, uint64_t chain_hash) {
  uint64_t x = chain_hash ^ (model_digest * 0x9e3779b97f4a7c15ull) ^ 0x6b76746965727331ull;  // "kvtiers1"
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The chain hash a KV group's entry of a prefix block is stored under: group 0 (the full-attention anchor, or
// the only group) keeps the prefix's chain hash; a sliding-window group's block of the same positions holds other
// layers' K/V and gets a key of its own (a hybrid cache, kv/kv_layout.h).
inline uint64_t TierGroupChain(uint64_t chain_hash, int group) {
  if (group == 0) return chain_hash;
  uint64_t x = chain_hash + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(group);
  x = (x ^ (x >> 31)) * 0xd6e8feb86659fd93ull;
  return x ^ (x >> 32);
}

// A fast 64-bit checksum (four multiply-rotate lanes over 8-byte words, then the tail): detects torn writes and
// flipped bits at memory speed; not a cryptographic hash (the store is trusted storage, not an attack surface).
inline uint64_t Checksum64(const void* data, size_t n) {
  constexpr uint64_t kP1 = 0x9e3779b185ebca87ull, kP2 = 0xc2b2ae3d27d4eb4full;
  auto rotl = [](uint64_t v, int r) { return (v << r) | (v >> (64 - r)); };
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t lane[4] = {kP1 + kP2, kP2, 0, 0 - kP1};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lane[l] = rotl(lane[l] + w * kP2, 31) * kP1;
    }
  uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18) + n;
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP1), 11) * kP2;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  return h;
}

constexpr char kDiskBlockMagic[8] = {'D', 'I', 'K', 'V', 'B', 'L', 'K', '\0'};
// Bumped whenever the header, the payload order or PagedKvCache's block byte order changes. Version 2 is version
// 1 with `group` filled in (version 1 wrote 0 there for every group): both are read and served; only version 2
// entries are announced as KV events (a version 1 entry's group is unknown).
constexpr uint32_t kDiskBlockVersion = 2;
constexpr uint32_t kDiskBlockOldestVersion = 1;

struct DiskBlockHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;   // sizeof(DiskBlockHeader): a reader of another build's struct rejects the file
  uint64_t model_digest;
  uint64_t chain_hash;     // the prefix's chain hash (a KV group other than 0: TierGroupChain of it), unsalted by
                           // the model digest
  uint64_t parent_hash;    // the previous block's chain hash (0 for a prefix's first block)
  uint32_t num_tokens;
  uint32_t group;          // the KV group (0: group 0, whose chain_hash is the prefix's own, as KV events report it)
  uint64_t kv_bytes;
  uint64_t payload_checksum;  // Checksum64 over tokens then K/V bytes, as stored
  uint64_t header_checksum;   // Checksum64 over every field above
};
static_assert(sizeof(DiskBlockHeader) == 72, "the on-disk header is a fixed layout");

inline uint64_t HeaderChecksum(const DiskBlockHeader& h) {
  return Checksum64(&h, offsetof(DiskBlockHeader, header_checksum));
}

}  // namespace deepinfer
