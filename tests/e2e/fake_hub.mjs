// A minimal Hugging Face-style hub on 127.0.0.1 serving ../shared/models, for the download tests (CI never
// reaches the internet). Repos:
//   deepinfer-test/stories260K  the shared model files; files > 64 KiB behave like LFS files (302 to a CDN path,
//                               X-Linked-Etag = sha256, X-Linked-Size), smaller ones carry a git blob sha1 ETag
//   deepinfer-test/corrupt      same listing, but the bytes served differ from the advertised checksum
// Usage: node fake_hub.mjs DIR  -> prints "PORT <n>" when listening.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";

const dir = process.argv[2];
const COMMIT = "0123456789abcdef0123456789abcdef01234567";
const files = fs.readdirSync(dir).filter(f => fs.statSync(path.join(dir, f)).isFile());
const cache = new Map();
function info(f) {
  if (!cache.has(f)) {
    const data = fs.readFileSync(path.join(dir, f));
    const lfs = data.length > 65536;
    const etag = lfs ? crypto.createHash("sha256").update(data).digest("hex")
                     : crypto.createHash("sha1").update(`blob ${data.length}\0`).update(data).digest("hex");
    cache.set(f, {data, lfs, etag});
  }
  return cache.get(f);
}
const repos = new Set(["deepinfer-test/stories260K", "deepinfer-test/corrupt"]);

const server = http.createServer((req, res) => {
  const url = decodeURIComponent(req.url.split("?")[0]);
  let m = url.match(/^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/);
  if (m) {
    if (!repos.has(m[1])) { res.writeHead(404); return res.end("{\"error\":\"Repository not found\"}"); }
    res.writeHead(200, {"content-type": "application/json"});
    return res.end(JSON.stringify({id: m[1], sha: COMMIT, siblings: files.map(f => ({rfilename: f}))}));
  }
  m = url.match(/^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/);
  if (m) {
    const [, repo, , file] = m;
    if (!repos.has(repo) || !files.includes(file)) { res.writeHead(404); return res.end("Entry not found"); }
    const i = info(file);
    const headers = {"x-repo-commit": COMMIT};
    if (i.lfs) {
      headers["x-linked-etag"] = `"${i.etag}"`;
      headers["x-linked-size"] = String(i.data.length);
      headers["location"] = `/cdn/${repo}/${file}`;
      res.writeHead(302, headers);
      return res.end();
    }
    headers["etag"] = `"${i.etag}"`;
    headers["content-length"] = String(i.data.length);
    res.writeHead(200, headers);
    return res.end(req.method === "HEAD" ? undefined : body(repo, i.data));
  }
  m = url.match(/^\/cdn\/([^/]+\/[^/]+)\/(.+)$/);
  if (m && files.includes(m[2])) {
    const i = info(m[2]);
    res.writeHead(200, {"content-length": String(i.data.length), "etag": "\"cdn-object\""});
    return res.end(req.method === "HEAD" ? undefined : body(m[1], i.data));
  }
  res.writeHead(404);
  res.end();
});

function body(repo, data) {
  if (repo !== "deepinfer-test/corrupt") return data;
  const copy = Buffer.from(data);
  copy[copy.length >> 1] ^= 0xff;
  return copy;
}

server.listen(0, "127.0.0.1", () => console.log(`PORT ${server.address().port}`));
