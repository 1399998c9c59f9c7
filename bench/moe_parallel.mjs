// Step time of a MoE model split into compute and communication, per parallel layout, on one machine
// (docs/benchmarks.md "MoE parallelism: step-time split"). Runs `deepinfer generate --input` on the same batch
// as one process and under mpirun (DP2/EP2 with and without two-batch overlap, TP2), and reads what every rank
// logs at drain: MoE bytes sent, how long the MoE exchanges ran and how much of that the compute thread waited
// for, tensor-parallel bytes and waits.
//   node bench/moe_parallel.mjs BIN MODEL [--requests 32] [--prompt 64] [--gen 16] [--repeat 3]
// Configurations run interleaved --repeat times; the table shows each one's median run (by wall time), so a
// burst of load from elsewhere on the machine skews one sample rather than one configuration.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {makeRng} from "../tests/common/rng.mjs";

const [bin, model, ...rest] = process.argv.slice(2);
if (!bin || !model) {
  console.error("usage: node bench/moe_parallel.mjs BIN MODEL [--requests N] [--prompt P] [--gen G]");
  process.exit(2);
}
const opt = {requests: 32, prompt: 64, gen: 16, repeat: 3};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, "")] = Number(rest[i + 1]);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-moebench-"));
const rng = makeRng(7);
const lines = Array.from({length: opt.requests}, () => JSON.stringify({
  prompt: Array.from({length: opt.prompt}, () => 3 + rng.int(5000)), max_tokens: opt.gen, ignore_eos: true,
  temperature: 0}));
const input = path.join(dir, "in.jsonl");
fs.writeFileSync(input, lines.join("\n") + "\n");
const tokens = opt.requests * (opt.prompt + opt.gen);

const env = {...process.env, DEEPINFER_NO_PROGRESS: "1", DEEPINFER_LOG: "info", OMPI_ALLOW_RUN_AS_ROOT: "1",
             OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1"};
const common = ["generate", "-m", model, "--input", input, "--max-num-seqs", String(opt.requests), "--kv-cache", "512MiB"];
const configs = [
  ["one process, -t 2", null, ["-t", "2"]],
  ["DP2 / EP2, -t 1", 2, ["--dp", "2", "--ep", "2", "-t", "1"]],
  ["DP2 / EP2 + two-batch overlap", 2, ["--dp", "2", "--ep", "2", "-t", "1", "--enable-two-batch-overlap"]],
  ["TP2 (experts tensor-split), -t 1", 2, ["--tp", "2", "-t", "1"]],
];
const n = s => Number(s);
const samples = configs.map(() => []);
let reference = null;
for (let rep = 0; rep < opt.repeat; ++rep)
  for (let c = 0; c < configs.length; ++c) {
    const [label, np, flags] = configs[c];
    const out = path.join(dir, `${c}.jsonl`);
    const args = [...common, ...flags, "--output", out];
    const r = np ? spawnSync("mpirun", ["--oversubscribe", "-np", String(np), bin, ...args], {env, encoding: "utf8"})
                 : spawnSync(bin, args, {env, encoding: "utf8"});
    if (r.status !== 0) {
      console.error(`${label}: exit ${r.status}\n${r.stderr.slice(-2000)}`);
      process.exit(1);
    }
    const ids = fs.readFileSync(out, "utf8").trim().split("\n").map(l => JSON.stringify(JSON.parse(l).token_ids ?? JSON.parse(l).choices));
    if (!reference) reference = ids;
    const same = ids.filter((x, i) => x === reference[i]).length;
    const wall = n(/requests in ([0-9.]+) s/.exec(r.stderr)?.[1] ?? NaN);
    const per = {moeMB: 0, moeWait: 0, tpMB: 0, tpWait: 0, exch: 0, exposed: 0};
    let ranks = 0;
    for (const m of r.stderr.matchAll(/MoE dispatch\/combine sent ([0-9.]+) MB, waited ([0-9.]+) s for peers; tensor-parallel collectives sent ([0-9.]+) MB, waited ([0-9.]+) s/g)) {
      per.moeMB += n(m[1]); per.moeWait += n(m[2]); per.tpMB += n(m[3]); per.tpWait += n(m[4]); ++ranks;
    }
    for (const m of r.stderr.matchAll(/MoE exchanges ran ([0-9.]+) s, ([0-9.]+) s of it exposed/g)) {
      per.exch += n(m[1]); per.exposed += n(m[2]);
    }
    const avg = v => ranks ? v / ranks : 0;
    samples[c].push({label, wall, tokS: tokens / wall, same, ranks: ranks || 1, moeMB: avg(per.moeMB), tpMB: avg(per.tpMB),
                     exch: avg(per.exch), exposed: avg(per.exposed), tpWait: avg(per.tpWait)});
    console.error(`${label}: ${wall.toFixed(2)} s`);
  }
const rows = samples.map(runs => {
  const sorted = [...runs].sort((a, b) => a.wall - b.wall);
  return {...sorted[Math.floor((sorted.length - 1) / 2)], range: `${sorted[0].wall.toFixed(2)}-${sorted.at(-1).wall.toFixed(2)}`};
});
console.log(`${opt.requests} requests x (${opt.prompt} prompt + ${opt.gen} generated) tokens = ${tokens} tokens; median of ${opt.repeat} interleaved runs (wall range in brackets); per-rank averages`);
console.log("| layout | wall (engine) | tokens/s | outputs equal to one process | MoE sent per rank | MoE bytes per token (all MoE layers) | MoE exchanges ran | of which exposed | TP sent per rank | TP waits | compute (wall - exposed - TP waits) |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
for (const r of rows) {
  const comm = r.exposed + r.tpWait;
  console.log(`| ${r.label} | ${r.wall.toFixed(2)} s (${r.range}) | ${r.tokS.toFixed(0)} | ${r.same}/${opt.requests} | ${r.moeMB.toFixed(1)} MB | ` +
              `${(r.moeMB * r.ranks * 1e3 / tokens).toFixed(1)} KB | ${r.exch.toFixed(2)} s | ${r.exposed.toFixed(2)} s | ${r.tpMB.toFixed(1)} MB | ${r.tpWait.toFixed(2)} s | ${(r.wall - comm).toFixed(2)} s |`);
}
fs.rmSync(dir, {recursive: true, force: true});
