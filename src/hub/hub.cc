#include "hub/hub.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "base/logging.h"
#include "base/progress.h"
#include "base/sha256.h"

namespace deepinfer {
namespace fs = std::filesystem;

HubOptions HubOptions::FromEnv() {
  HubOptions o;
  auto env = [](const char* k) -> std::string {
    const char* v = std::getenv(k);
    return v ? v : "";
  };
  o.endpoint = env("HF_ENDPOINT").empty() ? "https://huggingface.co" : env("HF_ENDPOINT");
  while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
  if (!env("HF_HUB_CACHE").empty()) o.cache_dir = env("HF_HUB_CACHE");
  else if (!env("HF_HOME").empty()) o.cache_dir = env("HF_HOME") + "/hub";
  else o.cache_dir = (env("HOME").empty() ? std::string("/tmp") : env("HOME")) + "/.cache/huggingface/hub";
  o.token = env("HF_TOKEN");
  const std::string off = env("HF_HUB_OFFLINE");
  o.offline = !off.empty() && off != "0" && off != "false";
  return o;
}

bool ParseHubRef(const std::string& in, HubRef* out) {
  std::string s = in;
  if (s.rfind("hf://", 0) == 0) s = s.substr(5);
  HubRef r;
  if (auto at = s.find('@'); at != std::string::npos) {
    r.revision = s.substr(at + 1);
    s = s.substr(0, at);
  }
  if (auto colon = s.find(':'); colon != std::string::npos) {
    r.file = s.substr(colon + 1);
    s = s.substr(0, colon);
  }
  static const std::regex kPart("[A-Za-z0-9][A-Za-z0-9._-]*");
  auto slash1 = s.find('/');
  if (slash1 == std::string::npos) return false;
  auto slash2 = s.find('/', slash1 + 1);
  std::string owner = s.substr(0, slash1);
  std::string name = s.substr(slash1 + 1, slash2 == std::string::npos ? std::string::npos : slash2 - slash1 - 1);
  if (slash2 != std::string::npos) {
    if (!r.file.empty()) return false;
    r.file = s.substr(slash2 + 1);
  }
  if (!std::regex_match(owner, kPart) || !std::regex_match(name, kPart)) return false;
  if (r.file.find("..") != std::string::npos || (!r.file.empty() && r.file[0] == '/')) return false;
  if (!std::regex_match(r.revision, std::regex("[A-Za-z0-9._/-]+"))) return false;
  r.repo = owner + "/" + name;
  *out = r;
  return true;
}

namespace {

struct HttpResult {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // when not streaming to a file
};

size_t OnHeader(char* b, size_t sz, size_t n, void* ud) {
  auto* r = static_cast<HttpResult*>(ud);
  std::string line(b, sz * n);
  // Headers of every response in a redirect chain accumulate: the hub puts X-Linked-Etag/-Size on the first
  // (302) response and the CDN sends its own ETag on the last one.
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string k = line.substr(0, colon), v = line.substr(colon + 1);
    for (auto& c : k) c = static_cast<char>(std::tolower(c));
    while (!v.empty() && (v.front() == ' ')) v.erase(0, 1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
    r->headers[k] = v;
  }
  return sz * n;
}

struct Sink {
  HttpResult* result;
  FILE* file = nullptr;
  Sha256* sha256 = nullptr;
  EVP_MD_CTX* sha1 = nullptr;
  ProgressBar* bar = nullptr;
  uint64_t got = 0;
};

size_t OnBody(char* b, size_t sz, size_t n, void* ud) {
  auto* s = static_cast<Sink*>(ud);
  const size_t len = sz * n;
  if (s->file) {
    if (std::fwrite(b, 1, len, s->file) != len) return 0;
    s->sha256->Update(b, len);
    EVP_DigestUpdate(s->sha1, b, len);
  } else {
    if (s->result->body.size() + len > (64u << 20)) return 0;  // metadata responses are small
    s->result->body.append(b, len);
  }
  s->got += len;
  if (s->bar) s->bar->Update(s->got);
  return len;
}

Status HttpGet(const std::string& url, const HubOptions& o, HttpResult* r, Sink* sink) {
  CURL* c = curl_easy_init();
  if (!c) return Internal("curl init failed");
  struct curl_slist* hdrs = nullptr;
  if (!o.token.empty()) hdrs = curl_slist_append(hdrs, ("Authorization: Bearer " + o.token).c_str());
  hdrs = curl_slist_append(hdrs, "User-Agent: deepinfer/0.1");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
  curl_slist_free_all(hdrs);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) return IoError(url + ": " + curl_easy_strerror(rc));
  if (r->status >= 400) {
    std::string hint = r->status == 401 || r->status == 403 ? " (gated or private: set HF_TOKEN)" : r->status == 404 ? " (not found)" : "";
    return IoError(url + ": HTTP " + std::to_string(r->status) + hint);
  }
  return Status::Ok();
}

std::string RepoDir(const HubOptions& o, const std::string& repo) {
  std::string name = "models--" + repo;
  for (size_t p = name.find('/'); p != std::string::npos; p = name.find('/')) name.replace(p, 1, "--");
  return (fs::path(o.cache_dir) / name).string();
}

std::string Unquote(std::string s) {
  if (s.rfind("W/", 0) == 0) s = s.substr(2);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

bool IsHex(const std::string& s, size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Downloads one file of a commit into blobs/ (verified) and links it from the snapshot.
Status FetchFile(const HubOptions& o, const std::string& repo, const std::string& commit, const std::string& file) {
  const std::string dir = RepoDir(o, repo);
  const fs::path link = fs::path(dir) / "snapshots" / commit / file;
  if (fs::exists(link)) return Status::Ok();
  fs::create_directories(fs::path(dir) / "blobs");
  fs::create_directories(link.parent_path());
  const std::string tmp = (fs::path(dir) / "blobs" / (commit + "." + std::to_string(std::hash<std::string>{}(file)) + ".incomplete")).string();
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return IoError(tmp + ": cannot create");
  HttpResult r;
  Sha256 sha256;
  EVP_MD_CTX* sha1 = EVP_MD_CTX_new();
  EVP_DigestInit_ex(sha1, EVP_sha1(), nullptr);
  std::unique_ptr<ProgressBar> bar;
  Sink sink{&r, f, &sha256, sha1};
  // Size is unknown until headers arrive: ask with a HEAD-like probe first so the bar has a total.
  {
    CURL* c = curl_easy_init();
    HttpResult hr;
    const std::string url = o.endpoint + "/" + repo + "/resolve/" + commit + "/" + file;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hr);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 20L);
    struct curl_slist* hdrs = nullptr;
    if (!o.token.empty()) hdrs = curl_slist_append(hdrs, ("Authorization: Bearer " + o.token).c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_perform(c);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    uint64_t total = 0;
    auto it = hr.headers.find("x-linked-size");
    if (it == hr.headers.end()) it = hr.headers.find("content-length");
    if (it != hr.headers.end()) total = std::strtoull(it->second.c_str(), nullptr, 10);
    if (!o.quiet) bar = std::make_unique<ProgressBar>("download " + file, total, "B");
    sink.bar = bar.get();
  }
  Status st = HttpGet(o.endpoint + "/" + repo + "/resolve/" + commit + "/" + file, o, &r, &sink);
  std::fclose(f);
  if (bar) bar->Finish();
  unsigned char md[20];
  unsigned int mdlen = 0;
  // git blob id = sha1("blob <size>\0" + content): recompute by hashing the header and the file again.
  EVP_MD_CTX_free(sha1);
  if (!st.ok()) {
    fs::remove(tmp);
    return st;
  }
  std::string etag = Unquote(r.headers.count("x-linked-etag") ? r.headers["x-linked-etag"] : r.headers["etag"]);
  std::string got256 = sha256.HexDigest();
  bool verified = false;
  if (IsHex(etag, 64)) {
    if (etag != got256) {
      fs::remove(tmp);
      return DataLoss(repo + "/" + file + ": checksum mismatch (expected sha256 " + etag + ", got " + got256 + ")");
    }
    verified = true;
  } else if (IsHex(etag, 40)) {
    EVP_MD_CTX* g = EVP_MD_CTX_new();
    EVP_DigestInit_ex(g, EVP_sha1(), nullptr);
    const std::string head = "blob " + std::to_string(fs::file_size(tmp)) + std::string(1, '\0');
    EVP_DigestUpdate(g, head.data(), head.size());
    std::ifstream in(tmp, std::ios::binary);
    std::vector<char> buf(1 << 20);
    while (in) {
      in.read(buf.data(), buf.size());
      EVP_DigestUpdate(g, buf.data(), static_cast<size_t>(in.gcount()));
    }
    EVP_DigestFinal_ex(g, md, &mdlen);
    EVP_MD_CTX_free(g);
    static const char* kHex = "0123456789abcdef";
    std::string got1;
    for (unsigned i = 0; i < mdlen; ++i) {
      got1 += kHex[md[i] >> 4];
      got1 += kHex[md[i] & 15];
    }
    if (got1 != etag) {
      fs::remove(tmp);
      return DataLoss(repo + "/" + file + ": checksum mismatch (expected git blob " + etag + ", got " + got1 + ")");
    }
    verified = true;
  }
  if (!verified) DI_LOG_WARN("%s/%s: server sent no checksum (ETag '%s'); stored unverified", repo.c_str(), file.c_str(), etag.c_str());
  const std::string blob_name = verified ? etag : got256;
  const fs::path blob = fs::path(dir) / "blobs" / blob_name;
  fs::rename(tmp, blob);
  std::error_code ec;
  fs::remove(link, ec);
  fs::path rel = fs::relative(blob, link.parent_path());
  fs::create_symlink(rel, link, ec);
  if (ec) return IoError(link.string() + ": cannot link into the snapshot: " + ec.message());
  DI_LOG_INFO("fetched %s/%s (%s, sha256 %s)", repo.c_str(), file.c_str(), FormatBytes(static_cast<double>(fs::file_size(blob))).c_str(),
              got256.substr(0, 12).c_str());
  return Status::Ok();
}

bool WantedFile(const std::string& f) {
  static const std::regex kWanted(R"(.*\.(json|safetensors|model|txt|jinja)$)");
  return std::regex_match(f, kWanted);
}

// Picks what a model reference means: an HF layout (config.json) or the only GGUF in the repo.
StatusOr<std::string> LocalResult(const std::string& snap, const HubRef& ref, const std::vector<std::string>& files) {
  if (!ref.file.empty()) return (fs::path(snap) / ref.file).string();
  bool has_config = false;
  std::vector<std::string> ggufs;
  for (auto& f : files) {
    if (f == "config.json") has_config = true;
    if (f.size() > 5 && f.substr(f.size() - 5) == ".gguf") ggufs.push_back(f);
  }
  if (has_config) return snap;
  if (ggufs.size() == 1) return (fs::path(snap) / ggufs[0]).string();
  if (ggufs.empty()) return NotFound(ref.repo + ": no config.json or .gguf file in the repository");
  std::string list;
  for (auto& g : ggufs) list += " " + ref.repo + ":" + g;
  return InvalidArgument(ref.repo + ": several GGUF files; pick one of:" + list);
}

}  // namespace

StatusOr<std::string> Pull(const HubRef& ref, const HubOptions& o) {
  const std::string dir = RepoDir(o, ref.repo);
  const fs::path ref_file = fs::path(dir) / "refs" / ref.revision;
  if (o.offline) {
    std::string commit = ref.revision;
    if (std::ifstream in(ref_file); in) std::getline(in, commit);
    const fs::path snap = fs::path(dir) / "snapshots" / commit;
    if (!fs::exists(snap))
      return NotFound(ref.repo + "@" + ref.revision + " is not in the cache (" + dir + ") and HF_HUB_OFFLINE is set");
    std::vector<std::string> files;
    for (auto& e : fs::recursive_directory_iterator(snap))
      if (!e.is_directory()) files.push_back(e.path().lexically_relative(snap).string());  // not fs::relative: it resolves the links
    DI_ASSIGN_OR_RETURN(std::string out, LocalResult(snap.string(), ref, files));
    if (!fs::exists(out)) return NotFound(out + " is not in the cache and HF_HUB_OFFLINE is set");
    return out;
  }
  static bool curl_ready = (curl_global_init(CURL_GLOBAL_DEFAULT) == 0);
  if (!curl_ready) return Internal("curl_global_init failed");
  HttpResult r;
  Sink sink{&r};
  DI_RETURN_IF_ERROR(HttpGet(o.endpoint + "/api/models/" + ref.repo + "/revision/" + ref.revision, o, &r, &sink));
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("sha") || !j["sha"].is_string() || !j.contains("siblings") ||
      !j["siblings"].is_array())
    return DataLoss(o.endpoint + ": unexpected model info for " + ref.repo);
  const std::string commit = j["sha"].get<std::string>();
  if (!std::regex_match(commit, std::regex("[0-9a-f]{6,64}"))) return DataLoss(o.endpoint + ": bad commit id for " + ref.repo);
  std::vector<std::string> files;
  for (auto& s : j["siblings"])
    if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
      std::string f = s["rfilename"].get<std::string>();
      if (f.find("..") == std::string::npos && !f.empty() && f[0] != '/') files.push_back(f);
    }
  const std::string snap = (fs::path(dir) / "snapshots" / commit).string();
  DI_ASSIGN_OR_RETURN(std::string out, LocalResult(snap, ref, files));
  std::vector<std::string> fetch;
  if (!ref.file.empty()) {
    if (std::find(files.begin(), files.end(), ref.file) == files.end())
      return NotFound(ref.repo + ": no file '" + ref.file + "' at revision " + ref.revision);
    fetch.push_back(ref.file);
  } else if (out == snap) {
    for (auto& f : files)
      if (WantedFile(f)) fetch.push_back(f);
  } else {
    fetch.push_back(fs::path(out).lexically_relative(snap).string());
  }
  for (auto& f : fetch) DI_RETURN_IF_ERROR(FetchFile(o, ref.repo, commit, f));
  fs::create_directories(ref_file.parent_path());
  std::ofstream(ref_file) << commit;
  return out;
}

StatusOr<std::string> ResolveModel(const std::string& arg, const HubOptions& o) {
  std::error_code ec;
  if (fs::exists(arg, ec)) return arg;
  HubRef ref;
  if (!ParseHubRef(arg, &ref))
    return NotFound(arg + ": no such file or directory, and not a hub reference (owner/name[:file][@revision])");
  return Pull(ref, o);
}

}  // namespace deepinfer
