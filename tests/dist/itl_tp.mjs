// The latency target (--target-itl-ms) under --tp / --cp > 1 (issue 37). The ranks of an attention group run
// identical schedulers without exchanging schedules, and the target sizes each step's prefill from a fit of step
// times: every rank of the group must fit the same times, its group leader's (engine/dist_control.h), or their
// budgets differ and the group's schedules split (a hang, an abort or wrong tokens).
//
// `generate --input` of 8 decoding streams (128 tokens each, greedy and seeded sampling, log-probs) and 8
// 300-token prompts on a tiny llama, under mpirun with a 0.5 ms target, and with the test hook
// DEEPINFER_TEST_SKEW_STEP_TIME=RANK:0.001 making one follower's clock read a thousand times faster than its
// leader's (without sharing, that rank would see cheap steps and give prompts far more tokens per step than its
// leader). --max-num-seqs lets the streams and one or two prompts in at a time: steps of different sizes (full
// prefill steps, then decode-only ones while a prompt's 4 tokens come out) warm the fit up, and the prompts
// admitted after that are chunked by the target next to the streams (16-40 tokens a step here instead of 120).
// Each case must:
//   - finish (no hang: every run has a timeout) with exit 0;
//   - print outputs bitwise equal to the untargeted run of the same split: at --cp 2 that is one process's
//     (context parallelism changes no arithmetic, tests/dist/cp_prefill.mjs), at --tp 2 the untargeted --tp 2
//     run's (tensor parallelism reorders the o_proj/down sums, tests/dist/tp_logprobs.mjs; token ids are still
//     checked against one process);
//   - have every rank log its group leader's fit, bit for bit (%a), and the same step counts, with steps whose
//     prefill the target cut (> 0: it really limited prompts), and the skewed rank say the hook is on.
// Breaking the sharing (each rank observing its own clock in Engine::Process) fails every case.
//   node tests/dist/itl_tp.mjs BIN
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {checkVocabCoverage, makeRng} from "../common/rng.mjs";

const bin = path.resolve(process.argv[2]);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-itl-tp-"));
const env = {...process.env, OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1", DEEPINFER_NO_PROGRESS: "1",
             OMPI_MCA_rmaps_base_oversubscribe: "1"};
delete env.DEEPINFER_TEST_SKEW_STEP_TIME;
let failures = 0;
const check = (ok, msg) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${msg}`);
  if (!ok) ++failures;
};
// A run that hangs (split schedules wait on each other's collectives) is killed at 20 s; a healthy one takes ~1 s.
const run = (cmd, args, extraEnv = {}) => {
  const r = spawnSync(cmd, args, {env: {...env, ...extraEnv}, encoding: "utf8", maxBuffer: 1 << 28, timeout: 20000,
                                  killSignal: "SIGKILL"});
  return {status: r.status, stdout: r.stdout ?? "", stderr: (r.stderr ?? "") + (r.error ? String(r.error) : "")};
};

const model = path.join(tmp, "llama");
const mk = run(bin, ["make-tiny", "--out", model, "-q", "--arch", "llama"]);
if (mk.status !== 0) throw new Error(`make-tiny: ${mk.stderr.slice(-400)}`);

const {range} = makeRng(37);
const lines = [];
for (let i = 0; i < 8; ++i)  // decoding streams: their rows are what the target protects
  lines.push({prompt: Array.from({length: 6 + i}, () => range(3, 509)), max_tokens: 128, ignore_eos: true,
              ...(i % 2 ? {temperature: 0.8, seed: i, top_k: 40} : {temperature: 0}), logprobs: 2});
for (let i = 0; i < 8; ++i)  // long prompts, chunked under the target while the streams decode
  lines.push({prompt: Array.from({length: 300}, () => range(3, 509)), max_tokens: 4, ignore_eos: true, temperature: 0, logprobs: 1});
checkVocabCoverage(lines.flatMap(l => l.prompt), 512, "request prompts");
const input = path.join(tmp, "in.jsonl");
fs.writeFileSync(input, lines.map(l => JSON.stringify(l)).join("\n") + "\n");

const common = ["generate", "-m", path.join(model, "model.gguf"), "--input", input, "--max-batched-tokens", "128",
                "--threads", "1"];
function generate(label, launcher, args, extraEnv) {
  const out = path.join(tmp, `${label.replace(/\W+/g, "_")}.jsonl`);
  const r = launcher === null ? run(bin, [...common, ...args, "--output", out], extraEnv)
                              : run("mpirun", ["--oversubscribe", "-np", String(launcher), bin, ...common, ...args, "--output", out], extraEnv);
  const ok = r.status === 0;
  check(ok, `${label}: exit ${r.status}${ok ? "" : `: ${r.stderr.slice(-1500)}`}`);
  return {ok, text: ok ? fs.readFileSync(out, "utf8") : "", stderr: r.stderr};
}
const ids = text => text.trim().split("\n").map(l => JSON.stringify(JSON.parse(l).token_ids));

const one = generate("one process, no target", null, ["-q"]);
if (!one.ok) process.exit(1);
check(one.text.trim().split("\n").length === lines.length && !one.text.includes('"error"'),
      `one process: ${lines.length} results, none an error`);

// 0.5 ms: a few KV blocks of prefill next to the streams on a CPU (a target the decode rows alone exceed gives
// every rank one block whatever its clock says; this one depends on the fit). The skewed rank's own clock would
// let whole 120-token chunks through.
const TARGET = ["--target-itl-ms", "0.5"];
const cases = [
  {split: ["--tp", "2", "--max-num-seqs", "10"], np: 2, skew: 1, ref: "tp"},
  {split: ["--cp", "2", "--max-num-seqs", "10"], np: 2, skew: 1, ref: "one"},
  // Two groups of two (4 streams and 4 prompts each): group 1's leader is rank 2; rank 3 follows it, skewed.
  // Without the overlap loop (each step processed in the iteration that launched it).
  {split: ["--dp", "2", "--tp", "2", "--no-overlap", "--max-num-seqs", "5"], np: 4, skew: 3, ref: "tp"},
];
let tpRef = null;
for (const c of cases) {
  const name = `-np ${c.np} ${c.split.slice(0, -2).join(" ")}`;
  let want = one.text;
  if (c.ref === "tp") {
    if (tpRef === null) {
      const r = generate("-np 2 --tp 2, no target", 2, ["--tp", "2", "-q"]);
      if (!r.ok) continue;
      tpRef = r.text;
      check(JSON.stringify(ids(tpRef)) === JSON.stringify(ids(one.text)), "--tp 2, no target: token ids equal to one process");
    }
    want = tpRef;
  }
  const label = `${name} --target-itl-ms 0.5, rank ${c.skew}'s clock x0.001`;
  const r = generate(label, c.np, [...c.split, ...TARGET], {DEEPINFER_TEST_SKEW_STEP_TIME: `${c.skew}:0.001`});
  if (!r.ok) continue;
  check(r.text === want, `${label}: outputs bitwise equal to the ${c.ref === "tp" ? "untargeted --tp 2 run" : "one-process run"}`);
  check(JSON.stringify(ids(r.text)) === JSON.stringify(ids(one.text)), `${label}: token ids equal to one process`);
  check(new RegExp(`rank ${c.skew}'s step times are multiplied by 0.001`).test(r.stderr), `${label}: the skew hook is on`);
  // "latency target: rank R: S steps timed, fit ...; L of T steps limited, C of them with their prefill cut to
  // the limit", one per rank.
  const fits = new Map();
  for (const m of r.stderr.matchAll(/latency target: rank (\d+): (.*; (\d+) of (\d+) steps limited, (\d+) of them .*)/g))
    fits.set(Number(m[1]), {text: m[2], limited: Number(m[3]), steps: Number(m[4]), cut: Number(m[5])});
  check(fits.size === c.np, `${label}: ${fits.size} of ${c.np} ranks logged their fit`);
  const groupSize = c.np / (c.split.includes("--dp") ? 2 : 1);
  for (const [rank, f] of fits) {
    const leader = fits.get(rank - (rank % groupSize));
    check(leader && f.text === leader.text,
          `${label}: rank ${rank}'s fit and limits equal its leader's bit for bit (${f.text}${leader && f.text !== leader.text ? ` vs ${leader.text}` : ""})`);
    check(f.cut > 0, `${label}: rank ${rank}: the target cut the prefill of ${f.cut} of ${f.steps} steps`);
  }
}

fs.rmSync(tmp, {recursive: true, force: true});
process.exit(failures ? 1 : 0);
