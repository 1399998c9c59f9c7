// The KV tiers under `serve --dp` (issue 35: "works under --dp/--ep, each rank stores its shard"). With one rank
// per attention group every group holds all of a prefix's K/V, the same bytes one process computes, so a --dp job
// and a one-process server share one --kv-store directory:
// 1. a one-process server stores 16 prompts; a `mpirun -np 2 serve --dp 2` job on that directory serves them with
//    every cacheable block loaded from disk on both groups (usage.cached_tokens), outputs bitwise the cold ones;
// 2. the job stores 16 new prompts from both ranks, exits 0 on SIGTERM (leak check clean on every rank, loads
//    drained), and a one-process restart hits all of them with the cold outputs;
// 3. `--tp 2` with a store is refused with the reason.
// Rank 0's GET /v1/kv_events reports the whole job's disk tier: the entries both ranks found at start-up, before
// any request (so the idle job still ships its groups' events), and the new prompts' blocks both ranks wrote.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, metrics, checker, sharedModels, seededCompletion as complete, chainHashes, kvSnapshot} from "../server/common.mjs";
import {tokenPrompt} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const root = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-kv-store-dp-"));
const VOCAB = 512;  // stories260K
const serveArgs = ["--block-size", "16", "--max-num-seqs", "8", "--kv-cache", "2MiB"];
// 160-token prompts: 9 full blocks can be cached (the last token always runs).
const first = Array.from({length: 16}, (_, i) => tokenPrompt(700 + i, 160, VOCAB, {lo: 3}));
const second = Array.from({length: 16}, (_, i) => tokenPrompt(800 + i, 160, VOCAB, {lo: 3}));

// Sends the prompts 8 at a time; returns the outputs and the cached tokens of each.
async function serveAll(srv, prompts) {
  const res = [];
  for (let i = 0; i < prompts.length; i += 8) res.push(...await Promise.all(prompts.slice(i, i + 8).map(p => complete(srv.base, p))));
  return res;
}
const same = (got, want) => got.filter((r, i) => r.out !== want[i]).length;
const withMpi = (np, args) => { process.env.DEEPINFER_SERVE_MPI = String(np); process.env.DEEPINFER_SERVE_ARGS = args; };
const withoutMpi = () => { delete process.env.DEEPINFER_SERVE_MPI; delete process.env.DEEPINFER_SERVE_ARGS; };

try {
  const store = ["--kv-store", path.join(root, "store"), "--kv-store-size", "256M"];
  const cold = {};
  {
    const srv = await startServer(bin, [...serveArgs, "--no-prefix-cache"]);
    cold.first = (await serveAll(srv, first)).map(r => r.out);
    cold.second = (await serveAll(srv, second)).map(r => r.out);
    check((await srv.stop()) === 0, "cold server: clean shutdown");
  }
  {
    const srv = await startServer(bin, [...serveArgs, ...store]);
    const got = await serveAll(srv, first);
    check(same(got, cold.first) === 0, "one process, storing: outputs bitwise the cold ones");
    check((await srv.stop()) === 0, "one process: clean shutdown (the writer drains its queue)");
  }
  // 1. The --dp job loads what one process stored, on both groups.
  // Polls rank 0's snapshot until its tiers.disk holds every prompt's 9 cacheable blocks (3 s at most).
  const diskHolds = async (base, prompts) => {
    const want = prompts.flatMap(p => chainHashes(p, 16).slice(0, 9));
    let snap = null, held = 0;
    for (let t = 0; t < 30; ++t) {
      snap = await kvSnapshot(base);
      held = want.filter(h => snap?.disk.includes(h)).length;
      if (held === want.length) break;
      await new Promise(r => setTimeout(r, 100));
    }
    return {held, want: want.length};
  };
  withMpi(2, "--dp 2");
  {
    const srv = await startServer(bin, [...serveArgs, ...store]);
    const found = await diskHolds(srv.base, first);
    check(found.held === found.want, `--dp 2, idle after start-up: rank 0's /v1/kv_events lists the store's entries under tiers.disk (${found.held} of ${found.want})`);
    const got = await serveAll(srv, first);
    const diff = same(got, cold.first);
    check(diff === 0, `--dp 2 on the store: all 16 outputs bitwise the cold ones (${diff} differ)`);
    const cached = got.map(r => r.cached);
    check(cached.every(c => c === 144), `--dp 2: every prompt's 9 cacheable blocks loaded from the store (${cached})`);
    const m = await metrics(srv.base);
    const perRank = dp => Number(new RegExp(`^deepinfer_rank_generation_tokens_total\\{[^}]*dp_rank="${dp}"[^}]*\\} ([0-9.e+-]+)$`, "m").exec(m.text)?.[1]);
    check(perRank(0) > 0 && perRank(1) > 0, `both groups served prompts from the store (tokens: ${perRank(0)} / ${perRank(1)})`);
    // Each rank's own tier counters (rank 0's /metrics shows every rank's): the disk hits of both sum to every
    // prompt's 9 blocks.
    let mr = m;  // the ranks' reports ride the control plane's sync: polled until they cover every load
    const rankHits = dp => Number(new RegExp(`^deepinfer_rank_kv_tier_disk_hits_total\\{[^}]*dp_rank="${dp}"[^}]*\\} ([0-9.e+-]+)$`, "m").exec(mr.text)?.[1]);
    for (let t = 0; t < 40 && rankHits(0) + rankHits(1) !== 16 * 9; ++t) {
      await new Promise(r => setTimeout(r, 50));
      mr = await metrics(srv.base);
    }
    check(rankHits(0) > 0 && rankHits(1) > 0 && rankHits(0) + rankHits(1) === 16 * 9,
          `per-rank tier counters: disk hits ${rankHits(0)} + ${rankHits(1)} = ${16 * 9}`);
    // 2. Both ranks store new prompts.
    const got2 = await serveAll(srv, second);
    check(same(got2, cold.second) === 0, "--dp 2, storing new prompts: outputs bitwise the cold ones");
    const wrote = await diskHolds(srv.base, second);
    check(wrote.held === wrote.want, `--dp 2: the blocks both ranks wrote reach rank 0's /v1/kv_events (${wrote.held} of ${wrote.want} under tiers.disk)`);
    const code = await srv.stop();
    check(code === 0, `--dp 2: SIGTERM ends the job with exit 0, leak check clean on every rank (exit ${code}; ${srv.log().split("\n").filter(l => /error|leak/i.test(l)).join(" | ").slice(0, 300)})`);
  }
  withoutMpi();
  {
    const srv = await startServer(bin, [...serveArgs, ...store]);
    const got = await serveAll(srv, second);
    check(same(got, cold.second) === 0, "one process after the --dp job: outputs bitwise the cold ones");
    const cached = got.map(r => r.cached);
    check(cached.every(c => c === 144), `one process after the --dp job: both ranks' stored prompts hit (${cached})`);
    check((await srv.stop()) === 0, "one process after the --dp job: clean shutdown");
  }
  // 3. --tp 2 with a store: refused, with the reason.
  {
    const r = spawnSync("mpirun", ["--oversubscribe", "-np", "2", bin, "serve", "-m", path.join(sharedModels, "stories260K.gguf"),
                                   "--port", "0", "--tp", "2", ...serveArgs, ...store],
                        {encoding: "utf8", timeout: 120000,
                         env: {...process.env, DEEPINFER_NO_PROGRESS: "1", OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1"}});
    check(r.status !== 0 && /not supported with --tp or --cp/.test(r.stderr + r.stdout),
          `--tp 2 with --kv-store is refused with the reason (exit ${r.status}: ${(r.stderr + r.stdout).split("\n").filter(l => /kv-store|error/i.test(l)).slice(0, 2).join(" | ").slice(0, 300)})`);
  }
} finally {
  fs.rmSync(root, {recursive: true, force: true});
}
done("kv_store_dp");
