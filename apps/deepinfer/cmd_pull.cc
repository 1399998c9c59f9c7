#include <cstdio>

#include "args.h"
#include "commands.h"
#include "hub/hub.h"

namespace deepinfer::cli {

int CmdPull(int argc, char** argv) {
  Args args("pull",
            "Download a model from a Hugging Face-style hub into the local cache (HF_HOME/hub layout) and print its local\n"
            "path. REF is owner/name (whole model), owner/name:file or owner/name/file (one file), with an optional\n"
            "@revision. Files are verified against the hub's sha256 (LFS) or git blob id. Environment: HF_ENDPOINT,\n"
            "HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE=1 (cache only), HF_TOKEN.",
            {
                {"revision", "", "REV", "main", "branch, tag or commit"},
                {"cache-dir", "", "DIR", "$HF_HOME/hub", "cache directory"},
                {"endpoint", "", "URL", "$HF_ENDPOINT or https://huggingface.co", "hub address"},
                {"offline", "", "", "", "resolve from the cache only"},
                {"quiet", "q", "", "", "no progress bars"},
            },
            "REF");
  if (!args.Parse(argc, argv)) return 2;
  if (args.help_requested() || args.positional().size() != 1) {
    args.PrintHelp();
    return args.help_requested() ? 0 : 2;
  }
  HubOptions o = HubOptions::FromEnv();
  if (args.Has("cache-dir")) o.cache_dir = args.Get("cache-dir");
  if (args.Has("endpoint")) o.endpoint = args.Get("endpoint");
  if (args.Has("offline")) o.offline = true;
  o.quiet = args.Has("quiet");
  HubRef ref;
  if (!ParseHubRef(args.positional()[0], &ref))
    return Fail(InvalidArgument("'" + args.positional()[0] + "' is not a hub reference (owner/name[:file][@revision])"));
  if (args.Has("revision")) ref.revision = args.Get("revision");
  auto path = Pull(ref, o);
  if (!path.ok()) return Fail(path.status());
  std::printf("%s\n", path->c_str());
  return 0;
}

}  // namespace deepinfer::cli
