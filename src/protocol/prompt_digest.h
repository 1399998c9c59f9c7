// The digest of what turns a request into token ids: the vocabulary (every piece), BOS handling and the chat
// template. `serve` reports it (GET /v1/models, the /v1/kv_events snapshot) and `deepinfer route --model`
// computes its own: equal digests mean the router's token ids, hence its block chain hashes, are the replica's.
// (engine/kv_identity.h's digest also covers the KV dtype, layout and weights, which a router does not load.)
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace deepinfer {

uint64_t PromptDigest(const Tokenizer& tok, const std::string& chat_template_source);

}  // namespace deepinfer
