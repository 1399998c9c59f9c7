// An approximate prefix tree over request text, one per replica (SGLang's cache-aware router keeps the same):
// it remembers which prompts were sent to a replica, not what the replica's KV cache holds, so a match is an
// estimate of the prefix the replica can reuse. A radix tree over bytes (edges hold strings), bounded to
// `max_chars` stored bytes: past it the least recently used leaves go first, as a replica's prefix cache
// evicts its least recently used blocks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace deepinfer::router {

class ApproxPrefixTree {
 public:
  explicit ApproxPrefixTree(size_t max_chars) : max_chars_(max_chars) {}

  // Length of the longest prefix of `text` the tree holds; marks that path as recently used.
  size_t Match(std::string_view text);
  // Adds `text`, then evicts down to the bound if it is exceeded.
  void Insert(std::string_view text);
  void Clear();
  size_t size() const { return size_; }  // stored bytes (the sum of edge lengths)

 private:
  struct Node {
    std::string edge;  // the bytes on the edge from the parent to this node
    Node* parent = nullptr;
    std::unordered_map<unsigned char, std::unique_ptr<Node>> children;
    uint64_t last_use = 0;
  };
  void Evict();

  size_t max_chars_;
  Node root_;
  size_t size_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace deepinfer::router
