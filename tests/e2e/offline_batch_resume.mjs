// Must-show 7 of issue 15: an offline batch (2,100 lines) killed with SIGKILL mid-run keeps every line finished
// before the kill, in input order and valid JSON (a byte prefix of an uninterrupted run's file), and --resume
// completes the file byte-identically to the uninterrupted run. Seeded lines make each line's result independent
// of which other lines share its batches, so the comparison is exact.
import {spawn, spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const bin = process.argv[2];
const here = path.dirname(fileURLToPath(import.meta.url));
const shared = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(here, "../../../shared/models");
const model = path.join(shared, "stories260K.gguf");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-resume-"));
let failures = 0;
const check = (ok, msg) => { console.log(`${ok ? "ok  " : "FAIL"} ${msg}`); if (!ok) ++failures; };
const env = {...process.env, DEEPINFER_NO_PROGRESS: "1"};

const N = 2100;
const words = ["Once upon a time", "The little dog", "Lily saw", "A big red ball", "The cat and the bird"];
const input = path.join(dir, "in.jsonl");
fs.writeFileSync(input, Array.from({length: N}, (_, i) =>
  JSON.stringify({prompt: `${words[i % 5]} ${i}`, max_tokens: 4 + i % 5, temperature: 0.8, seed: i})).join("\n") + "\n");
const args = out => ["generate", "-m", model, "--input", input, "--output", out, "-q", "--max-num-seqs", "256"];

const full = path.join(dir, "full.jsonl"), part = path.join(dir, "part.jsonl");
const a = spawnSync(bin, args(full), {env, encoding: "utf8"});
check(a.status === 0, `uninterrupted run exits 0 ${a.stderr.slice(-200)}`);
const fullText = fs.readFileSync(full, "utf8");
check(fullText.split("\n").length === N + 1, `uninterrupted run: ${N} lines`);

// Killed once at least 200 lines are out: the file must hold a prefix of the full run.
const proc = spawn(bin, args(part), {env, stdio: "ignore"});
const exited = new Promise(resolve => proc.once("exit", (code, sig) => resolve(sig)));
let lines = 0;
for (const t0 = Date.now(); Date.now() - t0 < 60000; ) {
  await new Promise(r => setTimeout(r, 10));
  lines = fs.existsSync(part) ? fs.readFileSync(part, "utf8").split("\n").length - 1 : 0;
  if (lines >= 200) break;
}
proc.kill("SIGKILL");
const sig = await exited;
const partText = fs.readFileSync(part, "utf8");
const complete = partText.slice(0, partText.lastIndexOf("\n") + 1);
const kept = complete.split("\n").length - 1;
check(sig === "SIGKILL" && kept >= 200 && kept < N, `killed mid-run (${sig}) with ${kept} of ${N} lines written`);
check(fullText.startsWith(complete), "the killed run's lines are a prefix of the uninterrupted run's, in order");
check(complete.split("\n").slice(0, -1).every(l => { try { JSON.parse(l); return true; } catch { return false; } }),
      "every kept line is valid JSON");

const r = spawnSync(bin, [...args(part), "--resume"], {env, encoding: "utf8"});
check(r.status === 0, `--resume exits 0 ${r.stderr.slice(-200)}`);
check(fs.readFileSync(part, "utf8") === fullText, "--resume completes the file identically to the uninterrupted run");
// Resuming a complete file runs nothing and changes nothing; a torn last line is redone.
fs.writeFileSync(part, fullText.slice(0, fullText.length - 25));
const t = spawnSync(bin, [...args(part), "--resume"], {env, encoding: "utf8"});
check(t.status === 0 && fs.readFileSync(part, "utf8") === fullText, "--resume after a torn last line redoes it");
const z = spawnSync(bin, [...args(part), "--resume"], {env, encoding: "utf8"});
check(z.status === 0 && fs.readFileSync(part, "utf8") === fullText, "--resume of a complete file leaves it as it is");
fs.writeFileSync(path.join(dir, "short.jsonl"), fullText.split("\n").slice(0, 3).join("\n") + "\n");
const bad = spawnSync(bin, ["generate", "-m", model, "--input", path.join(dir, "short.jsonl"), "--output", part, "-q", "--resume"], {env, encoding: "utf8"});
check(bad.status !== 0 && /--resume/.test(bad.stderr), `--resume with more results than requests fails: ${bad.stderr.trim().slice(-120)}`);
fs.rmSync(dir, {recursive: true, force: true});
console.log(failures ? `${failures} check(s) failed` : "offline batch resume checks passed");
process.exit(failures ? 1 : 0);
