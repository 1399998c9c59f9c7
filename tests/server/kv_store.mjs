// The disk tier of the KV store through a real `deepinfer serve` (issue 35, "persistence and crash safety"):
// - SIGTERM, restart on the same --kv-store: every earlier prompt is served with cached tokens loaded from disk
//   (counted in /metrics) and outputs bitwise those of a cold server (token ids and log-probs, seeded sampling);
// - kill -9 while blocks are being written, three times on one directory (seeded moments), then a restart: the
//   server starts, serves every prompt with the cold outputs, and hits what was stored before the kills;
// - a full disk (a 2 MiB tmpfs under --kv-store-size 64M): the server keeps answering with the cold outputs,
//   the log names the full disk, /metrics counts it, and the store keeps the newest prefixes (hits on restart);
// - a sliding-window model (hybrid KV cache): the windows are stored too, and a restart serves direct hits.
// Needs root for the tmpfs mount, as the multi-process tests run in CI; a machine that cannot mount fails.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, metrics, checker, seededCompletion as complete} from "./common.mjs";
import {makeRng, tokenPrompt} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const root = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-kv-store-"));
const VOCAB = 512;  // stories260K
const serveArgs = ["--block-size", "16", "--max-num-seqs", "8", "--kv-cache", "2MiB"];
// 36 prompts of 160 tokens (10 blocks each) on 4 shared 64-token heads, so prompts also share stored blocks.
const heads = [0, 1, 2, 3].map(h => tokenPrompt(9000 + h, 64, VOCAB, {lo: 3}));
const prompts = Array.from({length: 36}, (_, i) => [...heads[i % 4], ...tokenPrompt(100 + i, 96, VOCAB, {lo: 3})]);

const diskMetric = (m, name) => {
  const x = m.text.match(new RegExp(`^${name}\\{[^}]*tier="disk"\\} ([0-9.e+-]+)$`, "m"));
  return x ? Number(x[1]) : NaN;
};
const sleep = ms => new Promise(r => setTimeout(r, ms));

// Sends every prompt (8 at a time) and checks the outputs against the cold ones; returns the cached tokens.
async function serveAll(srv, label, cold) {
  let cached = 0, mismatches = 0;
  for (let i = 0; i < prompts.length; i += 8) {
    const res = await Promise.all(prompts.slice(i, i + 8).map(p => complete(srv.base, p)));
    res.forEach((r, j) => { cached += r.cached; if (cold && r.out !== cold[i + j]) ++mismatches; });
  }
  if (cold) check(mismatches === 0, `${label}: all ${prompts.length} outputs bitwise those of a cold server (${mismatches} differ)`);
  return cached;
}

try {
  // Cold outputs: one server with no store and a prefix cache too small to matter, one prompt at a time.
  const cold = [];
  {
    const srv = await startServer(bin, [...serveArgs, "--no-prefix-cache"]);
    for (const p of prompts) cold.push((await complete(srv.base, p)).out);
    check((await srv.stop()) === 0, "cold server: clean shutdown");
  }

  // 1. SIGTERM and restart.
  {
    const dir = path.join(root, "term");
    let srv = await startServer(bin, [...serveArgs, "--kv-store", dir, "--kv-store-size", "256M"]);
    await serveAll(srv, "first server", cold);
    check((await srv.stop()) === 0, "SIGTERM: clean shutdown (the writer drains its queue)");
    srv = await startServer(bin, [...serveArgs, "--kv-store", dir, "--kv-store-size", "256M"]);
    const cached = await serveAll(srv, "restarted server", cold);
    const m = await metrics(srv.base);
    const hits = diskMetric(m, "deepinfer_kv_tier_hits_total");
    // Each prompt's first 9 blocks can be cached (its last token is always computed); the 4 heads' 4 blocks and
    // each prompt's 5 own ones are loaded from disk once, then hit in the pool.
    check(hits >= 4 * 4 + prompts.length * 5, `restart: ${hits} blocks loaded from disk (at least ${4 * 4 + prompts.length * 5})`);
    check(cached === prompts.length * 144, `restart: ${cached} cached prompt tokens reported in usage (${prompts.length} x 144)`);
    check((await srv.stop()) === 0, "restarted server: clean shutdown");
  }

  // 2. kill -9 in the middle of writes, three times, then a restart on the same directory.
  {
    const dir = path.join(root, "kill");
    const rng = makeRng(35);
    let killedWhileWriting = 0;
    for (let round = 0; round < 3; ++round) {
      const srv = await startServer(bin, [...serveArgs, "--kv-store", dir, "--kv-store-size", "256M"]);
      const order = prompts.map((_, i) => i).sort(() => rng.float() - 0.5);
      const inflight = order.map(i => complete(srv.base, prompts[i]).catch(() => null));
      // Wait for the first blocks on disk, then kill at a seeded moment within the next 150 ms.
      for (let t = 0; t < 2000; ++t) {
        const w = diskMetric(await metrics(srv.base), "deepinfer_kv_tier_written_bytes_total");
        if (w > 0) break;
        await sleep(5);
      }
      await sleep(rng.int(150));
      const before = diskMetric(await metrics(srv.base), "deepinfer_kv_tier_written_bytes_total");
      process.kill(srv.proc.pid, "SIGKILL");
      await new Promise(r => srv.proc.once("exit", r));
      await Promise.all(inflight);
      if (before > 0) ++killedWhileWriting;
    }
    check(killedWhileWriting === 3, `kill -9 with requests in flight after blocks were written, in ${killedWhileWriting} of 3 rounds`);
    const srv = await startServer(bin, [...serveArgs, "--kv-store", dir, "--kv-store-size", "256M"]);
    const cached = await serveAll(srv, "after three kill -9", cold);
    const hits = diskMetric(await metrics(srv.base), "deepinfer_kv_tier_hits_total");
    check(hits > 0 && cached > 0, `after the kills: ${hits} blocks loaded from disk, ${cached} cached tokens`);
    check((await srv.stop()) === 0, "after the kills: clean shutdown");
    const temps = fs.readdirSync(dir).filter(f => !f.endsWith(".kvb"));
    check(temps.length <= 3, `at most one stray temporary file per kill (${temps.length}: ${temps.slice(0, 6)})`);
  }

  // 3. A full disk: a 2 MiB tmpfs under a store told it may use 64 MiB. A block's file is 20 KiB (24 KiB of tmpfs
  // pages), the workload's 232 distinct blocks need 5.5 MiB; the disk holds ~80, a batch of 8 prompts writes ~40.
  {
    const dir = path.join(root, "full");
    fs.mkdirSync(dir);
    const mnt = spawnSync("mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", dir], {encoding: "utf8"});
    check(mnt.status === 0, `mount a 2 MiB tmpfs (needs root): ${mnt.stderr.trim()}`);
    if (mnt.status === 0) {
      try {
        let srv = await startServer(bin, [...serveArgs, "--kv-store", dir, "--kv-store-size", "64M"]);
        await serveAll(srv, "full disk", cold);
        await serveAll(srv, "full disk, second pass", cold);
        const m = await metrics(srv.base);
        const full = m.get("deepinfer_kv_store_disk_full_total");
        const cap = diskMetric(m, "deepinfer_kv_tier_capacity_bytes");
        check(full >= 1, `/metrics counts the full disk (${full} writes found it full)`);
        check(cap < 2 << 20, `the store's capacity drops below the disk's 2 MiB (${cap} bytes)`);
        check(/kv store: the disk under .* is full/.test(srv.log()), "the log names the full disk");
        check((await fetch(`${srv.base}/health`)).status === 200, "the server is healthy");
        check((await srv.stop()) === 0, "full disk: clean shutdown");
        srv = await startServer(bin, [...serveArgs, "--kv-store", dir, "--kv-store-size", "64M"]);
        // The newest prompts are the last ones served: they are on disk.
        const last = await Promise.all(prompts.slice(-2).map(p => complete(srv.base, p)));
        check(last.every((r, j) => r.out === cold[prompts.length - 2 + j]), "after the restart: the newest prompts give the cold outputs");
        check(last.every(r => r.cached >= 128), `after the restart: the newest prompts hit the store (${last.map(r => r.cached)})`);
        if (process.env.KV_STORE_DEBUG) console.log(srv.log());
        check((await srv.stop()) === 0, "full disk restart: clean shutdown");
      } finally {
        spawnSync("umount", [dir]);
      }
    }
  }

  // 4. A sliding-window model (make-tiny gpt_oss: a window of 16 on every other layer, so a hybrid KV cache of
  // one full-attention and one windowed group): both groups' blocks are stored, and after a restart every prompt's
  // 9 cacheable blocks come back with their windows (cached, nothing replayed), outputs bitwise the cold ones.
  {
    const model = path.join(root, "gpt-oss");
    const mk = spawnSync(bin, ["make-tiny", "--arch", "gpt_oss", "--layers", "2", "--window", "16", "--out", model,
                               "-q", "--seed", "3"], {encoding: "utf8"});
    check(mk.status === 0, `make-tiny gpt_oss: ${mk.stderr.trim()}`);
    const args = ["-m", model, ...serveArgs];
    const dir = path.join(root, "swa");
    const coldSwa = [];
    let srv = await startServer(bin, [...args, "--no-prefix-cache"]);
    for (const p of prompts) coldSwa.push((await complete(srv.base, p)).out);
    check((await srv.stop()) === 0, "sliding-window model, cold server: clean shutdown");
    srv = await startServer(bin, [...args, "--kv-store", dir, "--kv-store-size", "256M"]);
    await serveAll(srv, "sliding-window model, first server", coldSwa);
    check(/hybrid/.test(srv.log()), "the sliding-window model runs a hybrid KV cache");
    check((await srv.stop()) === 0, "sliding-window model: clean shutdown");
    srv = await startServer(bin, [...args, "--kv-store", dir, "--kv-store-size", "256M"]);
    const cached = await serveAll(srv, "sliding-window model, restarted server", coldSwa);
    const hits = diskMetric(await metrics(srv.base), "deepinfer_kv_tier_hits_total");
    check(cached === prompts.length * 144, `sliding-window model, restart: ${cached} cached prompt tokens (${prompts.length} x 144: the windows came back)`);
    check(hits >= 4 * 4 + prompts.length * 5, `sliding-window model, restart: ${hits} blocks loaded from disk`);
    check((await srv.stop()) === 0, "sliding-window model, restarted server: clean shutdown");
  }
} catch (e) {
  check(false, `unexpected error: ${e.stack}`);
} finally {
  fs.rmSync(root, {recursive: true, force: true});
}
done("kv_store");
