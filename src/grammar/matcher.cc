#include "grammar/matcher.h"

#include <algorithm>
#include <cstring>

namespace deepinfer::grammar {

namespace {
constexpr uint32_t kNoPos = 0xFFFFFFFFu;
// The smallest code point of a UTF-8 sequence of each length (shorter encodings are overlong, invalid).
constexpr uint32_t kMinOfLen[5] = {0, 0, 0x80, 0x800, 0x10000};
}  // namespace

size_t GrammarMatcher::StateHash::operator()(const State& s) const {
  uint64_t h = 1469598103934665603ull ^ (uint64_t{s.partial} << 8 | s.left << 4 | s.len);
  for (uint32_t v : s.stacks) h = (h ^ v) * 1099511628211ull;
  return static_cast<size_t>(h);
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie)
    : g_(std::move(g)), trie_(std::move(trie)) {
  nodes_.push_back({kNoPos, 0});  // id 0: the empty stack (the whole input is a sentence)
  expanded_idx_.push_back(-1);
  succ_idx_.push_back(-1);
  mark_.push_back(0);
  State init;
  for (uint32_t a : g_->rules[g_->root]) {
    const auto& e = Expanded(Intern(a, 0));
    init.stacks.insert(init.stacks.end(), e.begin(), e.end());
  }
  std::sort(init.stacks.begin(), init.stacks.end());
  init.stacks.erase(std::unique(init.stacks.begin(), init.stacks.end()), init.stacks.end());
  history_.push_back(std::move(init));
}

uint32_t GrammarMatcher::Intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  auto [it, fresh] = intern_.emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, parent});
    expanded_idx_.push_back(-1);
    succ_idx_.push_back(-1);
    mark_.push_back(0);
  }
  return it->second;
}

const std::vector<uint32_t>& GrammarMatcher::Expanded(uint32_t id) {
  if (expanded_idx_[id] >= 0) return lists_[expanded_idx_[id]];
  std::vector<uint32_t> out;
  if (id == 0) {
    out.push_back(0);
  } else {
    const Node n = nodes_[id];
    const Symbol& sym = g_->symbols[n.pos];
    if (sym.kind == Symbol::kChar) {
      out.push_back(id);
    } else if (sym.kind == Symbol::kEnd) {
      const auto& e = Expanded(n.parent);
      out = e;
    } else {
      // Continue after the reference; a reference that ends its alternative continues straight with the
      // parent (tail call), so right recursion (every repetition) does not deepen the stack.
      const uint32_t cont = g_->symbols[n.pos + 1].kind == Symbol::kEnd ? n.parent : Intern(n.pos + 1, n.parent);
      for (uint32_t a : g_->rules[sym.arg]) {
        const auto& e = Expanded(Intern(a, cont));
        out.insert(out.end(), e.begin(), e.end());
      }
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    }
  }
  lists_.push_back(std::move(out));
  expanded_idx_[id] = static_cast<int32_t>(lists_.size() - 1);
  return lists_.back();
}

const std::vector<uint32_t>& GrammarMatcher::Successors(uint32_t id) {
  if (succ_idx_[id] < 0) {
    const Node n = nodes_[id];
    const uint32_t next = g_->symbols[n.pos + 1].kind == Symbol::kEnd ? n.parent : Intern(n.pos + 1, n.parent);
    Expanded(next);
    succ_idx_[id] = expanded_idx_[next];
  }
  return lists_[succ_idx_[id]];
}

bool GrammarMatcher::Step(const State& in, uint8_t byte, State* out) {
  out->stacks.clear();
  uint32_t cp = 0;
  bool full = false;
  if (in.left == 0) {
    if (byte < 0x80) {
      cp = byte;
      full = true;
    } else if (byte >= 0xC2 && byte <= 0xF4) {
      out->len = byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4;
      out->partial = byte & (0x7F >> out->len);
      out->left = out->len - 1;
    } else {
      return false;
    }
  } else {
    if ((byte & 0xC0) != 0x80) return false;
    out->partial = (in.partial << 6) | (byte & 0x3F);
    out->left = in.left - 1;
    out->len = in.len;
    if (out->left == 0) {
      cp = out->partial;
      full = true;
      if (cp < kMinOfLen[in.len] || cp > 0x10FFFF) return false;
    }
  }
  if (full) {
    out->partial = out->left = out->len = 0;
    const uint32_t stamp = ++stamp_;
    for (uint32_t s : in.stacks) {
      if (s == 0 || !TopClass(s).Matches(cp)) continue;
      const auto& succ = Successors(s);
      for (uint32_t t : succ)
        if (mark_[t] != stamp) {
          mark_[t] = stamp;
          out->stacks.push_back(t);
        }
    }
    std::sort(out->stacks.begin(), out->stacks.end());
    return !out->stacks.empty();
  }
  // Incomplete character: keep the stacks that some completion could still satisfy.
  const int shift = 6 * out->left;
  uint32_t lo = out->partial << shift, hi = lo | ((1u << shift) - 1);
  lo = std::max(lo, kMinOfLen[out->len]);
  hi = std::min(hi, 0x10FFFFu);
  if (lo > hi) return false;
  for (uint32_t s : in.stacks)
    if (s != 0 && TopClass(s).Intersects(lo, hi)) out->stacks.push_back(s);
  return !out->stacks.empty();
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  State cur = history_.back(), next;
  for (char c : bytes) {
    if (!Step(cur, static_cast<uint8_t>(c), &next)) return false;
    std::swap(cur, next);
  }
  history_.push_back(std::move(cur));
  step_tokens_.push_back(-1);
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  if (!trie_ || id < 0 || id >= trie_->vocab_size()) return false;
  if (std::find(trie_->eog().begin(), trie_->eog().end(), id) != trie_->eog().end()) {
    if (!IsAccepting()) return false;
    history_.push_back(history_.back());
    step_tokens_.push_back(id);
    return true;
  }
  const std::string& b = trie_->bytes(id);
  if (b.empty() || !AcceptBytes(b)) return false;
  step_tokens_.back() = id;
  return true;
}

void GrammarMatcher::Rollback(int n) {
  n = std::clamp(n, 0, num_steps());
  history_.resize(history_.size() - n);
  step_tokens_.resize(step_tokens_.size() - n);
}

bool GrammarMatcher::IsAccepting() const {
  const State& s = history_.back();
  return s.left == 0 && !s.stacks.empty() && s.stacks[0] == 0;
}

bool GrammarMatcher::IsTerminated() const { return IsAccepting() && history_.back().stacks.size() == 1; }

int32_t GrammarMatcher::InternState(const State& s) {
  auto [it, fresh] = dfa_ids_.emplace(s, static_cast<int32_t>(dfa_states_.size()));
  if (fresh) {
    dfa_states_.push_back(s);
    dfa_next_.emplace_back();
    if (dfa_states_.size() <= kMaxDfaStates) {
      dfa_next_.back().reset(new int32_t[256]);
      std::fill(dfa_next_.back().get(), dfa_next_.back().get() + 256, -2);
    }
  }
  return it->second;
}

int32_t GrammarMatcher::Next(int32_t sid, uint8_t byte) {
  int32_t* row = dfa_next_[sid].get();
  if (row && row[byte] != -2) return row[byte];
  const int32_t next = Step(dfa_states_[sid], byte, &scratch_) ? InternState(scratch_) : -1;
  row = dfa_next_[sid].get();  // InternState may have grown dfa_next_
  if (row) row[byte] = next;
  return next;
}

void GrammarMatcher::FillMask(uint32_t* bits) {
  const TokenTrie& t = *trie_;
  const size_t words = (static_cast<size_t>(t.vocab_size()) + 31) / 32;
  const State& st = history_.back();
  ++stats_.masks;
  if (auto it = cache_.find(st); it != cache_.end()) {
    ++stats_.cache_hits;
    lru_.splice(lru_.begin(), lru_, it->second);
    std::memcpy(bits, it->second->second.data(), words * sizeof(uint32_t));
    return;
  }
  std::memset(bits, 0, words * sizeof(uint32_t));
  if (dfa_states_.size() > kMaxInterned) {
    dfa_states_.clear();
    dfa_ids_.clear();
    dfa_next_.clear();
  }
  levels_.resize(t.max_depth() + 1);
  levels_[0] = InternState(st);
  const size_t n = t.num_nodes();
  uint64_t visited = 0;
  for (size_t i = 1; i < n;) {
    ++visited;
    const int d = t.depth(i);
    const int32_t next = Next(levels_[d - 1], t.byte(i));
    if (next < 0) {
      i = t.skip(i);
      continue;
    }
    levels_[d] = next;
    for (const int32_t* tok = t.tokens_begin(i); tok != t.tokens_end(i); ++tok) bits[*tok >> 5] |= 1u << (*tok & 31);
    ++i;
  }
  stats_.nodes_visited += visited;
  if (IsAccepting())
    for (int32_t e : t.eog()) bits[e >> 5] |= 1u << (e & 31);
  if (cache_.size() >= kMaskCacheEntries) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(st, std::vector<uint32_t>(bits, bits + words));
  cache_.emplace(lru_.front().first, lru_.begin());
}

}  // namespace deepinfer::grammar
