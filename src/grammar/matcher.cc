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
  // id 0: the empty stack (the whole input is a sentence); id 1: kContext (only TokenSets' walks reach it).
  for (uint32_t id : {0u, kContext}) {
    nodes_.push_back({kNoPos, id});
    expanded_idx_.push_back(-1);
    succ_idx_.push_back(-1);
    mark_.push_back(0);
  }
  State init;
  for (uint32_t a : g_->rules[g_->root]) {
    const auto& e = Expanded(Intern(a, 0));
    init.stacks.insert(init.stacks.end(), e.begin(), e.end());
  }
  std::sort(init.stacks.begin(), init.stacks.end());
  init.stacks.erase(std::unique(init.stacks.begin(), init.stacks.end()), init.stacks.end());
  history_.push_back(std::move(init));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const TokenSets> sets)
    : GrammarMatcher(sets->grammar_ptr(), std::shared_ptr<const TokenTrie>(sets, sets->trie())) {
  sets_ = std::move(sets);
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
  if (id <= kContext) {
    out.push_back(id);
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
      if (s <= kContext || !TopClass(s).Matches(cp)) continue;
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
    if (s > kContext && TopClass(s).Intersects(lo, hi)) out->stacks.push_back(s);
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
  if (auto found = dfa_ids_.find(s); found != dfa_ids_.end()) return found->second;  // no node built for a hit
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

void GrammarMatcher::ResetDfaIfFull(size_t limit) {
  if (dfa_states_.size() <= limit) return;
  dfa_states_.clear();
  dfa_ids_.clear();
  dfa_next_.clear();
}

void GrammarMatcher::WalkMask(const State& st, uint32_t* bits) {
  const TokenTrie& t = *trie_;
  ResetDfaIfFull(kMaxDfaStates);
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
}

void GrammarMatcher::TableMask(uint32_t id, const TokenSets::Entry& e, uint32_t* bits) {
  const TokenTrie& t = *trie_;
  const size_t words = (static_cast<size_t>(t.vocab_size()) + 31) / 32;
  ++stats_.table_stacks;
  if (e.complement) {
    // Everything the trie spells, less the rejected and the uncertain tokens, then ORed in.
    tmp_bits_.assign(sets_->spelled().begin(), sets_->spelled().end());
    for (int32_t tok : e.ids) tmp_bits_[tok >> 5] &= ~(1u << (tok & 31));
    for (int32_t tok : e.uncertain) tmp_bits_[tok >> 5] &= ~(1u << (tok & 31));
    for (size_t w = 0; w < words; ++w) bits[w] |= tmp_bits_[w];
  } else {
    for (int32_t tok : e.ids) bits[tok >> 5] |= 1u << (tok & 31);
  }
  if (e.uncertain.empty()) return;
  // Feed each uncertain token to this one stack, resuming from the prefix it shares with the previous token;
  // when that prefix already died, so does this token.
  ResetDfaIfFull(kMaxDfaStates);
  scratch_.stacks.assign(1, id);
  scratch_.partial = scratch_.left = scratch_.len = 0;
  levels_.resize(t.max_depth() + 1);
  levels_[0] = InternState(scratch_);
  size_t alive = 0;  // levels_[0 .. alive] hold the previous token's states
  size_t dead_at = SIZE_MAX;  // the previous token died consuming this byte (SIZE_MAX: it did not die)
  for (size_t k = 0; k < e.uncertain.size(); ++k) {
    const int32_t tok = e.uncertain[k];
    const size_t lcp = e.uncertain_lcp[k];
    if (dead_at != SIZE_MAX && lcp > dead_at) continue;  // shares the byte the previous token died on
    const std::string& b = t.bytes(tok);
    size_t d = std::min(lcp, alive);
    dead_at = SIZE_MAX;
    for (; d < b.size(); ++d) {
      ++stats_.uncertain_checked;
      const int32_t next = Next(levels_[d], static_cast<uint8_t>(b[d]));
      if (next < 0) {
        dead_at = d;
        break;
      }
      levels_[d + 1] = next;
    }
    alive = d;
    if (dead_at == SIZE_MAX) bits[tok >> 5] |= 1u << (tok & 31);
  }
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
  if (!sets_ || st.left != 0) {
    WalkMask(st, bits);
  } else {
    // Stacks with precomputed sets take them; the rest (positions cheap to walk) share one walk.
    State rest;
    for (uint32_t s : st.stacks) {
      if (s == 0) continue;
      uint32_t chain[TokenSets::kMaxChain];
      int32_t found = TokenSets::kDeeper;
      uint32_t frame = s;
      for (int len = 1; found == TokenSets::kDeeper && len <= TokenSets::kMaxChain; ++len) {
        chain[len - 1] = frame == 0 ? TokenSets::kBottom : nodes_[frame].pos;
        found = sets_->Lookup(chain, len);
        if (frame != 0) frame = nodes_[frame].parent;
      }
      if (found >= 0) TableMask(s, sets_->entry(found), bits);
      else rest.stacks.push_back(s);
    }
    if (!rest.stacks.empty()) WalkMask(rest, bits);
  }
  if (IsAccepting())
    for (int32_t e : t.eog()) bits[e >> 5] |= 1u << (e & 31);
  if (cache_.size() >= kMaskCacheEntries) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(st, std::vector<uint32_t>(bits, bits + words));
  cache_.emplace(lru_.front().first, lru_.begin());
}

void GrammarMatcher::Classify(const std::vector<uint32_t>& chain, std::vector<int32_t>* accepted,
                              std::vector<int32_t>* uncertain, uint64_t* visited) {
  const TokenTrie& t = *trie_;
  ResetDfaIfFull(kMaxInterned);
  uint32_t id = chain.back() == TokenSets::kBottom ? 0 : Intern(chain.back(), kContext);
  for (size_t k = chain.size() - 1; k-- > 0;) id = Intern(chain[k], id);
  State start;
  start.stacks = Expanded(id);
  auto reached_end = [&](int32_t sid) {
    const auto& v = dfa_states_[sid].stacks;
    return std::binary_search(v.begin(), v.end(), kContext);
  };
  levels_.resize(t.max_depth() + 1);
  past_end_.assign(t.max_depth() + 1, 0);
  levels_[0] = InternState(start);
  const size_t n = t.num_nodes();
  for (size_t i = 1; i < n;) {
    ++*visited;
    const int d = t.depth(i);
    // Whether the rule could have ended before this node's byte (then a death here depends on the context).
    const bool past = past_end_[d - 1] || (d > 1 && reached_end(levels_[d - 1]));
    const int32_t next = Next(levels_[d - 1], t.byte(i));
    if (next < 0) {
      if (past) uncertain->insert(uncertain->end(), t.tokens_begin(i), t.tokens_begin(t.skip(i)));
      i = t.skip(i);
      continue;
    }
    levels_[d] = next;
    past_end_[d] = past;
    accepted->insert(accepted->end(), t.tokens_begin(i), t.tokens_end(i));
    ++i;
  }
}

}  // namespace deepinfer::grammar
