// Model resolution: a local GGUF file, a local HF directory, or a hub reference downloaded into a Hugging
// Face-style cache (HF_HOME/hub/models--owner--name/{blobs,snapshots,refs}), honouring HF_ENDPOINT,
// HF_HUB_OFFLINE, HF_TOKEN. Every downloaded file is verified (sha256 for LFS files, git blob sha1 otherwise).
#pragma once
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

struct HubOptions {
  std::string endpoint;   // default: $HF_ENDPOINT or https://huggingface.co
  std::string cache_dir;  // default: $HF_HUB_CACHE, $HF_HOME/hub, or ~/.cache/huggingface/hub
  std::string token;      // default: $HF_TOKEN
  bool offline = false;   // default: $HF_HUB_OFFLINE=1
  bool quiet = false;     // no progress bars
  static HubOptions FromEnv();
};

struct HubRef {
  std::string repo;      // owner/name
  std::string file;      // one file in the repo, or empty for the whole model
  std::string revision = "main";
};

// Accepts owner/name, owner/name@rev, owner/name:file, owner/name/file.gguf and hf:// prefixes of those.
bool ParseHubRef(const std::string& s, HubRef* out);

// Downloads (or, offline, finds in the cache) and returns the local path: the file for a single-file ref,
// the snapshot directory for a model repo, or the only GGUF file of a GGUF-only repo.
StatusOr<std::string> Pull(const HubRef& ref, const HubOptions& opts);

// A local path is returned as is; anything else that parses as a hub reference is pulled.
StatusOr<std::string> ResolveModel(const std::string& arg, const HubOptions& opts);

}  // namespace deepinfer
