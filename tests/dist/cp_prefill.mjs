// Must-show 4 of the MoE-parallelism issue: context parallelism (--cp C) against one process.
//   1. Full-vocabulary log-probs of a 1,600-token prompt at --cp 2 and --cp 4 (llama in one 2,048-token chunk and
//      in 512-token chunks, whose later chunks attend a cached prefix; DeepSeek-V3 with MLA, experts over the
//      ranks and its MTP module): bit-identical to one process (f32). Context parallelism changes who computes a
//      row, not its arithmetic, so any difference is a bug (the largest |delta| is printed). --cp 2 --tp 2 must
//      equal --tp 2 alone bit for bit (tensor parallelism's own rounding is tests/dist/tp_logprobs.mjs's subject).
//   2. Per-rank attention work (query x key pairs each rank's attention computed, printed by every rank): the
//      balanced head-tail split within 5% of the mean, while the contiguous split's last rank carries far more
//      (printed for contrast, and asserted to be worse than 1.3x the mean in one chunk).
//   3. The engine: `generate --input` with 1,500+-token prompts, prompts sharing a 1,000-token prefix (prefix
//      cache) and short ones, chunked prefill at 512 tokens, greedy and seeded sampling with log-probs, then
//      decode: tokens, text, finish reasons and log-probs bitwise equal to one process at --cp 2, --cp 4,
//      --dp 2 --cp 2, overlap on and off; the drain log's per-rank attention work within 5% of the group mean.
//   node tests/dist/cp_prefill.mjs BIN
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {checkVocabCoverage, makeRng} from "../common/rng.mjs";

const bin = path.resolve(process.argv[2]);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-cp-"));
const env = {...process.env, OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1", DEEPINFER_NO_PROGRESS: "1",
             OMPI_MCA_rmaps_base_oversubscribe: "1"};
let failures = 0;
const check = (ok, msg) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${msg}`);
  if (!ok) ++failures;
};
const run = (cmd, args) => {
  const r = spawnSync(cmd, args, {env, encoding: "utf8", maxBuffer: 1 << 30, timeout: 300000});
  return {status: r.status, stdout: r.stdout ?? "", stderr: (r.stderr ?? "") + (r.error ? String(r.error) : "")};
};
const deepinfer = args => {
  const r = run(bin, args);
  if (r.status !== 0) throw new Error(`deepinfer ${args.join(" ")}: exit ${r.status}: ${r.stderr.slice(-600)}`);
  return r.stdout;
};
const mpirun = (np, args) => run("mpirun", ["--oversubscribe", "-np", String(np), bin, ...args, "--threads", "1"]);
const argmax = row => row.reduce((best, v, i) => (v > row[best] ? i : best), 0);

// Per-rank attention work from the ranks' "attention work N query-key pairs" lines: rank -> work.
function work(stderr) {
  const w = new Map();
  for (const m of stderr.matchAll(/rank (\d+) \(cp (\d+)\/(\d+)\): attention work (\d+) query-key pairs/g)) w.set(Number(m[1]), Number(m[4]));
  return w;
}
const spread = values => {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return {max: Math.max(...values) / mean, min: Math.min(...values) / mean};
};

// The shared seeded generator; 1,600 ids in [3, 500] of make-tiny's 512, odd and even, the top 10% included (checked).
const {range: ri} = makeRng(11);
const prompt = Array.from({length: 1600}, () => ri(3, 500));
checkVocabCoverage(prompt, 512, "the 1,600-token prompt");

// 1 + 2: log-probs and the balance of the split.
const models = [
  {name: "llama", make: ["--arch", "llama"]},
  {name: "deepseek_v3", make: ["--arch", "deepseek_v3", "--mtp", "--experts", "16", "--experts-used", "4", "--layers", "3"], extra: ["--mtp"],
   chunks: ["512"]},
  // Sliding windows of 100 on two layers of three: a rank's rows read only their window of the K/V everyone wrote.
  {name: "gemma3", make: ["--arch", "gemma3", "--layers", "3", "--swa-pattern", "3", "--window", "100"], chunks: ["512"]},
  // gpt-oss: each row's softmax takes its head's sink once (every rank computes whole rows: no merge to count it twice).
  {name: "gpt_oss", make: ["--arch", "gpt_oss", "--format", "gguf", "--window", "100", "--experts", "8", "--experts-used", "2"],
   file: "model.gguf", chunks: ["512"]},
];
for (const m of models) {
  const dir = path.join(tmp, m.name);
  if (m.file) fs.mkdirSync(dir, {recursive: true});  // --format gguf: --out names the file
  deepinfer(["make-tiny", "--out", m.file ? path.join(dir, m.file) : dir, "-q", ...m.make]);
  for (const chunk of m.chunks ?? ["2048", "512"]) {
    const args = ["logprobs", "-m", m.file ? path.join(dir, m.file) : dir, "--tokens", JSON.stringify(prompt), "--chunk", chunk, ...(m.extra ?? [])];
    const ref = JSON.parse(deepinfer(args));
    const splits = [[2, ["--cp", "2"]], [4, ["--cp", "4"]]];
    if (m.name === "llama" && chunk === "512") splits.push([4, ["--cp", "2", "--tp", "2"]]);
    if (m.name === "llama" && chunk === "2048") splits.push([4, ["--cp", "4", "--cp-split", "contiguous"]]);
    for (const [np, split] of splits) {
      const label = `${m.name} chunk ${chunk} -np ${np} ${split.join(" ")}`;
      // With --tp the reference is the same tensor-parallel split without --cp: context parallelism must add
      // nothing to it (bit-identical), and tensor parallelism's own rounding is tp_logprobs.mjs's subject.
      const tp = split.includes("--tp");
      const base = tp ? JSON.parse(mpirun(2, [...args, "--tp", "2"]).stdout || "{}") : ref;
      const r = mpirun(np, [...args, ...split]);
      if (r.status !== 0) {
        check(false, `${label}: exit ${r.status}: ${r.stderr.slice(-600)}`);
        continue;
      }
      const ours = JSON.parse(r.stdout);
      let worst = 0, mismatches = 0, rows = 0, identical = true;
      for (const key of Object.keys(ref)) {
        if (ours[key]?.length !== ref[key].length || base[key]?.length !== ref[key].length) { identical = false; continue; }
        for (let i = 0; i < ref[key].length; ++i, ++rows) {
          const a = ours[key][i], b = base[key][i];
          for (let t = 0; t < b.length; ++t) {
            const d = Math.abs(a[t] - b[t]);
            if (d !== 0) identical = false;  // NaN too
            worst = Math.max(worst, d);
          }
          if (argmax(a) !== argmax(b)) ++mismatches;
        }
      }
      check(identical && mismatches === 0, `${label}: ${rows} rows${tp ? " against --tp 2 alone" : ""}, max |dlogprob| ${worst.toExponential(2)} ` +
            `(${identical ? "bit-identical" : "must be bit-identical"}), argmax mismatches ${mismatches}`);
      const w = work(r.stderr);
      check(w.size === np, `${label}: every rank reports its attention work (${w.size} of ${np})`);
      if (w.size !== np) continue;
      const {max, min} = spread([...w.values()]);
      const detail = `per-rank work / mean: max ${max.toFixed(3)}, min ${min.toFixed(3)}`;
      if (split.includes("contiguous")) check(max > 1.3, `${label}: the contiguous split is unbalanced, ${detail} (for contrast)`);
      else check(max <= 1.05 && min >= 0.95, `${label}: balanced split within 5%: ${detail}`);
    }
  }
}

// 3: the engine, prefill then decode.
const lines = [];
const shared = Array.from({length: 1000}, () => ri(3, 500));
for (let i = 0; i < 24; ++i) {
  const p = i % 3 === 0 ? Array.from({length: ri(1500, 1700)}, () => ri(3, 500))
      : i % 3 === 1 ? shared.concat(Array.from({length: ri(500, 600)}, () => ri(3, 500)))
      : Array.from({length: ri(1, 40)}, () => ri(3, 500));
  const q = {prompt: p, max_tokens: ri(8, 24), ignore_eos: true, logprobs: 2};
  if (i % 2) Object.assign(q, {temperature: 0.9, seed: i, top_k: 20});
  else q.temperature = 0;
  lines.push(JSON.stringify(q));
}
const input = path.join(tmp, "in.jsonl");
fs.writeFileSync(input, lines.join("\n") + "\n");
const normalize = text => text.trim().split("\n").map(l => {
  const j = JSON.parse(l);
  if (j.usage) delete j.usage.cached_tokens;  // each attention group has its own prefix cache
  return JSON.stringify(j);
});
for (const name of ["llama", "deepseek_v3"]) {
  const configs = name === "llama" ? [[2, ["--cp", "2"]], [2, ["--cp", "2", "--no-overlap"]], [4, ["--cp", "4"]], [4, ["--dp", "2", "--cp", "2"]]]
                                   : [[2, ["--cp", "2"]], [4, ["--dp", "2", "--cp", "2"]]];
  const model = path.join(tmp, name);
  const common = ["generate", "-m", model, "--input", input, "--max-batched-tokens", "512", "--kv-cache", "64MiB"];
  const refOut = path.join(tmp, `${name}.ref.jsonl`);
  deepinfer([...common, "-q", "--output", refOut]);
  const want = normalize(fs.readFileSync(refOut, "utf8"));
  check(want.length === lines.length && want.every(l => !l.includes('"error"')), `${name}: one process, ${want.length} results`);
  for (const [np, par] of configs) {
    const out = path.join(tmp, `${name}.${np}.jsonl`);
    const label = `${name} generate -np ${np} ${par.join(" ")}`;
    const r = mpirun(np, [...common, ...par, "--output", out]);
    if (r.status !== 0) {
      check(false, `${label}: exit ${r.status}: ${r.stderr.slice(-600)}`);
      continue;
    }
    const got = normalize(fs.readFileSync(out, "utf8"));
    const diff = want.findIndex((l, i) => got[i] !== l);
    check(got.length === want.length && diff < 0, `${label}: ${got.length} results bitwise equal to one process` +
          (diff >= 0 ? ` (first difference: line ${diff + 1})` : ""));
    const w = work(r.stderr);
    const cp = Number(par[par.indexOf("--cp") + 1]);
    check(w.size === np, `${label}: every rank logs its attention work (${w.size} of ${np})`);
    // Within each attention group (consecutive ranks when tp = 1).
    for (let g = 0; g < np / cp && w.size === np; ++g) {
      const {max, min} = spread(Array.from({length: cp}, (_, i) => w.get(g * cp + i)));
      check(max <= 1.05 && min >= 0.95, `${label}: group ${g} attention work within 5% (max ${max.toFixed(3)}, min ${min.toFixed(3)} of the mean)`);
    }
  }
}

// 4: a bf16 cache: K/V rows are exchanged as stored (bf16, converted by their owner), so the cache, and with it
// every output, is bitwise one process's with the same cache dtype, for half the f32 exchange.
{
  const model = path.join(tmp, "llama");
  // Every rank logs what it sent; a missing line is a failure (never "no data, no check").
  const exchanged = stderr => [...stderr.matchAll(/rank (\d+) \(cp \d+\/\d+\): .*context-parallel K\/V exchange sent ([0-9.]+) MB/g)]
      .reduce((a, m) => ({ranks: a.ranks.add(m[1]), mb: a.mb + Number(m[2])}), {ranks: new Set(), mb: 0});
  const base = ["generate", "-m", model, "--input", input, "--max-batched-tokens", "512", "--kv-cache", "64MiB"];
  const mb = {};
  let want;
  for (const dt of ["bf16", "f32"]) {
    const refOut = path.join(tmp, `bf16.ref.${dt}.jsonl`), out = path.join(tmp, `bf16.${dt}.jsonl`);
    const args = [...base, "--kv-cache-dtype", dt];
    if (dt === "bf16") {
      deepinfer([...args, "-q", "--output", refOut]);
      want = normalize(fs.readFileSync(refOut, "utf8"));
    }
    const r = mpirun(2, [...args, "--cp", "2", "--output", out]);
    if (r.status !== 0) {
      check(false, `llama --kv-cache-dtype ${dt} --cp 2: exit ${r.status}: ${r.stderr.slice(-600)}`);
      continue;
    }
    const ex = exchanged(r.stderr);
    check(ex.ranks.size === 2 && ex.mb > 0, `llama --kv-cache-dtype ${dt} --cp 2: both ranks log their K/V exchange ` +
          `(${ex.ranks.size} of 2 ranks, ${ex.mb.toFixed(3)} MB)`);
    if (ex.ranks.size === 2) mb[dt] = ex.mb;
    if (dt === "bf16") {
      const got = normalize(fs.readFileSync(out, "utf8"));
      const diff = want.findIndex((l, i) => got[i] !== l);
      check(got.length === want.length && diff < 0, `llama generate -np 2 --cp 2 --kv-cache-dtype bf16: ${got.length} results bitwise equal to one process with a bf16 cache` +
            (diff >= 0 ? ` (first difference: line ${diff + 1})` : ""));
    }
  }
  // Always checked: a run or a log line that is missing leaves a NaN ratio, which fails.
  const ratio = (mb.bf16 ?? NaN) / (mb.f32 ?? NaN);
  check(ratio > 0.45 && ratio < 0.55, `--cp 2 K/V exchange: bf16 cache ${mb.bf16?.toFixed(3)} MB vs f32 ${mb.f32?.toFixed(3)} MB ` +
        `(ratio ${ratio.toFixed(3)}, expected ~0.5)`);
}

fs.rmSync(tmp, {recursive: true, force: true});
console.log(failures ? `${failures} failure(s)` : "context parallelism: all checks passed");
process.exit(failures ? 1 : 0);
