// Must-show 3 of the server issue: at least 10,000 malformed or hostile requests (broken and fuzzed JSON, wrong
// types and values, invalid UTF-8, oversized bodies, header abuse, broken framing, random bytes, slowloris)
// get only 4xx answers or a closed connection; the server stays healthy and serves a normal request after
// every batch; the shutdown leak check passes at the end.
import net from "node:net";
import {startServer, checker, metrics} from "./common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const TOTAL = Number(process.argv[3] ?? 10000);
const {check, done} = checker();
const srv = await startServer(bin, ["--max-body", "65536", "--request-timeout", "1.5", "--max-num-seqs", "16"]);
const {int: rnd, pick} = makeRng(20261129);

// Sends raw bytes on a fresh connection; resolves with the status code (0 = closed without an answer).
function raw(bytes, {slowMs = 0, timeoutMs = 8000} = {}) {
  return new Promise(resolve => {
    const s = net.connect(srv.port, "127.0.0.1");
    let got = Buffer.alloc(0), settled = false;
    const finish = v => { if (!settled) { settled = true; s.destroy(); resolve(v); } };
    s.on("data", d => {
      got = Buffer.concat([got, d]);
      const m = got.toString("latin1").match(/^HTTP\/1\.1 (\d{3}) /);
      if (m) finish(Number(m[1]));
    });
    s.on("error", () => finish(0));
    s.on("close", () => finish(0));
    setTimeout(() => finish(-1), timeoutMs);  // -1: hung (a failure)
    s.on("connect", async () => {
      if (!slowMs) { s.write(bytes); return; }
      for (let i = 0; i < bytes.length && !settled; i += 3) {  // slowloris: a few bytes at a time
        s.write(bytes.subarray(i, i + 3));
        await new Promise(r => setTimeout(r, slowMs));
      }
    });
  });
}

const valid = {model: "stories260K.gguf", prompt: "Once upon a time", max_tokens: 4, temperature: 0.5, top_p: 0.9, n: 1,
               stop: ["."], logprobs: 1, seed: 1};
const post = (path, body, extra = "") =>
  Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`), Buffer.isBuffer(body) ? body : Buffer.from(body)]);
const badValues = {
  temperature: ["hot", -5, 1e39, [], {}], top_p: [0, 2, "x", -1], top_k: [-5, 1.5, "k"], min_p: [2, -1],
  max_tokens: [0, -1, 1.5, "10", 1e30], n: [0, -3, 1000, "2"], logprobs: [50, -3, "x"], seed: ["s", 1.5, {}],
  // (prompt [[1, 2]] is no bad value: a batch of one token-id prompt, answered 200)
  prompt: [5, [-1], [1e9], [[1, "2"]], [[[1]]], {}, true, []], stop: [5, [1], {}, Array(20).fill("x")], logit_bias: [{"x": 1}, {"1": "y"}, [1], {"5": 500}],
  presence_penalty: [9, "p"], frequency_penalty: [-9], repetition_penalty: [0, -1], stream: ["yes", 1], model: [7, "gpt-4"],
  stop_token_ids: [[-5], "x", [1e12]],
};
const chatBad = [{messages: "hi"}, {messages: []}, {messages: [{role: 5}]}, {messages: [{content: "x"}]},
                 {messages: [{role: "user", content: 5}]}, {messages: [{role: "user", content: [{type: "image_url"}]}]}, {}];
function fuzzBody() {
  const k = rnd(6);
  const body = {...valid};
  if (k === 0) {  // strict prefix of a JSON object: never valid
    const s = JSON.stringify(body);
    return post("/v1/completions", s.slice(0, rnd(s.length - 1)));
  }
  if (k === 1) {  // one field with a wrong type or value
    const f = pick(Object.keys(badValues));
    body[f] = pick(badValues[f]);
    return post("/v1/completions", JSON.stringify(body));
  }
  if (k === 2) {  // invalid UTF-8 inside a string
    const s = Buffer.from(JSON.stringify(body));
    const at = s.indexOf("Once") + rnd(4);
    s[at] = pick([0xff, 0xc0, 0xe2, 0x80, 0xf8]);
    return post("/v1/completions", s);
  }
  if (k === 3) return post("/v1/chat/completions", JSON.stringify({model: valid.model, max_tokens: 2, ...pick(chatBad)}));
  if (k === 4) {  // random byte flips that break the JSON structure (braces, quotes, colons)
    const s = Buffer.from(JSON.stringify(body));
    const structural = [...s.keys()].filter(i => "{}\":,".includes(String.fromCharCode(s[i])));
    const at = pick(structural);
    s[at] = pick([0x00, 0x7b, 0x5d, 0x27, 0x5c].filter(b => b !== s[at]));
    return post("/v1/completions", s);
  }
  return post(pick(["/v1/completions", "/tokenize", "/detokenize", "/v1/chat/completions"]), pick(["null", "[]", "1", "\"s\"", "{\"tokens\": \"x\"}"]));
}
const headerAbuse = [
  () => Buffer.from("GET /health HTTP/1.1\r\n" + Array.from({length: 150}, (_, i) => `X-H${i}: v\r\n`).join("") + "\r\n"),  // 431
  () => Buffer.from(`GET /health HTTP/1.1\r\nX-Big: ${"a".repeat(20000)}\r\n\r\n`),  // 431
  () => Buffer.from("GET /health HTTP/1.1\r\nNoColonHere\r\n\r\n"),
  () => Buffer.from("GET /health HTTP/1.1\r\nBad Name: v\r\n\r\n"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n0\r\n\r\n"),
  () => Buffer.from("POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n"),
  () => Buffer.from("GET /health HTTP/2.0\r\n\r\n"),
  () => Buffer.from("GET /health FOO/1.1\r\n\r\n"),
  () => Buffer.from("G@T /health HTTP/1.1\r\n\r\n"),
  () => Buffer.from("GET  /health HTTP/1.1\r\n\r\n"),
  () => Buffer.from(`GET /${"x".repeat(9000)} HTTP/1.1\r\n\r\n`),  // 414
  () => Buffer.from("GET /health HTTP/1.1\nHost: x\n\n"),  // bare LF
  () => Buffer.from("GET /health HTTP/1.1\r\n Folded: x\r\n\r\n"),
  () => Buffer.from("GET /health HTTP/1.1\r\nX: a\x01b\r\n\r\n"),
  () => Buffer.from("GET /nope HTTP/1.1\r\n\r\n"),  // 404
  () => Buffer.from("DELETE /v1/completions HTTP/1.1\r\n\r\n"),  // 405
  () => Buffer.from("GET /v1/completions HTTP/1.1\r\n\r\n"),  // 405
  () => post("/v1/completions", "x".repeat(70000)),  // 413 (--max-body 65536)
  () => Buffer.from(`POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n${"8000\r\n" + "a".repeat(0x8000) + "\r\n"}${"8000\r\n" + "a".repeat(0x8000) + "\r\n"}0\r\n\r\n`),  // 413 chunked
  () => Buffer.from(Array.from({length: 64}, () => rnd(256))),  // random bytes
  () => Buffer.concat([Buffer.from("GET /health HTTP/1.1\r\n"), Buffer.from([0, 1, 2, 0xff]), Buffer.from("\r\n\r\n")]),
];

let sent = 0, badAnswers = [];
async function batch(makers, n, opts) {
  const jobs = [];
  for (let i = 0; i < n; ++i) jobs.push(makers());
  let next = 0;  // 64 connections at a time, a new one as soon as one finishes
  const worker = async () => {
    while (next < jobs.length) {
      const b = jobs[next++];
      const c = await raw(b, opts);
      if (!(c === 0 || (c >= 400 && c < 500))) badAnswers.push({c, req: b.toString("latin1").slice(90, 400)});
      ++sent;
    }
  };
  await Promise.all(Array.from({length: 64}, worker));
}
async function healthy(what) {
  const h = await fetch(`${srv.base}/health`);
  const r = await fetch(`${srv.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt: "Once upon a time", max_tokens: 5, temperature: 0})});
  const j = await r.json();
  check(h.status === 200 && r.status === 200 && j.choices?.[0]?.text?.length > 0, `healthy and serving after ${what}`);
}

const perRound = Math.ceil((TOTAL - 40) / 10);
for (let round = 0; round < 10; ++round) {
  await batch(() => round % 2 ? pick(headerAbuse)() : fuzzBody(), perRound);
  await healthy(`batch ${round + 1} (${sent} hostile requests so far)`);
}
// Slowloris: headers trickled in, never finished in time -> 408 or closed by the request timeout.
const t0 = performance.now();
await batch(() => Buffer.from("POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + "a".repeat(200)), 40, {slowMs: 40, timeoutMs: 15000});
check(performance.now() - t0 < 14000, "slow clients are cut off by the request timeout");
await healthy("slowloris");
check(sent >= TOTAL, `${sent} hostile requests sent`);
check(badAnswers.length === 0, `only 4xx answers or closed connections (${badAnswers.length} others${badAnswers.length ? ": " + JSON.stringify(badAnswers.slice(0, 3)) : ""})`);
let m;
for (let i = 0; i < 100; ++i) {  // answered-then-dropped connections abort asynchronously
  m = await metrics(srv.base);
  if (m.get("deepinfer_num_requests_in_flight") === 0 && m.get("deepinfer_kv_cache_usage_perc") === 0) break;
  await new Promise(r => setTimeout(r, 100));
}
check(m.get("deepinfer_num_requests_in_flight") === 0 && m.get("deepinfer_kv_cache_usage_perc") === 0, "nothing left in flight, KV free");
const code = await srv.stop();
check(code === 0, `SIGTERM: clean shutdown with the leak check (exit ${code})`);
done("server abuse");
