#include "engine/grammar_gate.h"

#include <algorithm>
#include <limits>

#include "engine/grammar_mask.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace deepinfer {

GrammarGateState::GrammarGateState(const GrammarGate& spec, const grammar::TokenTrie* trie,
                                   const std::vector<int32_t>& prompt)
    : spec_(spec), trie_(trie), prompt_len_(static_cast<int>(prompt.size())) {
  auto add = [&](const std::string& text, bool open) {
    Header h{text, std::vector<int32_t>(text.size(), -1), open};
    for (size_t i = 0; i < text.size();) {
      size_t len = 0;
      for (const auto& [id, mt] : spec_.markers)
        if (!mt.empty() && text.compare(i, mt.size(), mt) == 0) {
          h.marker_at[i] = id;
          len = mt.size();
          break;
        }
      if (len == 0) {
        ++i;
        continue;
      }
      for (size_t k = i + 1; k < i + len; ++k) h.marker_at[k] = -2;
      i += len;
    }
    headers_.push_back(std::move(h));
  };
  if (!spec_.open_after.empty()) {  // a trigger gate: free from the output's start (the prompt opened <think>)
    Push(Phase::kFree, prompt_len_ - 1);
    scanned_ = prompt_len_;
    return;
  }
  for (const std::string& h : spec_.open_headers) add(h, true);
  for (const std::string& h : spec_.free_headers) add(h, false);
  ResetHeader();
  // The header in progress where the prompt ends: from its last header_begin token (the generation prompt's
  // `<|start|>assistant` leaves "assistant" written), else from the output's first token.
  int b = prompt_len_ - 1;
  while (b >= 0 && !IsBegin(prompt[b])) --b;
  Push(Phase::kHeader, b >= 0 ? b : prompt_len_ - 1);
  for (int p = std::max(b + 1, 0); p < prompt_len_; ++p) Step(prompt[p], p);
  scanned_ = prompt_len_;
}

bool GrammarGateState::IsBegin(int32_t t) const {
  return std::find(spec_.header_begin.begin(), spec_.header_begin.end(), t) != spec_.header_begin.end();
}

const std::string* GrammarGateState::MarkerText(int32_t t) const {
  for (const auto& [id, text] : spec_.markers)
    if (id == t) return &text;
  return nullptr;
}

void GrammarGateState::ResetHeader() {
  alive_.assign(headers_.size(), 1);
  len_ = 0;
}

void GrammarGateState::HeaderToken(int32_t t, int pos) {
  const std::string* mt = MarkerText(t);
  static const std::string kNone;
  const std::string& bytes = mt ? *mt : (t >= 0 && t < trie_->vocab_size() ? trie_->bytes(t) : kNone);
  const size_t n = bytes.size();
  bool any = false;
  int complete = -1;
  for (size_t i = 0; i < headers_.size(); ++i) {
    if (!alive_[i]) continue;
    const Header& h = headers_[i];
    bool ok = n > 0 && len_ + n <= h.text.size() && h.text.compare(len_, n, bytes) == 0;
    // A marker must come as its token, and text tokens must not spell a marker: the output is parsed on ids.
    if (ok && mt) ok = h.marker_at[len_] == t;
    for (size_t k = len_; ok && !mt && k < len_ + n; ++k) ok = h.marker_at[k] == -1;
    alive_[i] = ok;
    if (!ok) continue;
    any = true;
    if (len_ + n == h.text.size()) complete = static_cast<int>(i);
  }
  len_ += n;
  if (!any) Push(Phase::kFree, pos);  // no listed header: an unconstrained message
  else if (complete >= 0) Push(headers_[complete].open ? Phase::kOpen : Phase::kFree, pos, complete);
}

void GrammarGateState::TriggerToken(int32_t t, int pos) {
  const std::vector<int32_t>& ids = spec_.open_after_tokens;
  if (std::find(ids.begin(), ids.end(), t) != ids.end()) return Push(Phase::kOpen, pos);
  auto text = [&](int32_t id) -> const std::string& {
    static const std::string kNone;
    return id >= 0 && id < trie_->vocab_size() ? trie_->bytes(id) : kNone;
  };
  // The output's text back to where a trigger ending in t could start (tokens after the phase began only).
  const std::string& trig = spec_.open_after;
  std::string tail = text(t);
  const size_t own = tail.size();
  const int first = states_.back().since + 1 - prompt_len_;  // seen_ index of the phase's first token
  for (int i = static_cast<int>(seen_.size()) - 2; i >= std::max(first, 0) && tail.size() < own + trig.size() - 1; --i)
    tail.insert(0, text(seen_[static_cast<size_t>(i)]));
  // The first occurrence that ends inside t (one ending before t would have opened at an earlier token).
  const size_t from = tail.size() - own;
  const size_t at = tail.find(trig, from + 1 > trig.size() ? from + 1 - trig.size() : 0);
  if (own > 0 && at != std::string::npos) Push(Phase::kOpen, pos, -1, tail.substr(at + trig.size()));
}

void GrammarGateState::Step(int32_t t, int pos) {
  const Phase ph = phase();
  if (ph == Phase::kOpen) return;  // the grammar holds the rest of the answer
  if (!spec_.open_after.empty()) return TriggerToken(t, pos);
  if (IsBegin(t)) {
    Push(Phase::kHeader, pos);
    ResetHeader();
    return;
  }
  if (ph == Phase::kHeader) HeaderToken(t, pos);
}

void GrammarGateState::RollbackTo(int q, const int32_t* hist) {
  seen_.resize(static_cast<size_t>(q - prompt_len_));
  scanned_ = q;
  while (states_.size() > 1 && states_.back().since >= q) states_.pop_back();
  if (phase() != Phase::kHeader) return;
  // The header's tokens before q are replayed (a header is a few tokens; a change it led to would have been
  // kept above, since it happened before q).
  ResetHeader();
  for (int p = states_.back().since + 1; p < q; ++p) HeaderToken(hist[p], p);
}

GrammarGateState::Phase GrammarGateState::Sync(grammar::GrammarMatcher* m, const int32_t* hist, int prompt_len,
                                               int pos) {
  // As SyncMatcher: the last stepped token checks the history; a mismatch finds the common prefix.
  if (scanned_ > pos || (scanned_ > prompt_len && seen_.back() != hist[scanned_ - 1])) {
    int common = prompt_len;
    const int lim = std::min(scanned_, pos);
    while (common < lim && seen_[static_cast<size_t>(common - prompt_len)] == hist[common]) ++common;
    RollbackTo(common, hist);
  }
  for (; scanned_ < pos; ++scanned_) {
    seen_.push_back(hist[scanned_]);
    Step(hist[scanned_], scanned_);
  }
  const State& s = states_.back();
  if (s.phase != Phase::kOpen) {
    if (m->num_steps() > 0) m->Rollback(m->num_steps());
    fed_since_ = -1;
    return s.phase;
  }
  // The bytes the grammar reads before the body's tokens: the open header's text, or what followed a trigger.
  const std::string& lead_text = spec_.feed_header ? headers_[static_cast<size_t>(s.header)].text : s.lead;
  const int lead = lead_text.empty() ? 0 : 1;
  if (fed_since_ != s.since || m->num_steps() < lead || (lead && m->step_tokens()[0] != -1)) {
    // A matcher fed for another opening (the history changed under it) starts over.
    m->Rollback(m->num_steps());
    fed_since_ = s.since;
    if (lead && !m->AcceptBytes(lead_text)) return Phase::kLost;
  }
  return SyncMatcherFrom(m, hist, s.since + 1, pos, lead) ? Phase::kOpen : Phase::kLost;
}

void GrammarGateState::Mask(float* logits, int vocab) {
  const float ninf = -std::numeric_limits<float>::infinity();
  if (phase() == Phase::kHeader) {
    keep_.clear();
    auto keep = [&](int32_t id) {
      if (id >= 0 && id < vocab) keep_.push_back({id, logits[id]});
    };
    for (size_t i = 0; i < headers_.size(); ++i) {
      const Header& h = headers_[i];
      if (!alive_[i] || len_ >= h.text.size()) continue;
      if (h.marker_at[len_] >= 0) {
        keep(h.marker_at[len_]);
        continue;
      }
      // Text up to the next marker: every token the trie spells along it.
      size_t node = 0;
      for (size_t k = len_; k < h.text.size() && h.marker_at[k] == -1; ++k) {
        const uint8_t b = static_cast<uint8_t>(h.text[k]);
        size_t c = node + 1;
        while (c < trie_->skip(node) && trie_->byte(c) != b) c = trie_->skip(c);
        if (c >= trie_->skip(node)) break;
        node = c;
        for (const int32_t* t = trie_->tokens_begin(node); t != trie_->tokens_end(node); ++t) keep(*t);
      }
    }
    if (!keep_.empty()) {
      std::fill(logits, logits + vocab, ninf);
      for (const auto& [id, v] : keep_) logits[id] = v;
      return;
    }
  }
  // kFree (and a header nothing can continue): the answer may not end before the constrained message, and a
  // header's markers only come after a header_begin: a stray one (Harmony's `<|channel|>` in a body) would start
  // a header the output parser reads but the gate would not, and the two must agree on where the answer is.
  for (int32_t id : trie_->eog())
    if (id >= 0 && id < vocab) logits[id] = ninf;
  for (const auto& [id, text] : spec_.markers)
    if (id >= 0 && id < vocab) logits[id] = ninf;
}

}  // namespace deepinfer
