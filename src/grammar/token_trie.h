// The vocabulary as a byte trie, built once per tokenizer and shared (read-only) by every constrained request:
// nodes in preorder, each with its byte, depth and the index just past its subtree, so a mask walk can skip a
// rejected subtree in O(1). The vocabulary itself is never copied per request.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deepinfer {
class Tokenizer;
}

namespace deepinfer::grammar {

class TokenTrie {
 public:
  // token_bytes[id]: the bytes token id stands for (empty: never produced by a grammar, e.g. control tokens).
  // eog: end-of-generation ids (allowed exactly when the grammar is in an accepting state).
  TokenTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> eog);
  static std::shared_ptr<const TokenTrie> FromTokenizer(const Tokenizer& tok);

  int vocab_size() const { return vocab_; }
  size_t num_nodes() const { return byte_.size(); }
  int max_depth() const { return max_depth_; }
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }

  // Node 0 is the root (no byte); nodes 1.. in preorder.
  uint8_t byte(size_t n) const { return byte_[n]; }
  uint16_t depth(size_t n) const { return depth_[n]; }
  uint32_t skip(size_t n) const { return skip_[n]; }  // first node after n's subtree
  const int32_t* tokens_begin(size_t n) const { return tokens_.data() + tok_off_[n]; }
  const int32_t* tokens_end(size_t n) const { return tokens_.data() + tok_off_[n + 1]; }

 private:
  int vocab_ = 0;
  int max_depth_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<uint32_t> skip_, tok_off_;
  std::vector<int32_t> tokens_;
};

}  // namespace deepinfer::grammar
