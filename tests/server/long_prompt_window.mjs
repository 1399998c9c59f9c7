// A valid 1 MB prompt on a sliding-window model through `deepinfer serve` (issue 32: a long sequence's windowed
// memory stays bounded; the brief: the large valid inputs, and one client never holding up the others).
// The model: make-tiny's Mistral 7B v0.1 layout, every layer windowed (64), a 2M-token context, so the prompt
// (~1M characters of words, ~700k tokens) fits and is really computed.
// - the long completion succeeds (200, its prompt_tokens counted);
// - the pool's blocks in use (/metrics, polled the whole time) stay within what the window and the chunks in flight
//   need plus the short requests' blocks (BOUND), never what the prompt's length would (one block per 16 tokens);
//   with --swa-full (every position kept) the same run goes past BOUND at once (checked once by hand);
// - short streaming completions sent while the long prompt is being prefilled finish before it does.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, metrics, checker} from "./common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const extra = process.argv.slice(3);  // e.g. --swa-full, to see the bound fail
const {check, done} = checker();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-long-window-"));
const model = path.join(dir, "m.gguf");
const W = 64, BS = 16, CHUNK = 512;
const mk = spawnSync(bin, ["make-tiny", "--arch", "mistral", "--window", String(W), "--ctx", "2000000", "--format", "gguf",
                           "--out", model, "-q", "--seed", "5"], {encoding: "utf8"});
check(mk.status === 0, `make-tiny mistral --window ${W}: ${mk.stderr.trim().slice(0, 120)}`);

// ~1 MB of words in a seeded order.
const rng = makeRng(2024);
const words = ["once", "upon", "a", "time", "there", "was", "little", "girl", "who", "liked", "to", "play", "in", "the", "park", "."];
let prompt = "";
while (prompt.length < (1 << 20) - 16) prompt += rng.pick(words) + " ";

const srv = await startServer(bin, ["-m", model, "--max-prompt-bytes", "2000000", "--block-size", String(BS),
                                    "--max-batched-tokens", String(CHUNK), ...extra]);
try {
  const post = body => fetch(`${srv.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                              body: JSON.stringify(body)});
  let bigDone = false, maxInUse = 0, polls = 0;
  const order = [];
  const big = post({prompt, max_tokens: 4, ignore_eos: true}).then(async r => {
    const body = await r.json();
    bigDone = true;
    order.push("long");
    return [r.status, body];
  });
  const sample = async () => {
    const m = await metrics(srv.base);
    const used = m.get("deepinfer_kv_cache_blocks_total") - m.get("deepinfer_kv_cache_blocks_free");
    maxInUse = Math.max(maxInUse, used);
    ++polls;
    return used;
  };
  // Wait until the long prompt holds blocks (tokenized and prefilling), then send the short ones.
  for (let i = 0; i < 600 && !bigDone && (await sample()) === 0; ++i) await new Promise(r => setTimeout(r, 25));
  const shortOnes = [0, 1, 2].map(i => post({prompt: `Once upon a time ${i}`, max_tokens: 16, ignore_eos: true, stream: true})
    .then(async r => { await r.text(); order.push(`short ${i}`); return r.status; }));
  while (!bigDone) {
    await sample();
    await new Promise(r => setTimeout(r, 50));
  }
  const [status, body] = await big;
  const shortStatus = await Promise.all(shortOnes);
  const promptTokens = body.usage?.prompt_tokens ?? 0;
  check(status === 200 && promptTokens > 200000,
        `1 MB prompt completed: ${status}, ${promptTokens} prompt tokens, ${body.usage?.completion_tokens} generated`);
  // Per sequence: ceil((W + 2 chunks + bs - 2) / bs) blocks for the window and the chunks in flight (overlap
  // scheduler), the short ones' whole sequences, and a block of slack per sequence for the step's own allocation.
  const perLong = Math.ceil((W + 2 * CHUNK + BS - 2) / BS) + 1;
  const BOUND = perLong + 3 * (Math.ceil((16 + 32) / BS) + 1);
  check(polls >= 20 && maxInUse > 0 && maxInUse <= BOUND,
        `KV blocks in use peaked at ${maxInUse} over ${polls} polls (bound ${BOUND}; the prompt alone spans ` +
        `${Math.ceil(promptTokens / BS)} blocks)`);
  check(shortStatus.every(s => s === 200) && order.indexOf("long") === order.length - 1,
        `short completions sent during the long prefill finished first: ${order.join(", ")}`);
  // What the prefix cache holds afterwards: the requests' windows (every layer is windowed here), within the pool.
  const after = await metrics(srv.base);
  const cachedBlocks = after.get("deepinfer_kv_cache_blocks_cached");
  check(cachedBlocks > 0 && cachedBlocks <= after.get("deepinfer_kv_cache_blocks_total"),
        `/metrics deepinfer_kv_cache_blocks_cached: ${cachedBlocks} of ${after.get("deepinfer_kv_cache_blocks_total")} blocks`);
} finally {
  check(await srv.stop() === 0, "clean shutdown (leak check passed)");
  fs.rmSync(dir, {recursive: true, force: true});
}
done("long_prompt_window");
