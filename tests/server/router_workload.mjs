// The multi-tenant workload of the router test (tests/server/router.mjs) and benchmark (bench/router.mjs):
// T tenants, each with its own long "system prompt" (a shared prefix), and requests that add a short question
// of their own; plus helpers to start `deepinfer route`, run the workload through a base URL with streamed
// completions (TTFT from the first token, cache hits from the replicas' own usage.prompt_tokens_details), and
// compute the ideal hit rate from the replicas' tokenization.
import {spawn} from "node:child_process";
import {makeRng} from "../common/rng.mjs";

const WORDS = ["once", "upon", "a", "time", "there", "was", "little", "girl", "boy", "who", "liked", "to", "play", "in",
               "the", "park", "with", "her", "his", "dog", "cat", "ball", "tree", "sun", "happy", "sad", "big", "small",
               "friend", "mom", "dad", "went", "saw", "said", "and", "they", "ran", "home", "day", "fun"];

// `phase` salts the start of every prompt, so two runs over the same replicas share no cached prefix.
export function makeWorkload({seed = 1, phase = "a", tenants = 8, requests = 120, prefixWords = 90, questionWords = 6} = {}) {
  const rng = makeRng(seed);
  const prefixes = [];
  for (let t = 0; t < tenants; ++t) {
    let p = `Story ${phase}${t}: `;
    for (let w = 0; w < prefixWords; ++w) p += rng.pick(WORDS) + " ";
    prefixes.push(p);
  }
  const items = [];
  for (let r = 0; r < requests; ++r) {
    const tenant = rng.int(tenants);
    let q = `Question ${r}:`;
    for (let w = 0; w < questionWords; ++w) q += " " + rng.pick(WORDS);
    items.push({tenant, prompt: prefixes[tenant] + q});
  }
  return items;
}

// `deepinfer route` on any free port over `replicas` (base URLs).
export async function startRouter(bin, replicas, extra = []) {
  const args = ["route", "--port", "0", ...replicas.flatMap(r => ["--replica", r]), ...extra];
  const proc = spawn(bin, args, {stdio: ["ignore", "pipe", "pipe"]});
  let log = "";
  proc.stderr.on("data", d => { log += d; });
  const port = await new Promise((resolve, reject) => {
    let out = "";
    proc.stdout.on("data", d => {
      out += d;
      const m = out.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    proc.on("exit", code => reject(new Error(`route exited early (${code}): ${log}`)));
  });
  return {
    proc, port, base: `http://127.0.0.1:${port}`, log: () => log,
    stop: () => new Promise(resolve => { proc.once("exit", c => resolve(c)); proc.kill("SIGTERM"); }),
  };
}

// One streamed completion: TTFT (ms to the first text), the replica's usage, which replica answered.
async function streamed(base, prompt, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/completions`, {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: {include_usage: true}}),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = "", ttft = null, usage = null;
  for await (const piece of r.body) {
    buf += dec.decode(piece, {stream: true});
    let nl;
    while ((nl = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6));
      if (j.error) throw new Error(`stream error: ${JSON.stringify(j.error)}`);
      if (ttft === null && j.choices?.length) ttft = performance.now() - t0;
      if (j.usage) usage = j.usage;
    }
  }
  return {ttft, prompt: usage?.prompt_tokens ?? 0, cached: usage?.prompt_tokens_details?.cached_tokens ?? 0,
          replica: r.headers.get("x-deepinfer-replica")};
}

// Runs `items` through `base` with `concurrency` clients; returns per-request results in order, hit rate
// (cached prompt tokens / prompt tokens, from the replicas' usage), mean TTFT and wall time.
export async function runWorkload(base, items, {concurrency = 4, maxTokens = 4} = {}) {
  const results = new Array(items.length);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({length: concurrency}, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = {...await streamed(base, items[i].prompt, maxTokens), tenant: items[i].tenant};
    }
  }));
  const wall = performance.now() - t0;
  const prompt = results.reduce((s, r) => s + r.prompt, 0), cached = results.reduce((s, r) => s + r.cached, 0);
  const ttft = results.reduce((s, r) => s + r.ttft, 0) / results.length;
  return {results, hitRate: cached / prompt, meanTtft: ttft, wall, prompt, cached};
}

// The best any routing can do with caches large enough: a tenant's first request misses, each later one reuses
// the whole KV blocks (`blockSize` tokens) it shares with an earlier request of its tenant. From the replica's
// own tokenizer (POST /tokenize), so it counts what the engine can cache.
export async function idealHitRate(tokenizeBase, items, blockSize = 16) {
  const ids = [];
  for (const it of items) {
    const r = await fetch(`${tokenizeBase}/tokenize`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                        body: JSON.stringify({prompt: it.prompt})});
    ids.push((await r.json()).tokens);
  }
  let prompt = 0, cached = 0;
  for (let i = 0; i < items.length; ++i) {
    prompt += ids[i].length;
    let best = 0;
    for (let j = 0; j < i; ++j) {
      if (items[j].tenant !== items[i].tenant) continue;
      let l = 0;
      while (l < ids[i].length - 1 && l < ids[j].length && ids[i][l] === ids[j][l]) ++l;  // the last token is always computed
      best = Math.max(best, l);
    }
    cached += Math.floor(best / blockSize) * blockSize;
  }
  return cached / prompt;
}
