// Must-show 5 (part): `mpirun -np 2 deepinfer serve --dp 2 --ep 2`: concurrent requests land on both attention
// groups (the per-rank metrics say so), answers equal the one-process server's (greedy), and SIGTERM to rank 0
// ends the job with exit 0, which needs the leak check clean on every rank.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, metrics, checker} from "../server/common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const prompts = Array.from({length: 12}, (_, i) => `Once upon a time ${i} there was`);
async function completions(base) {
  return Promise.all(prompts.map(async p => {
    const r = await fetch(`${base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({prompt: p, max_tokens: 16, temperature: 0})});
    return (await r.json()).choices?.[0]?.text;
  }));
}

const one = await startServer(bin);
const want = await completions(one.base);
check(await one.stop() === 0, "one-process server: clean shutdown");

process.env.DEEPINFER_SERVE_MPI = "2";
process.env.DEEPINFER_SERVE_ARGS = "--dp 2 --ep 2";
const srv = await startServer(bin);
const got = await completions(srv.base);
check(JSON.stringify(got) === JSON.stringify(want), `12 concurrent greedy completions equal the one-process server's`);
const m = await metrics(srv.base);
const perRank = dp => {
  const r = new RegExp(`^deepinfer_rank_generation_tokens_total\\{[^}]*dp_rank="${dp}"[^}]*\\} ([0-9.e+-]+)$`, "m").exec(m.text);
  return r ? Number(r[1]) : NaN;
};
check(perRank(0) > 0 && perRank(1) > 0, `both groups generated tokens (dp_rank 0: ${perRank(0)}, dp_rank 1: ${perRank(1)})`);
check(perRank(0) + perRank(1) === 12 * 16, `the groups' tokens add up to the requests' (${perRank(0) + perRank(1)})`);
// Sequential requests (each finished before the next) spread too: the router breaks load ties round-robin.
const before = [perRank(0), perRank(1)];
for (let i = 0; i < 4; ++i)
  await fetch(`${srv.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt: `Seq ${i}`, max_tokens: 4, temperature: 0})}).then(r => r.json());
const m2 = await metrics(srv.base);
const rank2 = dp => Number(new RegExp(`^deepinfer_rank_generation_tokens_total\\{[^}]*dp_rank="${dp}"[^}]*\\} ([0-9.e+-]+)$`, "m").exec(m2.text)?.[1]);
check(rank2(0) - before[0] === 8 && rank2(1) - before[1] === 8, `4 sequential requests: 2 per group (${rank2(0) - before[0]} / ${rank2(1) - before[1]} tokens)`);
const health = await fetch(`${srv.base}/health`);
check(health.status === 200, "/health on rank 0");
const code = await srv.stop();
check(code === 0, `SIGTERM to rank 0: the job exits 0, leak check clean on every rank (exit ${code}; ${srv.log().split("\n").filter(l => /shutdown|error/i.test(l)).join(" | ").slice(0, 300)})`);
// A MoE model: both expert-parallel ranks computed expert rows, and the imbalance gauge is exported.
{
  const moeDir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-servedp-"));
  spawnSync(bin, ["make-tiny", "--arch", "qwen3_moe", "--out", moeDir, "-q"]);
  const moe = await startServer(bin, ["-m", path.join(moeDir, "model.gguf")]);
  await Promise.all(prompts.map(p => fetch(`${moe.base}/v1/completions`, {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify({prompt: p, max_tokens: 8})}).then(r => r.json())));
  // Aborts mixed in (must-show 1): 24 seeded requests with log-probs run to completion while 24 streams are cut
  // after a few tokens; the completed answers must equal the one-process server's, bit for bit.
  const mixed = Array.from({length: 24}, (_, i) => ({prompt: `Story ${i}: once`, max_tokens: 12 + (i % 5), temperature: 0.8,
                                                     seed: 100 + i, top_k: 40, logprobs: 2}));
  const complete = base => Promise.all(mixed.map(b => fetch(`${base}/v1/completions`, {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(b)}).then(r => r.json()).then(j => JSON.stringify(j.choices))));
  const cut = base => Promise.all(Array.from({length: 24}, async (_, i) => {
    const ac = new AbortController();
    try {
      const r = await fetch(`${base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"}, signal: ac.signal,
        body: JSON.stringify({prompt: `Abort ${i}`, max_tokens: 200, ignore_eos: true, stream: true, seed: i, temperature: 1})});
      const reader = r.body.getReader();
      for (let k = 0; k < 2 + (i % 4); ++k) await reader.read();
      ac.abort();
      return true;
    } catch {
      return true;
    }
  }));
  const [gotMixed] = await Promise.all([complete(moe.base), cut(moe.base)]);
  const mm = await metrics(moe.base);
  const rows = r => Number(new RegExp(`^deepinfer_rank_expert_rows_total\\{[^}]*rank="${r}"[^}]*\\} ([0-9.e+-]+)$`, "m").exec(mm.text)?.[1]);
  const imb = mm.get("deepinfer_expert_load_imbalance");
  check(rows(0) > 0 && rows(1) > 0 && imb >= 1 && imb < 2, `MoE: expert rows per rank ${rows(0)} / ${rows(1)}, imbalance gauge ${imb}`);
  check(await moe.stop() === 0, "MoE server: clean shutdown after 24 aborted streams (leak check on every rank)");
  process.env.DEEPINFER_SERVE_MPI = "";
  const moe1 = await startServer(bin, ["-m", path.join(moeDir, "model.gguf")]);
  const wantMixed = await complete(moe1.base);
  await moe1.stop();
  const diff = wantMixed.findIndex((w, i) => w !== gotMixed[i]);
  check(diff < 0, `MoE, 24 seeded completions with log-probs alongside 24 aborted streams: equal to one process` +
        (diff >= 0 ? ` (first difference: request ${diff}: ${gotMixed[diff]?.slice(0, 160)} vs ${wantMixed[diff].slice(0, 160)})` : ""));
  fs.rmSync(moeDir, {recursive: true, force: true});
}
done("serve_dp");
