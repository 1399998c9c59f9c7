// libFuzzer: the structured-output parsers and the matcher. The first byte picks the language (GBNF, regex,
// JSON Schema) and where the input splits into the constraint and a text; the constraint is compiled, and when
// it compiles the text is fed to a matcher byte run by byte run, with rollbacks and a mask over a small
// vocabulary. Nothing may crash, hang or read out of bounds; invalid input must come back as a Status. A second
// matcher takes its masks from precomputed token sets (at every position): its masks must equal the walk's.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer::grammar;
  if (size < 2) return 0;
  const int mode = data[0] % 3;
  const size_t split = 1 + (size - 1) * data[1] / 256;
  const std::string spec(reinterpret_cast<const char*>(data + 1), split - 1);
  const std::string text(reinterpret_cast<const char*>(data + split), size - split);
  deepinfer::StatusOr<std::shared_ptr<const Grammar>> g = deepinfer::InvalidArgument("none");
  if (mode == 0) {
    g = CompileGbnf(spec);
  } else if (mode == 1) {
    g = CompileRegex(spec);
  } else {
    auto j = nlohmann::json::parse(spec, nullptr, false);
    if (j.is_discarded()) return 0;
    g = CompileJsonSchema(j);
  }
  if (!g.ok()) return 0;
  static const auto trie = std::make_shared<TokenTrie>(
      std::vector<std::string>{"a", "b", "ab", "{", "}", "\"", "\xC3", "\xA9", "\xC3\xA9", " ", "1", "true", ""},
      std::vector<int32_t>{12});
  GrammarMatcher m(*g, trie), fast(TokenSets::Build(*g, trie, /*every_position=*/true));
  std::vector<uint32_t> bits(1), fast_bits(1);
  for (size_t i = 0; i < text.size(); i += 3) {
    m.FillMask(bits.data());
    fast.FillMask(fast_bits.data());
    if (bits != fast_bits) __builtin_trap();  // the token-set mask differs from the trie walk's
    const bool ok = m.AcceptBytes(text.substr(i, 3));
    if (ok != fast.AcceptBytes(text.substr(i, 3))) __builtin_trap();
    if (!ok && m.num_steps() > 0 && (text[i] & 1)) {
      m.Rollback(1);
      fast.Rollback(1);
    }
  }
  (void)m.IsAccepting();
  (void)m.IsTerminated();
  return 0;
}
