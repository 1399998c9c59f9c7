#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "args.h"
#include "base/logging.h"
#include "commands.h"
#include "engine_flags.h"

namespace deepinfer::cli {

int CmdTokenize(int argc, char** argv) {
  Args args("tokenize", "Text (from -p or stdin) to token ids; with --decode, ids (JSON array or whitespace separated) to text.",
            {
                {"model", "m", "MODEL", "", "model whose tokenizer to use (GGUF, HF directory or hub reference)"},
                {"tokenizer", "", "PATH", "", "a GGUF file, a tokenizer.json file, or a directory holding tokenizer.json"},
                {"prompt", "p", "TEXT", "", "text to encode (default: stdin)"},
                {"decode", "", "", "", "read ids and print text"},
                {"add-bos", "", "", "", "prepend BOS when the tokenizer asks for it"},
                {"json", "", "", "", "print ids as a JSON array"},
                {"batch", "", "", "", "stdin: one JSON string per line -> one JSON array of ids per line (with --decode: arrays in, strings out)"},
            });
  if (auto exit_code = ParseCommandLine(args, argc, argv)) return *exit_code;
  SetLogLevel(LogLevel::kWarn);
  std::unique_ptr<Tokenizer> owned;
  std::unique_ptr<Model> model;
  const Tokenizer* tok = nullptr;
  if (args.Has("tokenizer")) {
    auto r = TokenizerFromPath(args.Get("tokenizer"));
    if (!r.ok()) return Fail(r.status());
    owned = std::move(r).value();
    tok = owned.get();
  } else {
    model = LoadModelOrDie(args.Get("model"));
    tok = model->tokenizer.get();
  }
  if (args.Has("batch")) {
    std::string line;
    const bool add = args.Has("add-bos");
    const bool decode = args.Has("decode");
    while (std::getline(std::cin, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (decode) {
        if (j.is_discarded() || !j.is_array()) return Fail(InvalidArgument("--decode --batch: each line must be a JSON array of ids"));
        std::vector<int32_t> ids;
        for (auto& v : j)
          if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
        const std::string text = tok->Decode(ids, false);
        std::printf("%s\n", nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        continue;
      }
      if (j.is_discarded() || !j.is_string()) return Fail(InvalidArgument("--batch: each line must be a JSON string"));
      std::printf("%s\n", nlohmann::json(tok->Encode(j.get<std::string>(), add)).dump().c_str());
    }
    return 0;
  }
  std::string input = args.Has("prompt") ? args.Get("prompt")
                                         : std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  if (args.Has("decode")) {
    std::vector<int32_t> ids;
    auto j = nlohmann::json::parse(input, nullptr, false);
    if (!j.is_discarded() && j.is_array()) {
      for (auto& v : j)
        if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
    } else {
      std::istringstream ss(input);
      long long v;
      while (ss >> v) ids.push_back(static_cast<int32_t>(v));
    }
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) return Fail(InvalidArgument("token id " + std::to_string(id) + " outside the vocabulary"));
    std::string text = tok->Decode(ids, false);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  auto ids = tok->Encode(input, args.Has("add-bos") && tok->add_bos());
  if (args.Has("json")) {
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  } else {
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
  }
  return 0;
}

}  // namespace deepinfer::cli
