// Must-show 6 and 7 of the MoE-parallelism issue. A rank that dies (SIGKILL) or hangs (SIGSTOP, with a request in
// flight or while idle) ends the job on every rank within a bounded time, with a non-zero exit and the rank named;
// meanwhile the server answers 503. Bad layouts,
// indivisible heads or experts, and ranks started with different model files are refused on every rank before
// any work starts.
import {spawn, spawnSync, execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, sharedModels, checker} from "../server/common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const env = {...process.env, DEEPINFER_NO_PROGRESS: "1", OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1"};
const stories = path.join(sharedModels, "stories260K.gguf");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-faults-"));
const children = pid => execFileSync("pgrep", ["-P", String(pid)], {encoding: "utf8"}).trim().split("\n").map(Number);
const exited = proc => new Promise(resolve => proc.once("exit", (code, sig) => resolve({code, sig, t: Date.now()})));

// 1. A rank dies: mpirun notices and ends the job.
{
  process.env.DEEPINFER_SERVE_MPI = "2";
  process.env.DEEPINFER_SERVE_ARGS = "--dp 2 --ep 2";
  const srv = await startServer(bin);
  const rank0 = children(srv.proc.pid).length;  // (two ranks under mpirun)
  const kids = children(srv.proc.pid);
  // rank 0 printed its pid in the "listening" line; the other child is rank 1.
  const r0 = await fetch(`${srv.base}/health`).then(() => true);
  const victim = kids.find(p => p !== srv.pidOfRank0);
  const t0 = Date.now();
  const end = exited(srv.proc);
  process.kill(victim, "SIGKILL");
  const {code, t} = await end;
  const secs = (t - t0) / 1000;
  check(rank0 === 2 && r0 && code !== 0 && secs < 15, `rank 1 killed: the job ends with exit ${code} after ${secs.toFixed(1)} s (bound 15 s)`);
  check(/process rank 1 .*exited on signal 9/.test(srv.log()), `the rank is named (${(srv.log().match(/.*process rank 1.*/) ?? [""])[0].slice(0, 160)})`);
}
// 2. A rank hangs with work in flight: the others time out (--dist-timeout 3) and abort, naming it.
{
  process.env.DEEPINFER_SERVE_ARGS = "--dp 2 --ep 2 --dist-timeout 3";
  const srv = await startServer(bin);
  const victim = children(srv.proc.pid).find(p => p !== srv.pidOfRank0);
  process.kill(victim, "SIGSTOP");
  const t0 = Date.now();
  const end = exited(srv.proc);
  // Requests for both groups: rank 0 needs rank 1 at the next control sync. Their prompts make the control message
  // larger than MPI's eager limit, so rank 0 may be left waiting on its own send (not a receive): the rank must be
  // named either way.
  const reqs = Array.from({length: 16}, (_, i) => fetch(`${srv.base}/v1/completions`, {method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt: `Hi ${i}, ` + "once upon a time there was a cat. ".repeat(30), max_tokens: 64})}).catch(() => null));
  const {code, t} = await end;
  await Promise.all(reqs);
  const secs = (t - t0) / 1000;
  check(code !== 0 && secs < 3 + 15, `rank 1 stopped: the job ends with exit ${code} after ${secs.toFixed(1)} s (timeout 3 s + 15 s bound)`);
  check(/waited 3 s for rank\(s\) 1/.test(srv.log()), `the hung rank is named (${(srv.log().match(/.*waited.*/) ?? [""])[0].slice(0, 200)})`);
}
// 2b. A rank hangs while the engine is idle: the heartbeat round, or rank 0's idle iteration (four a second under
// --dp, which ships the groups' KV events), notices; the server answers 503 meanwhile (health and new requests),
// and the job ends at --dist-timeout naming the rank.
{
  process.env.DEEPINFER_SERVE_ARGS = "--dp 2 --ep 2 --dist-timeout 8";
  const srv = await startServer(bin);
  const healthy = (await fetch(`${srv.base}/health`)).status;
  const victim = children(srv.proc.pid).find(p => p !== srv.pidOfRank0);
  let exitedYet = false;
  const end = exited(srv.proc).then(r => (exitedYet = true, r));
  process.kill(victim, "SIGSTOP");
  const t0 = Date.now();
  let health503 = null, completion503 = null;
  while (!exitedYet && Date.now() - t0 < 30000) {
    await new Promise(r => setTimeout(r, 500));
    const h = await fetch(`${srv.base}/health`).catch(() => null);
    if (h?.status === 503 && health503 === null) {
      health503 = (Date.now() - t0) / 1000;
      const c = await fetch(`${srv.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({prompt: "Hi", max_tokens: 4})}).catch(() => null);
      completion503 = c ? `${c.status} ${JSON.stringify((await c.json()).error?.message ?? "").slice(0, 100)}` : "no answer";
    }
  }
  const {code, t} = await end;
  const secs = (t - t0) / 1000;
  check(healthy === 200 && health503 !== null && health503 < 8, `idle rank 1 stopped: /health 503 after ${health503} s (before the 8 s timeout)`);
  check(/^503 .*not answered/.test(completion503 ?? ""), `a new completion meanwhile: ${completion503}`);
  check(code !== 0 && secs < 8 + 15, `idle rank 1 stopped: the job ends with exit ${code} after ${secs.toFixed(1)} s (timeout 8 s + 15 s bound)`);
  check(/(heartbeat|control [a-z-]+).*waited 8 s for rank\(s\) 1/.test(srv.log()), `the hung rank is named (${(srv.log().match(/.*waited.*/) ?? [""])[0].slice(0, 200)})`);
  try { process.kill(victim, "SIGKILL"); } catch {}
}
// 3. Refusals, on every rank, before any work.
const mpirun = args => spawnSync("mpirun", ["--oversubscribe", ...args], {env, encoding: "utf8", timeout: 60000});
const everyRank = (r, np, re) => (r.stderr.match(new RegExp(re.source, "g")) ?? []).length >= np;
{
  const r = mpirun(["-np", "2", bin, "generate", "-m", stories, "-p", "x", "-n", "2", "--dp", "3"]);
  check(r.status !== 0 && everyRank(r, 2, /error: invalid argument: --dp 3 x --cp 1 does not divide the job's 2 ranks/), `--dp 3 on 2 ranks refused on both (${r.stderr.trim().split("\n")[0]})`);
  const p = mpirun(["-np", "2", bin, "generate", "-m", stories, "-p", "x", "-n", "2", "--dp", "2", "--tp", "2"]);
  check(p.status !== 0 && everyRank(p, 2, /error: invalid argument: --dp 2 x --cp 1 x --tp 2 = 4 attention ranks, but the job has 2/),
        `--dp 2 --tp 2 on 2 ranks refused on both (${p.stderr.trim().split("\n")[0]})`);
  const h = mpirun(["-np", "3", bin, "generate", "-m", stories, "-p", "x", "-n", "2", "--tp", "3"]);
  check(h.status !== 0 && everyRank(h, 3, /error: invalid argument: --tp 3: the model's 8 attention heads do not split 3 ways/), `--tp 3 with 8 heads refused on all 3 ranks (${h.stderr.trim().split("\n").find(l => l.includes("error")) ?? ""})`);
  const moe = path.join(dir, "moe");
  spawnSync(bin, ["make-tiny", "--arch", "qwen3_moe", "--out", moe, "-q", "--experts", "8"], {env});
  const e = mpirun(["-np", "3", bin, "generate", "-m", path.join(moe, "model.gguf"), "-p", "x", "-n", "2", "--dp", "3"]);
  check(e.status !== 0 && everyRank(e, 3, /error: invalid argument: --ep 3: the model's 8 routed experts do not split 3 ways/), `8 experts over --ep 3 refused on all ranks (${e.stderr.trim().split("\n").find(l => l.includes("error")) ?? ""})`);
  const other = path.join(dir, "moe2");
  spawnSync(bin, ["make-tiny", "--arch", "qwen3_moe", "--out", other, "-q", "--experts", "8", "--seed", "2"], {env});
  const m = spawnSync("mpirun", ["--oversubscribe", "-np", "1", bin, "generate", "-m", path.join(moe, "model.gguf"), "-p", "x", "-n", "2", "--dp", "2",
                                 ":", "-np", "1", bin, "generate", "-m", path.join(other, "model.gguf"), "-p", "x", "-n", "2", "--dp", "2"],
                      {env, encoding: "utf8", timeout: 60000});
  check(m.status !== 0 && everyRank(m, 2, /loaded a different model file than rank 0/), `ranks with different model files refused on both (${m.stderr.trim().split("\n").find(l => l.includes("error")) ?? ""})`);
}
fs.rmSync(dir, {recursive: true, force: true});
done("rank_faults");
