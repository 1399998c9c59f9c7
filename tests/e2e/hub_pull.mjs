// Download path end to end against a local hub (fake_hub.mjs): pull into an HF-style cache with verification,
// generate from the hub reference, offline mode from the cache, checksum mismatch and 404 errors.
import {spawn, spawnSync} from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const bin = process.argv[2];
const here = path.dirname(fileURLToPath(import.meta.url));
const shared = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(here, "../../../shared/models");
const home = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-hub-"));
let failures = 0;
const check = (ok, msg) => { console.log(`${ok ? "ok  " : "FAIL"} ${msg}`); if (!ok) ++failures; };

const hub = spawn("node", [path.join(here, "fake_hub.mjs"), shared], {stdio: ["ignore", "pipe", "inherit"]});
const port = await new Promise(resolve => hub.stdout.once("data", d => resolve(Number(String(d).match(/PORT (\d+)/)[1]))));
const env = {...process.env, HF_HOME: home, HF_ENDPOINT: `http://127.0.0.1:${port}`, DEEPINFER_NO_PROGRESS: "1"};
const run = (args, extra = {}) => spawnSync(bin, args, {env: {...env, ...extra}, encoding: "utf8"});
const sha256 = f => crypto.createHash("sha256").update(fs.readFileSync(f)).digest("hex");

try {
  // Whole repo: only GGUF here, so pull fetches the one GGUF file and prints its path in the snapshot.
  let r = run(["pull", "deepinfer-test/stories260K"]);
  const local = r.stdout.trim();
  check(r.status === 0 && local.endsWith("stories260K.gguf"), `pull prints the cached GGUF path (${local || r.stderr.trim()})`);
  check(local.includes(path.join(home, "hub", "models--deepinfer-test--stories260K", "snapshots")), "HF_HOME/hub layout");
  check(fs.existsSync(local) && sha256(local) === sha256(path.join(shared, "stories260K.gguf")), "downloaded bytes are intact");
  check(fs.lstatSync(local).isSymbolicLink(), "snapshot entry links into blobs/");
  check(fs.readFileSync(path.join(home, "hub/models--deepinfer-test--stories260K/refs/main"), "utf8").trim().length === 40, "refs/main records the commit");

  // A single small (non-LFS) file, verified by its git blob id.
  r = run(["pull", "deepinfer-test/stories260K:tok512.bin"]);
  check(r.status === 0 && fs.existsSync(r.stdout.trim()), "single-file pull with git blob verification");

  // Generate straight from the hub reference; same tokens as the local file.
  const viaHub = run(["generate", "-m", "deepinfer-test/stories260K", "--temp", "0", "-n", "20", "--json", "-q"]);
  const direct = run(["generate", "-m", path.join(shared, "stories260K.gguf"), "--temp", "0", "-n", "20", "--json", "-q"]);
  check(viaHub.status === 0 && JSON.parse(viaHub.stdout).token_ids.join() === JSON.parse(direct.stdout).token_ids.join(),
        "generate -m owner/name resolves through the cache");

  // Corrupted transfer: rejected with the checksum named, nothing left in the snapshot.
  r = run(["pull", "deepinfer-test/corrupt"]);
  check(r.status !== 0 && r.stderr.includes("checksum mismatch"), `corrupt download rejected (${r.stderr.trim()})`);
  const snap = path.join(home, "hub/models--deepinfer-test--corrupt/snapshots");
  const left = fs.existsSync(snap) ? fs.readdirSync(snap, {recursive: true}).filter(f => f.endsWith(".gguf")) : [];
  check(left.length === 0, "no corrupt file in the snapshot");

  r = run(["pull", "deepinfer-test/missing"]);
  check(r.status !== 0 && r.stderr.includes("HTTP 404"), `unknown repo: ${r.stderr.trim()}`);
} finally {
  hub.kill();
}

// Offline: the hub is gone, the cache answers; an uncached repo is a clear error.
let r = run(["generate", "-m", "deepinfer-test/stories260K", "--temp", "0", "-n", "5", "--json", "-q"], {HF_HUB_OFFLINE: "1"});
check(r.status === 0, `offline generate from the cache ${r.status === 0 ? "" : r.stderr}`);
r = run(["pull", "deepinfer-test/other"], {HF_HUB_OFFLINE: "1"});
check(r.status !== 0 && r.stderr.includes("HF_HUB_OFFLINE"), "offline miss names the cause");
fs.rmSync(home, {recursive: true, force: true});
console.log(failures ? `${failures} failure(s)` : "hub tests passed");
process.exit(failures ? 1 : 0);
