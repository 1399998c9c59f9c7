// Offline JSONL mode end to end: results come back in input order, bad lines get an error line and lose nothing
// else, a greedy batch line equals the single-prompt run, n > 1 and logprobs are honoured, and --no-overlap
// gives byte-identical output.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const bin = process.argv[2];
const here = path.dirname(fileURLToPath(import.meta.url));
const shared = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(here, "../../../shared/models");
const model = path.join(shared, "stories260K.gguf");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-batch-"));
let failures = 0;
const check = (ok, msg) => { console.log(`${ok ? "ok  " : "FAIL"} ${msg}`); if (!ok) ++failures; };
const env = {...process.env, DEEPINFER_NO_PROGRESS: "1"};
const run = args => spawnSync(bin, args, {env, encoding: "utf8", maxBuffer: 1 << 28});

const lines = [
  {prompt: "Once upon a time", max_tokens: 40, temperature: 0},
  "{not json",
  {prompt: "The cat", max_tokens: 20, temperature: 0.8, seed: 7, n: 2, logprobs: 3},
  {prompt: "Hello", temperature: -1},
  {prompt: [1, 400, 401], max_tokens: 10, temperature: 0, stop: ["."]},
  {prompt: "Lily", max_tokens: 5000},
  {messages: [{role: "user", content: "Tell me a story."}], max_tokens: 12, temperature: 0},
  {messages: "not a list"},
];
const input = path.join(dir, "in.jsonl");
fs.writeFileSync(input, lines.map(l => typeof l === "string" ? l : JSON.stringify(l)).join("\n") + "\n");
const outA = path.join(dir, "a.jsonl"), outB = path.join(dir, "b.jsonl");
const a = run(["generate", "-m", model, "--input", input, "--output", outA, "-q", "--seed", "1"]);
check(a.status === 0, `batch run exits 0 (${a.stderr.trim().slice(-200)})`);
const b = run(["generate", "-m", model, "--input", input, "--output", outB, "-q", "--seed", "1", "--no-overlap"]);
check(b.status === 0, "batch run with --no-overlap exits 0");
const ra = fs.readFileSync(outA, "utf8").trim().split("\n").map(l => JSON.parse(l));
check(ra.length === lines.length, `one output line per input line (${ra.length})`);
check(fs.readFileSync(outA, "utf8") === fs.readFileSync(outB, "utf8"), "overlap on and off write identical files");
check(ra[1].error?.includes("line 2") && ra[1].error.includes("JSON"), `malformed line reported: ${ra[1].error}`);
check(ra[3].error?.includes("temperature"), `bad parameter reported: ${ra[3].error}`);
check(ra[5].finish_reason === "length" && ra[5].token_ids.length > 0, "max_tokens beyond the context is capped by it");
const single = JSON.parse(run(["generate", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "0", "--json"]).stdout);
check(ra[0].text === single.text && JSON.stringify(ra[0].token_ids) === JSON.stringify(single.token_ids),
      "greedy batch line equals the single-prompt run");
check(ra[2].choices.length === 2 && ra[2].choices.every(c => c.logprobs.length === c.token_ids.length &&
      c.logprobs.every(l => l.top_logprobs.length === 3)), "n=2 with 3 top logprobs per token");
check(JSON.stringify(ra[2].choices[0].token_ids) !== JSON.stringify(ra[2].choices[1].token_ids),
      "the two samples differ (independent random streams)");
check(ra[4].finish_reason === "stop" ? !ra[4].text.includes(".") : ra[4].token_ids.length === 10, "stop string honoured");
check(ra[6].token_ids?.length === 12 && ra[6].usage.prompt_tokens > 10, "chat messages through the chat template");
check(ra[7].error?.includes("messages"), `bad messages reported: ${ra[7].error}`);
check(ra[0].usage.prompt_tokens > 0 && ra[0].usage.completion_tokens === ra[0].token_ids.length, "usage counts");
fs.rmSync(dir, {recursive: true, force: true});
console.log(failures ? `${failures} check(s) failed` : "offline batch checks passed");
process.exit(failures ? 1 : 0);
