// Speculative decoding end to end, through the binary: generate --json (tokens equal to plain decoding, the
// "speculative" field), a JSONL batch, the server with the official openai SDK (streamed text equal to a plain
// server's, spec_decode metrics that add up), and start-up errors for bad configurations (exit code 1 and a
// message naming the problem).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {OpenAI, checker, metrics, sharedModels, startServer} from "../server/common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const stories = path.join(sharedModels, "stories260K.gguf");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-spec-"));
const run = args => spawnSync(bin, args, {encoding: "utf8", env: {...process.env, DEEPINFER_NO_PROGRESS: "1"}});

const gen = (extra, seed) => {
  const r = run(["generate", "-m", stories, "-p", "Once upon a time", "-n", "150", "--temp", seed ? "0.8" : "0",
                 "--seed", String(seed ?? 1), "--json", "-q", ...extra]);
  if (r.status !== 0) return {error: r.stderr};
  return JSON.parse(r.stdout);
};
for (const seed of [null, 7]) {
  const plain = gen([], seed);
  const what = seed ? `seed ${seed}` : "greedy";
  for (const spec of [["--speculative", "ngram", "--num-speculative-tokens", "5"],
                      ["--speculative", "draft", "--draft-model", stories],
                      ["--speculative", "draft", "--draft-model", stories, "--no-overlap"]]) {
    const s = gen(spec, seed);
    check(!s.error && JSON.stringify(s.token_ids) === JSON.stringify(plain.token_ids) && s.text === plain.text,
          `${what} ${spec.join(" ")}: same tokens and text as plain decoding ${s.error ?? ""}`);
    const sp = s.speculative ?? {};
    check(sp.method === spec[1] && sp.proposed > 0 && sp.accepted >= 0 && sp.accepted <= sp.proposed,
          `--json speculative ${JSON.stringify(sp)}`);
    if (spec[1] === "draft") check(sp.accepted === sp.proposed, "self-draft: every draft accepted");
  }
  check(plain.speculative === undefined, "no speculative field without --speculative");
}

// JSONL batch: per-line results equal to a plain batch, with per-line counters.
{
  const lines = [];
  for (let i = 0; i < 24; ++i)
    lines.push(JSON.stringify({prompt: ["Once upon a time", "Lily and Tom", "The cat"][i % 3], max_tokens: 20 + i * 3,
                               temperature: i % 2 ? 0.7 : 0, seed: i, n: 1 + (i % 4 === 0), stop: i % 5 ? undefined : ["."],
                               num_speculative_tokens: i % 6 === 0 ? 0 : undefined}));
  const input = path.join(dir, "in.jsonl");
  fs.writeFileSync(input, lines.join("\n") + "\n");
  const outPlain = path.join(dir, "plain.jsonl"), outSpec = path.join(dir, "spec.jsonl");
  const a = run(["generate", "-m", stories, "--input", input, "--output", outPlain, "-q"]);
  const b = run(["generate", "-m", stories, "--input", input, "--output", outSpec, "-q", "--speculative", "ngram"]);
  check(a.status === 0 && b.status === 0, `batch runs exit 0 ${a.stderr}${b.stderr}`);
  const pa = fs.readFileSync(outPlain, "utf8").trim().split("\n").map(l => JSON.parse(l));
  const pb = fs.readFileSync(outSpec, "utf8").trim().split("\n").map(l => JSON.parse(l));
  const strip = o => JSON.stringify(o.choices.map(c => [c.text, c.token_ids, c.finish_reason]));
  check(pa.length === 24 && pb.length === 24 && pa.every((o, i) => strip(o) === strip(pb[i])), "batch: same choices per line");
  check(pb.every(o => o.speculative?.method === "ngram"), "batch: every line has a speculative field");
  check(pb.filter((o, i) => i % 6 === 0).every(o => o.speculative.proposed === 0), "num_speculative_tokens 0 turns it off per line");
}

// Server: the openai SDK streams the same text from a speculating server as from a plain one.
{
  const plain = await startServer(bin, []);
  const spec = await startServer(bin, ["--speculative", "draft", "--draft-model", stories, "--num-speculative-tokens", "4"]);
  const texts = [];
  for (const srv of [plain, spec]) {
    const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x"});
    const got = [];
    for (const [i, prompt] of ["Once upon a time", "Tom had a red ball", "The sun"].entries()) {
      const stream = await client.completions.create({model: "stories260K.gguf", prompt, max_tokens: 60, temperature: i ? 0.9 : 0,
                                                      seed: 11 + i, stream: true, stop: i === 2 ? ["park"] : undefined});
      let text = "", events = 0, finish = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.text ?? "";
        events++;
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      got.push({text, finish, events});
    }
    texts.push(got);
  }
  for (let i = 0; i < 3; ++i)
    check(texts[0][i].text === texts[1][i].text && texts[0][i].finish === texts[1][i].finish,
          `stream ${i}: same text and finish_reason (${JSON.stringify(texts[1][i].text.slice(0, 40))}...)`);
  const m = await metrics(spec.base);
  const drafts = m.get("deepinfer_spec_decode_num_drafts_total"), proposed = m.get("deepinfer_spec_decode_num_draft_tokens_total");
  const accepted = m.get("deepinfer_spec_decode_num_accepted_tokens_total");
  const count = m.get("deepinfer_spec_decode_accepted_length_count"), sum = m.get("deepinfer_spec_decode_accepted_length_sum");
  check(drafts > 10 && proposed >= drafts && accepted === proposed, `metrics: ${drafts} verify rows, ${proposed} drafts, ${accepted} accepted (self-draft)`);
  check(count === drafts && sum === accepted, "accepted-length histogram count/sum agree with the counters");
  const bad = await fetch(`${spec.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                         body: JSON.stringify({prompt: "x", num_speculative_tokens: 40})});
  check(bad.status === 400 && (await bad.text()).includes("num_speculative_tokens"), "num_speculative_tokens out of range: 400");
  check(await plain.stop() === 0 && await spec.stop() === 0, "both servers shut down clean (leak check)");
}

// Start-up errors.
{
  const tiny = path.join(dir, "tiny");
  run(["make-tiny", "--arch", "llama", "--vocab", "300", "--out", tiny, "-q"]);
  const cases = [
    [["--speculative", "draft", "--draft-model", path.join(tiny, "model.gguf")], "vocabulary"],
    [["--speculative", "draft"], "--draft-model"],
    [["--speculative", "mtp"], "MTP"],
    [["--speculative", "ngram", "--num-speculative-tokens", "0"], "--num-speculative-tokens"],
    [["--speculative", "medusa"], "--speculative"],
    [["--num-speculative-tokens", "3"], "needs --speculative"],
    [["--speculative", "ngram", "--spec-verify", "maybe"], "--spec-verify"],
  ];
  for (const [args, want] of cases) {
    const r = run(["generate", "-m", stories, "-p", "hi", "-n", "4", ...args]);
    check(r.status !== 0 && r.stderr.includes(want), `${args.join(" ")}: exit ${r.status}, message names '${want}'`);
  }
}

fs.rmSync(dir, {recursive: true, force: true});
done("speculative");
