// Flag parsing for the CLI: each command declares its flags once; parsing and --help come from that list.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace deepinfer::cli {

struct Flag {
  std::string name;   // long name without dashes
  std::string short_name;  // one letter or empty
  std::string value;  // placeholder for the value ("N"), empty for a boolean switch
  std::string def;    // default shown in help
  std::string help;
};

class Args {
 public:
  Args(std::string command, std::string summary, std::vector<Flag> flags, std::string positional = "")
      : command_(std::move(command)), summary_(std::move(summary)), flags_(std::move(flags)), positional_(std::move(positional)) {}

  // Returns false (after printing a message) on a bad command line; sets help_requested() for -h/--help.
  bool Parse(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        help_ = true;
        return true;
      }
      if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
        std::string key = a.rfind("--", 0) == 0 ? a.substr(2) : a.substr(1), inline_val;
        bool has_inline = false;
        if (auto eq = key.find('='); eq != std::string::npos) {
          inline_val = key.substr(eq + 1);
          key = key.substr(0, eq);
          has_inline = true;
        }
        const Flag* f = Find(key, a.rfind("--", 0) != 0);
        if (!f) {
          std::fprintf(stderr, "deepinfer %s: unknown flag '%s' (see --help)\n", command_.c_str(), a.c_str());
          return false;
        }
        if (f->value.empty()) {
          values_[f->name].assign(1, '1');  // (not = "1": a GCC 12 -Wrestrict false positive)
        } else if (has_inline) {
          values_[f->name] = inline_val;
        } else {
          if (i + 1 >= argc) {
            std::fprintf(stderr, "deepinfer %s: flag '%s' needs a value (%s)\n", command_.c_str(), a.c_str(), f->value.c_str());
            return false;
          }
          values_[f->name] = argv[++i];
        }
      } else {
        positional_values_.push_back(a);
      }
    }
    return true;
  }

  bool help_requested() const { return help_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name) const {
    auto it = values_.find(name);
    if (it != values_.end()) return it->second;
    for (auto& f : flags_)
      if (f.name == name) return f.def;
    return "";
  }
  // Numeric getters exit with a clear message on malformed numbers.
  long long GetInt(const std::string& name) const { return ToNumber<long long>(name, [](const char* s, char** e) { return std::strtoll(s, e, 10); }); }
  double GetFloat(const std::string& name) const { return ToNumber<double>(name, [](const char* s, char** e) { return std::strtod(s, e); }); }
  const std::vector<std::string>& positional() const { return positional_values_; }

  void PrintHelp() const {
    std::printf("usage: deepinfer %s%s [flags]\n\n%s\n\nflags:\n", command_.c_str(),
                positional_.empty() ? "" : (" " + positional_).c_str(), summary_.c_str());
    for (auto& f : flags_) {
      std::string left = "  " + (f.short_name.empty() ? std::string("    ") : "-" + f.short_name + ", ") + "--" + f.name;
      if (!f.value.empty()) left += " " + f.value;
      std::printf("%-34s %s%s\n", left.c_str(), f.help.c_str(), f.def.empty() ? "" : (" (default: " + f.def + ")").c_str());
    }
  }

 private:
  const Flag* Find(const std::string& key, bool single_dash) const {
    for (auto& f : flags_)
      if (f.name == key || (!f.short_name.empty() && f.short_name == key)) return &f;
    (void)single_dash;
    return nullptr;
  }
  template <typename T, typename Fn>
  T ToNumber(const std::string& name, Fn conv) const {
    std::string v = Get(name);
    char* end = nullptr;
    T out = conv(v.c_str(), &end);
    if (v.empty() || *end != '\0') {
      std::fprintf(stderr, "deepinfer %s: --%s expects a number, got '%s'\n", command_.c_str(), name.c_str(), v.c_str());
      std::exit(2);
    }
    return out;
  }

  std::string command_, summary_;
  std::vector<Flag> flags_;
  std::string positional_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_values_;
  bool help_ = false;
};

}  // namespace deepinfer::cli
