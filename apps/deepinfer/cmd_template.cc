#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "template/jinja.h"

namespace deepinfer::cli {

int CmdTemplate(int argc, char** argv) {
  Args args("template",
            "Render a chat template (Jinja) with a JSON context from stdin: {\"messages\": [...], \"add_generation_prompt\": true,\n"
            "\"bos_token\": ..., \"tools\": [...]}. With --batch, stdin holds one context per line and each output line is\n"
            "{\"text\": ...} or {\"error\": ...}.",
            {
                {"file", "f", "FILE", "", "template file (.jinja)"},
                {"batch", "", "", "", "one JSON context per line in, one JSON result per line out"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  std::ifstream in(args.Get("file"), std::ios::binary);
  if (!in) return Fail(NotFound(args.Get("file") + ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto tmpl = jinja::Template::Parse(ss.str());
  if (args.Has("batch")) {
    std::string line;
    while (std::getline(std::cin, line)) {
      nlohmann::json out;
      if (!tmpl.ok()) {
        out["error"] = tmpl.status().message();
      } else {
        auto r = (*tmpl)->Render(line);
        if (r.ok()) out["text"] = *r;
        else out["error"] = r.status().message();
      }
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 0;
  }
  if (!tmpl.ok()) return Fail(tmpl.status());
  std::string ctx(std::istreambuf_iterator<char>(std::cin), {});
  auto r = (*tmpl)->Render(ctx);
  if (!r.ok()) return Fail(r.status());
  std::fwrite(r->data(), 1, r->size(), stdout);
  return 0;
}

}  // namespace deepinfer::cli
