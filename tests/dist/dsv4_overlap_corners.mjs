// DeepSeek-V4's two-batch overlap (Dsv4LayersOverlapped) in the corners ep_dp_batch.mjs does not reach: every
// run below adds --enable-two-batch-overlap and must change no bit of what the same layout writes without it.
//   1. one row: a single request, so each decode step is one row on one rank (micro-batches of 1 and 0 rows) and
//      nothing on the other; also bitwise one process.
//   2. --swa-replay approx: prefix hits that replay the windows (usage.replayed_tokens > 0 is asserted, so the
//      replay really ran under the overlap).
//   3. --tp 2 inside --dp 2 groups (-np 4): the attention heads split, the experts dispatched across all 4 ranks.
// (--speculative, MTP included, is refused in multi-process runs, so it never meets the overlap.)
// Outputs are whole `generate --input` result lines (tokens, text, finish reasons, log-probs).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-dsv4-tbo-"));
let failures = 0;
const check = (ok, msg) => { console.log(`${ok ? "ok  " : "FAIL"} ${msg}`); if (!ok) ++failures; };
const env = {...process.env, DEEPINFER_NO_PROGRESS: "1", OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1",
             OMPI_MCA_rmaps_base_oversubscribe: "1"};
const run = (cmd, args) => spawnSync(cmd, args, {env, encoding: "utf8", maxBuffer: 1 << 28, timeout: 300000});
const mpi = (np, args) => run("mpirun", ["--oversubscribe", "-np", String(np), bin, ...args]);

const model = path.join(dir, "v4.gguf");
const mk = run(bin, ["make-tiny", "--arch", "deepseek_v4", "--format", "gguf", "--mtp", "--experts", "8",
                     "--experts-used", "2", "-q", "-o", model]);
check(mk.status === 0, `make-tiny deepseek_v4 --mtp (${mk.stderr.trim().slice(-200)})`);

const rng = makeRng(4242);
const tokens = n => Array.from({length: n}, () => rng.range(3, 500));
const writeInput = (name, reqs) => {
  const file = path.join(dir, name);
  fs.writeFileSync(file, reqs.map(r => JSON.stringify(r)).join("\n") + "\n");
  return file;
};
const lines = file => fs.readFileSync(file, "utf8").trim().split("\n");
// Runs `args` (a generate command after the binary) with and without the overlap flag; returns both outputs.
let k = 0;
function pair(label, np, args) {
  const outs = [];
  for (const tbo of [false, true]) {
    const out = path.join(dir, `out${k++}.jsonl`);
    const r = mpi(np, ["generate", "-m", model, "--kv-cache", "64MiB", ...args, ...(tbo ? ["--enable-two-batch-overlap"] : []),
                       "--output", out]);
    check(r.status === 0, `${label}${tbo ? " with two-batch overlap" : ""}: exits 0 (${r.stderr.trim().slice(-300)})`);
    outs.push(r.status === 0 ? lines(out) : null);
  }
  const [plain, over] = outs;
  if (plain && over) {
    const diff = plain.findIndex((l, i) => l !== over[i]);
    check(plain.length === over.length && diff < 0 && !plain.some(l => l.includes('"error"')),
          `${label}: two-batch overlap writes the same ${plain.length} results` +
          (diff >= 0 ? ` (first difference, line ${diff + 1}: ${over[diff]?.slice(0, 200)} vs ${plain[diff].slice(0, 200)})` : ""));
  }
  return outs;
}

if (mk.status === 0) {
  // 1. One row per step.
  const one = writeInput("one.jsonl", [{prompt: tokens(21), max_tokens: 24, ignore_eos: true, temperature: 0, logprobs: 2}]);
  const refOut = path.join(dir, "one.ref.jsonl");
  const ref = run(bin, ["generate", "-m", model, "--kv-cache", "64MiB", "--input", one, "-q", "--output", refOut]);
  check(ref.status === 0, `one row: one process (${ref.stderr.trim().slice(-200)})`);
  const [, over] = pair("one row: mpirun -np 2 --dp 2", 2, ["--input", one, "--dp", "2"]);
  if (ref.status === 0 && over)
    check(over[0] === lines(refOut)[0], "one row: with two-batch overlap bitwise one process");

  // 2. Approximate replay on prefix hits: long shared prefixes, the requests that share one queued after the one
  //    that writes it (at most two sequences at once), small blocks so the hits are whole blocks.
  const base = [tokens(200), tokens(180)];
  const replayReqs = [];
  for (let i = 0; i < 12; ++i)
    replayReqs.push({prompt: base[i % 2].slice(0, 120 + 8 * i).concat(tokens(10)), max_tokens: 12, ignore_eos: true,
                     temperature: 0, logprobs: 1});
  const replay = writeInput("replay.jsonl", replayReqs);
  const [, replayOut] = pair("--swa-replay approx: mpirun -np 2 --dp 2", 2,
                             ["--input", replay, "--dp", "2", "--swa-replay", "approx", "--block-size", "8", "--max-num-seqs", "2"]);
  if (replayOut) {
    const usage = replayOut.map(l => JSON.parse(l).usage || {});
    const replayed = usage.filter(u => u.replayed_tokens > 0).length, cached = usage.filter(u => u.cached_tokens > 0).length;
    check(replayed > 0, `--swa-replay approx: ${cached} of ${usage.length} requests hit the prefix cache, ${replayed} replayed windows`);
  }

  // 3. Tensor parallel inside the data-parallel groups, experts over all four ranks: greedy and seeded sampling.
  const mixed = [];
  for (let i = 0; i < 16; ++i)
    mixed.push({prompt: tokens(rng.range(4, 40)), max_tokens: rng.range(8, 24), ignore_eos: true,
                ...(i % 2 ? {temperature: 0.8, seed: i} : {temperature: 0}), ...(i % 4 === 0 ? {logprobs: 1} : {})});
  pair("--tp 2 in --dp 2 groups: mpirun -np 4", 4,
       ["--input", writeInput("mixed.jsonl", mixed), "--dp", "2", "--tp", "2", "--ep", "4", "--max-num-seqs", "8"]);
}
fs.rmSync(dir, {recursive: true, force: true});
console.log(failures ? `${failures} check(s) failed` : "DeepSeek-V4 two-batch overlap corner checks passed");
process.exit(failures ? 1 : 0);
