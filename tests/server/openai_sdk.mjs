// Must-show 1 of the server issue: the official `openai` SDK against a real `deepinfer serve` (stories260K):
// completions and chat, streaming and not, n > 1, logprobs, stop, seed reproducibility, usage, typed errors;
// streamed text concatenates to the non-streamed text for the same seed.
import {startServer, OpenAI, checker, metrics} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const srv = await startServer(bin, ["--api-key", "sekret", "--served-model-name", "stories"]);
const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "sekret", maxRetries: 0});
const model = "stories";

try {
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "stories", "models.list shows the served name");

  // Completions, greedy: deterministic and equal to the CLI's greedy story.
  const c1 = await client.completions.create({model, prompt: "Once upon a time", max_tokens: 30, temperature: 0});
  check(c1.object === "text_completion" && c1.choices[0].text.startsWith(", there was a little girl named Lily"),
        `greedy completion: ${JSON.stringify(c1.choices[0].text.slice(0, 50))}`);
  check(c1.choices[0].finish_reason === "length", "finish_reason length");
  check(c1.usage.prompt_tokens > 0 && c1.usage.completion_tokens === 30 &&
        c1.usage.total_tokens === c1.usage.prompt_tokens + 30, `usage ${JSON.stringify(c1.usage)}`);

  // Seeded sampling: reproducible, and streaming concatenation equals non-streaming.
  const sp = {model, prompt: "The little dog", max_tokens: 40, temperature: 0.9, top_p: 0.95, seed: 1234};
  const a = await client.completions.create(sp), b = await client.completions.create(sp);
  check(a.choices[0].text === b.choices[0].text, "same seed, same completion");
  const other = await client.completions.create({...sp, seed: 99});
  check(other.choices[0].text !== a.choices[0].text, "another seed, another completion");
  let streamed = "", finish = null, usage = null, chunks = 0;
  for await (const ch of await client.completions.create({...sp, stream: true, stream_options: {include_usage: true}})) {
    ++chunks;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { streamed += c.text; if (c.finish_reason) finish = c.finish_reason; }
  }
  check(chunks > 5 && streamed === a.choices[0].text, "streamed completion concatenates to the non-streamed text");
  check(finish === a.choices[0].finish_reason && usage?.completion_tokens === a.usage.completion_tokens,
        "stream's finish_reason and usage chunk match");

  // n > 1 with logprobs.
  const nn = await client.completions.create({model, prompt: "Lily", max_tokens: 12, n: 3, temperature: 1, seed: 5, logprobs: 2});
  check(nn.choices.length === 3 && new Set(nn.choices.map(c => c.index)).size === 3, "n=3 gives three choices");
  check(new Set(nn.choices.map(c => c.text)).size > 1, "the samples differ");
  check(nn.choices.every(c => c.logprobs.tokens.length === c.logprobs.token_logprobs.length &&
        c.logprobs.top_logprobs.every(t => Object.keys(t).length >= 1 && Object.keys(t).length <= 2) &&
        c.logprobs.token_logprobs.every(v => v <= 0)), "completion logprobs: tokens, token_logprobs <= 0, top 2");
  check(nn.usage.completion_tokens === nn.choices.reduce((s, c) => s + c.logprobs.tokens.length, 0), "usage counts all samples");

  // Stop strings.
  const st = await client.completions.create({model, prompt: "Once upon a time", max_tokens: 60, temperature: 0, stop: ["Lily"]});
  check(st.choices[0].finish_reason === "stop" && !st.choices[0].text.includes("Lily") &&
        c1.choices[0].text.startsWith(st.choices[0].text), `stop string cuts the text: ${JSON.stringify(st.choices[0].text)}`);

  // A batch of prompts: choices numbered prompt * n + sample.
  const bp = await client.completions.create({model, prompt: ["Once upon a time", "The dog"], max_tokens: 8, temperature: 0, n: 2});
  check(bp.choices.length === 4 && bp.choices.map(c => c.index).join() === "0,1,2,3" &&
        c1.choices[0].text.startsWith(bp.choices[0].text) && bp.choices[2].text !== bp.choices[0].text,
        "batched prompts: 2 prompts x n=2, in order");

  // Echo.
  const ec = await client.completions.create({model, prompt: "Once upon a time", max_tokens: 5, temperature: 0, echo: true});
  check(ec.choices[0].text.startsWith("Once upon a time"), "echo prepends the prompt");

  // Chat, streaming and not, with logprobs.
  const msgs = [{role: "system", content: "You tell stories."}, {role: "user", content: "Tell me about a cat."}];
  const ch1 = await client.chat.completions.create({model, messages: msgs, max_tokens: 25, temperature: 0.7, seed: 3,
                                                      logprobs: true, top_logprobs: 2});
  check(ch1.object === "chat.completion" && ch1.choices[0].message.role === "assistant" &&
        ch1.choices[0].message.content.length > 0, "chat completion returns an assistant message");
  check(ch1.choices[0].logprobs.content.length === ch1.usage.completion_tokens &&
        ch1.choices[0].logprobs.content.every(t => t.top_logprobs.length === 2), "chat logprobs per token with 2 alternatives");
  let chatStreamed = "", role = null;
  for await (const ch of await client.chat.completions.create({model, messages: msgs, max_tokens: 25, temperature: 0.7, seed: 3, stream: true})) {
    for (const c of ch.choices) { if (c.delta.role) role = c.delta.role; chatStreamed += c.delta.content ?? ""; }
  }
  check(role === "assistant" && chatStreamed === ch1.choices[0].message.content, "chat stream concatenates to the same message");

  // A prompt prefilled in one chunk reaches the prefix cache as soon as its K/V is written, even when the answer
  // is too short to outgrow the blocks it was admitted with: the same chat again hits every full 16-token block
  // but the one holding the last prompt token. (The first may hit the chat template's opening, which the chats
  // above share.)
  const pc = {model, max_tokens: 2, temperature: 0,
              messages: [{role: "system", content: "You tell short stories about a red fox who lives near a river."},
                         {role: "user", content: "Tell me what the fox found in the tall grass one morning."}]};
  const pc1 = await client.chat.completions.create(pc), pc2 = await client.chat.completions.create(pc);
  const full = Math.floor((pc1.usage.prompt_tokens - 1) / 16) * 16;
  check(pc1.usage.prompt_tokens_details.cached_tokens < full &&
        pc2.usage.prompt_tokens_details.cached_tokens === full &&
        pc2.choices[0].message.content === pc1.choices[0].message.content,
        `one-chunk prompt, max_tokens 2, sent twice: cached ${pc1.usage.prompt_tokens_details.cached_tokens} then ` +
        `${pc2.usage.prompt_tokens_details.cached_tokens} of ${pc1.usage.prompt_tokens} (expected < ${full} then ${full})`);

  // Errors surface as the SDK's typed exceptions.
  const expectError = async (cls, fn, what) => {
    try { await fn(); check(false, `${what}: no error`); }
    catch (e) { check(e instanceof cls, `${what}: ${e.constructor.name} ${e.status} ${String(e.message).slice(0, 80)}`); }
  };
  await expectError(OpenAI.BadRequestError, () => client.completions.create({model, prompt: "x", temperature: -3}), "bad temperature");
  await expectError(OpenAI.BadRequestError, () => client.completions.create({model, prompt: "a ".repeat(2000), max_tokens: 5}), "prompt over the context");
  await expectError(OpenAI.BadRequestError, () => client.completions.create({model, prompt: "x", max_tokens: "many"}), "wrong type");
  await expectError(OpenAI.NotFoundError, () => client.completions.create({model: "gpt-9", prompt: "x"}), "unknown model");
  await expectError(OpenAI.BadRequestError, () => client.chat.completions.create({model, messages: []}), "empty messages");
  const bad = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "wrong", maxRetries: 0});
  await expectError(OpenAI.AuthenticationError, () => bad.models.list(), "wrong API key");
  const none = await fetch(`${srv.base}/v1/models`);
  check(none.status === 401, "no API key: 401");
  const health = await fetch(`${srv.base}/health`);
  check(health.status === 200, "/health needs no key");

  // tokenize / detokenize round trip.
  const hdr = {"Content-Type": "application/json", Authorization: "Bearer sekret"};
  const tk = await (await fetch(`${srv.base}/tokenize`, {method: "POST", headers: hdr, body: JSON.stringify({prompt: "Once upon a time"})})).json();
  const dt = await (await fetch(`${srv.base}/detokenize`, {method: "POST", headers: hdr, body: JSON.stringify({tokens: tk.tokens})})).json();
  check(tk.count === tk.tokens.length && dt.prompt.includes("Once upon a time"), "tokenize/detokenize round trip");

  const m = await metrics(srv.base);
  check(m.get("deepinfer_generation_tokens_total") > 100 && m.text.includes("deepinfer_time_to_first_token_seconds_bucket"),
        "metrics count tokens and expose latency histograms");
} catch (e) {
  check(false, `unexpected: ${e.stack}`);
}
const code = await srv.stop();
check(code === 0, `SIGTERM: clean shutdown with the leak check (exit ${code})`);

// Queue limit: with --max-pending 1, a second request while one is in flight gets 429 (RateLimitError) with
// Retry-After. Then SIGTERM with a request still streaming: it gets --grace to finish, then is cut, and the
// process still exits cleanly (leak check passed).
const small = await startServer(bin, ["--max-pending", "1", "--grace", "1"]);
const c2 = new OpenAI({baseURL: `${small.base}/v1`, apiKey: "none", maxRetries: 0});
const long = await c2.completions.create({model: "stories260K.gguf", prompt: "Once", max_tokens: 100000, stream: true, n: 48,
                                         ignore_eos: true, temperature: 1, seed: 1});
const it = long[Symbol.asyncIterator]();
await it.next();  // the long request is streaming now
try {
  await c2.completions.create({model: "stories260K.gguf", prompt: "x", max_tokens: 2});
  check(false, "queue limit: no error");
} catch (e) {
  check(e instanceof OpenAI.RateLimitError && e.headers?.get?.("retry-after") === "1", `queue limit: ${e.constructor.name} ${e.status}`);
}
const t0 = performance.now();
const exitCode = small.stop();
let cut = false;
try { for (let r = await it.next(); !r.done; r = await it.next()); } catch { cut = true; }
const code2 = await exitCode;
check(code2 === 0 && performance.now() - t0 < 8000, `SIGTERM mid-stream: stream ended (${cut ? "cut" : "finished"}), exit ${code2} after ${(performance.now() - t0).toFixed(0)} ms`);
done("openai_sdk");
