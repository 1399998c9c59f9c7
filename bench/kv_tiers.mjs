// KV tiers benchmark (docs/benchmarks.md, issue 35): time to first token of a long prompt whose prefix is served
// cold, from the pool, from the RAM tier (the pool evicted it) and from the disk tier (a restarted server, page
// cache warm, and cold when the page cache can be dropped), on one `deepinfer serve`; the store's load bandwidth
// from its own counters beside a `dd` probe of the same disk (O_DIRECT write with fsync, O_DIRECT read).
// The model is a random llama from make-tiny (8 layers, hidden 512, 8 KV heads, f32 KV: 32 KiB per token), so
// the K/V moved per prompt is that of a small real model and the prefill is long enough to be measured.
// usage: node bench/kv_tiers.mjs build/deepinfer [prefix tokens=4096]
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, metrics, streamedTtft as ttft} from "../tests/server/common.mjs";
import {tokenPrompt} from "../tests/common/rng.mjs";

const bin = process.argv[2] ?? "build/deepinfer";
const N = Number(process.argv[3] ?? 4096);
const root = fs.mkdtempSync(path.join(process.env.BENCH_DIR ?? os.tmpdir(), "deepinfer-bench-kv-tiers-"));
const VOCAB = 512;
const KV_PER_TOKEN = 8 * 2 * 8 * 64 * 4;  // layers x (K, V) x heads x head_dim x f32
const mib = b => (b / 1048576).toFixed(1);

function dd(args) {
  const r = spawnSync("dd", args, {encoding: "utf8"});
  const m = /copied, ([0-9.]+) s, ([0-9.,]+ [kMG]?B\/s)/.exec(r.stderr);
  return m ? {seconds: Number(m[1]), rate: m[2]} : {error: r.stderr.trim().split("\n").pop()};
}

const tier = (m, name, t) => Number(new RegExp(`^${name}\\{[^}]*tier="${t}"\\} ([0-9.e+-]+)$`, "m").exec(m.text)?.[1] ?? NaN);
const sleep = ms => new Promise(r => setTimeout(r, ms));
async function flushed(base) {  // the writer is idle: disk bytes written stop moving
  let last = -1;
  for (;;) {
    const w = tier(await metrics(base), "deepinfer_kv_tier_written_bytes_total", "disk");
    if (w === last) return w;
    last = w;
    await sleep(300);
  }
}

try {
  const model = path.join(root, "m.gguf");
  const mk = spawnSync(bin, ["make-tiny", "--arch", "llama", "--hidden", "512", "--layers", "8", "--heads", "8", "--kv-heads", "8",
                             "--ffn", "1024", "--ctx", String(N + 256), "--format", "gguf", "-o", model, "-q"], {encoding: "utf8"});
  if (mk.status !== 0) throw new Error(`make-tiny: ${mk.stderr}`);
  const probe = path.join(root, "probe");
  const w = dd(["if=/dev/zero", `of=${probe}`, "bs=1M", "count=512", "oflag=direct", "conv=fsync"]);
  const rd = dd([`if=${probe}`, "of=/dev/null", "bs=1M", "iflag=direct"]);
  fs.rmSync(probe);
  console.log(`dd probe (512 MiB, O_DIRECT): write ${w.rate ?? w.error}, read ${rd.rate ?? rd.error}`);

  const promptKv = N * KV_PER_TOKEN;
  const store = path.join(root, "store");
  // The pool holds one prompt and a half: the next prompt evicts the previous one's blocks.
  const args = ["-m", model, "-t", "2", "--block-size", "16", "--ctx-size", String(N + 64),
                "--kv-cache", `${Math.ceil(promptKv * 1.5 / 1048576)}MiB`, "--kv-offload-ram", `${Math.ceil(promptKv * 4 / 1048576)}MiB`,
                "--kv-store", store, "--kv-store-size", `${Math.ceil(promptKv * 8 / 1048576)}MiB`];
  const [a, b, c] = [1, 2, 3].map(s => tokenPrompt(4000 + s, N, VOCAB, {lo: 3}));
  const rows = [];
  let srv = await startServer(bin, args);
  const coldA = await ttft(srv.base, a);
  rows.push(["cold (prefill of every token)", coldA]);
  const t0 = performance.now();
  const written = await flushed(srv.base);
  console.log(`write-through: ${mib(written)} MiB on disk ${((performance.now() - t0) / 1000).toFixed(2)} s after the first token ` +
              `(the writer overlaps the prefill; fsync per block)`);
  rows.push(["pool (same server, blocks still cached)", await ttft(srv.base, a)]);
  rows.push(["cold, a second prompt (evicts the first from the pool)", await ttft(srv.base, b)]);
  await flushed(srv.base);
  let m0 = await metrics(srv.base);
  rows.push(["RAM tier (the pool evicted it)", await ttft(srv.base, a)]);
  let m1 = await metrics(srv.base);
  const ramBytes = tier(m1, "deepinfer_kv_tier_read_bytes_total", "ram") - tier(m0, "deepinfer_kv_tier_read_bytes_total", "ram");
  const ramSec = m1.get("deepinfer_kv_tier_load_seconds_sum") - m0.get("deepinfer_kv_tier_load_seconds_sum");
  console.log(`RAM tier load: ${mib(ramBytes)} MiB in ${(ramSec * 1000).toFixed(1)} ms (${(ramBytes / 1048576 / ramSec).toFixed(0)} MiB/s, queueing included)`);
  await ttft(srv.base, c);  // a third prompt, stored too
  await flushed(srv.base);
  await srv.stop();

  srv = await startServer(bin, args);  // RAM tier and pool empty; the files are in the page cache
  m0 = await metrics(srv.base);
  rows.push(["disk tier after a restart (page cache warm)", await ttft(srv.base, a)]);
  m1 = await metrics(srv.base);
  const diskBytes = tier(m1, "deepinfer_kv_tier_read_bytes_total", "disk") - tier(m0, "deepinfer_kv_tier_read_bytes_total", "disk");
  const diskSec = m1.get("deepinfer_kv_tier_load_seconds_sum") - m0.get("deepinfer_kv_tier_load_seconds_sum");
  console.log(`disk tier load (page cache): ${mib(diskBytes)} MiB in ${(diskSec * 1000).toFixed(1)} ms (${(diskBytes / 1048576 / diskSec).toFixed(0)} MiB/s)`);
  await srv.stop();
  const drop = spawnSync("sh", ["-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], {encoding: "utf8"});
  if (drop.status === 0) {
    srv = await startServer(bin, args);
    m0 = await metrics(srv.base);
    rows.push(["disk tier after a restart (page cache dropped)", await ttft(srv.base, b)]);
    m1 = await metrics(srv.base);
    const bytes = tier(m1, "deepinfer_kv_tier_read_bytes_total", "disk") - tier(m0, "deepinfer_kv_tier_read_bytes_total", "disk");
    const sec = m1.get("deepinfer_kv_tier_load_seconds_sum") - m0.get("deepinfer_kv_tier_load_seconds_sum");
    console.log(`disk tier load (cold page cache): ${mib(bytes)} MiB in ${(sec * 1000).toFixed(1)} ms (${(bytes / 1048576 / sec).toFixed(0)} MiB/s)`);
    await srv.stop();
  } else {
    console.log(`page cache not dropped (${drop.stderr.trim()}): no cold-disk row`);
  }
  console.log(`\n${N}-token prompt, ${mib(promptKv)} MiB of K/V:`);
  console.log("| served from | TTFT ms | cached tokens | vs cold |");
  console.log("|---|---|---|---|");
  for (const [label, r] of rows)
    console.log(`| ${label} | ${r.ms.toFixed(1)} | ${r.cached} | ${(coldA.ms / r.ms).toFixed(1)}x faster |`);
} finally {
  fs.rmSync(root, {recursive: true, force: true});
}
