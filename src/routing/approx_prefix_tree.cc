#include "routing/approx_prefix_tree.h"

#include <algorithm>
#include <queue>
#include <vector>

namespace deepinfer::router {

namespace {

size_t CommonPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

size_t ApproxPrefixTree::Match(std::string_view text) {
  const uint64_t now = ++clock_;
  Node* node = &root_;
  size_t pos = 0;
  while (pos < text.size()) {
    auto it = node->children.find(static_cast<unsigned char>(text[pos]));
    if (it == node->children.end()) break;
    Node* child = it->second.get();
    const size_t common = CommonPrefix(child->edge, text.substr(pos));
    pos += common;
    child->last_use = now;
    if (common < child->edge.size()) break;
    node = child;
  }
  return pos;
}

void ApproxPrefixTree::Insert(std::string_view text) {
  const uint64_t now = ++clock_;
  Node* node = &root_;
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned char key = static_cast<unsigned char>(text[pos]);
    auto it = node->children.find(key);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge.assign(text.substr(pos));
      leaf->parent = node;
      leaf->last_use = now;
      size_ += leaf->edge.size();
      node->children.emplace(key, std::move(leaf));
      break;
    }
    Node* child = it->second.get();
    const size_t common = CommonPrefix(child->edge, text.substr(pos));
    if (common < child->edge.size()) {
      // Split the edge at the divergence: a middle node takes the shared part, the old child keeps the rest.
      auto mid = std::make_unique<Node>();
      mid->edge = child->edge.substr(0, common);
      mid->parent = node;
      mid->last_use = now;
      std::unique_ptr<Node> old = std::move(it->second);
      old->edge.erase(0, common);
      old->parent = mid.get();
      const unsigned char old_key = static_cast<unsigned char>(old->edge[0]);
      mid->children.emplace(old_key, std::move(old));
      child = mid.get();
      it->second = std::move(mid);
    }
    child->last_use = now;
    pos += common;
    node = child;
  }
  if (size_ > max_chars_) Evict();
}

void ApproxPrefixTree::Evict() {
  // Down to 90% of the bound, so a tree at its limit does not rescan its leaves on every insert.
  const size_t target = max_chars_ - max_chars_ / 10;
  auto older = [](const Node* a, const Node* b) { return a->last_use > b->last_use; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(older)> leaves(older);
  std::vector<Node*> stack{&root_};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != &root_ && n->children.empty()) leaves.push(n);
    for (auto& [k, c] : n->children) stack.push_back(c.get());
  }
  while (size_ > target && !leaves.empty()) {
    Node* leaf = leaves.top();
    leaves.pop();
    Node* parent = leaf->parent;
    size_ -= leaf->edge.size();
    parent->children.erase(static_cast<unsigned char>(leaf->edge[0]));  // frees leaf
    if (parent != &root_ && parent->children.empty()) leaves.push(parent);
  }
}

void ApproxPrefixTree::Clear() {
  root_.children.clear();
  size_ = 0;
}

}  // namespace deepinfer::router
