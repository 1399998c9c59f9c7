// Harmony (gpt-oss) chat through the official `openai` SDK (issue 32, must-show 6): an answer with reasoning and
// a tool call comes back as reasoning_content and tool_calls, streamed and not, and the prompt is gpt-oss's real
// template rendered as @huggingface/jinja renders it. Then gated grammars: tool_choice "required" / named and
// response_format json_schema give calls / content that validate, with free analysis before them.
//
// The model is a random-weight make-tiny llama whose tokenizer.json carries o200k_harmony's markers (on the ids of
// its last ordinary tokens), served with the real gpt-oss template. Random weights never write Harmony by
// themselves, so the answer is forced: a grammar spells it, and logit_bias makes each marker come out as its
// one token where the grammar allows it. For that the markers are added tokens with special=false here (the
// grammar only sees the bytes of non-control tokens; llama.cpp also turns <|channel|>, <|message|>, <|start|>,
// <|constrain|> into user-defined tokens); the parser reads token ids either way, so the path under test is
// the one a gpt-oss model's ids take.
import {spawnSync} from "node:child_process";
import {createRequire} from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, OpenAI, checker, repoRoot} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {Template} = await import(require.resolve("@huggingface/jinja"));

const MARKERS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
                 "<|message|>", "<|call|>"];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "di-harmony-"));
const dir = path.join(tmp, "m");
const mk = spawnSync(bin, ["make-tiny", "--arch", "llama", "--vocab", "2000", "--out", dir, "-q", "--seed", "5", "--ctx", "4096"], {encoding: "utf8"});
if (mk.status !== 0) { console.log(`FAIL make-tiny: ${mk.stderr}`); process.exit(1); }
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
// The markers take the ids of the byte tokens "<" and "|" (and of the last ordinary tokens): with no other way to
// write "<", a grammar's "<|channel|>" can only come out as the marker token (the Responses API has no
// logit_bias). Merges that make or use a freed token go (the prompts never need "<" or "|" as text).
const byId = Object.entries(tj.model.vocab).sort((a, b) => b[1] - a[1]);
const freed = [["<", tj.model.vocab["<"]], ["|", tj.model.vocab["|"]], ...byId.slice(0, MARKERS.length - 2)];
const gone = new Set(freed.map(([p]) => p));
for (const [p] of freed) delete tj.model.vocab[p];
for (let changed = true; changed;) {
  changed = false;
  tj.model.merges = tj.model.merges.filter(m => {
    const [a, b] = m.split(" ");
    const keep = !gone.has(a) && !gone.has(b) && !gone.has(a + b);
    if (!keep && (a + b) in tj.model.vocab) { gone.add(a + b); delete tj.model.vocab[a + b]; }
    if (!keep) changed = true;
    return keep;
  });
}
const id = {};
MARKERS.forEach((s, i) => {
  const tid = freed[i][1];
  tj.added_tokens.push({id: tid, content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false});
  id[s] = tid;
});
fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tj));
const tcfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
Object.assign(tcfg, {bos_token: "<|startoftext|>", eos_token: "<|return|>", add_bos_token: false});
fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(tcfg));
// The template writes today's date into the system message (strftime_now): fixed here, so the prompt (and the
// seeded samples the checks below rely on) do not change from one day to the next.
const tmplSrc = fs.readFileSync(path.join(repoRoot, "tools/ref/llama-data/templates/openai-gpt-oss-120b.jinja"), "utf8")
  .replace('strftime_now("%Y-%m-%d")', '"2026-12-05"');
if (!tmplSrc.includes('"Current date: " + "2026-12-05"')) { console.log("FAIL the template's date line changed"); process.exit(1); }
const tmpl = path.join(tmp, "gpt-oss.jinja");
fs.writeFileSync(tmpl, tmplSrc);

const tools = [{type: "function", function: {name: "get_weather", description: "Gets the weather.",
  parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}}}];
const srv = await startServer(bin, ["-m", dir, "--chat-template", tmpl]);
const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
const model = (await client.models.list()).data[0].id;
const gbnf = rule => `root ::= ${rule}\n`;
const lit = s => JSON.stringify(s);
// Every marker token is preferred wherever the grammar allows it (elsewhere the grammar masks it).
const bias = extra => Object.fromEntries([...["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>"], ...extra].map(m => [id[m], 100]));

try {
  // 1. The prompt: a conversation with a system prompt, tools, an earlier call with its reasoning (sent back as
  // reasoning_content, arguments as OpenAI's JSON text) and the tool's result, reasoning_effort "high". The
  // reference renders what llama.cpp's common_chat_params_init_gpt_oss gives the template: reasoning_content as
  // `thinking`, content dropped beside tool_calls, arguments as an object, reasoning_effort as a kwarg.
  const messages = [
    {role: "system", content: "Be brief."},
    {role: "user", content: "Weather in Oslo?"},
    {role: "assistant", content: "", reasoning_content: "Need get_weather.",
     tool_calls: [{id: "call_1", type: "function", function: {name: "get_weather", arguments: "{\"city\":\"Oslo\"}"}}]},
    {role: "tool", tool_call_id: "call_1", content: "{\"temp\": 20}"},
  ];
  const refMessages = messages.map(m => {
    const r = {...m};
    if (m.reasoning_content !== undefined) { r.thinking = m.reasoning_content; if (m.tool_calls?.length) delete r.content; }
    if (m.tool_calls) r.tool_calls = m.tool_calls.map(c => ({...c, function: {...c.function, arguments: JSON.parse(c.function.arguments)}}));
    return r;
  });
  const want = new Template(tmplSrc).render({messages: refMessages, tools, add_generation_prompt: true, reasoning_effort: "high",
                                             bos_token: "<|startoftext|>", eos_token: "<|return|>"});
  check(want.includes("Reasoning: high") && want.includes("<|start|>assistant<|channel|>analysis<|message|>Need get_weather.<|end|>") &&
        want.includes("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>") &&
        want.endsWith("<|start|>assistant"), `the reference rendering has the reasoning, the call and the generation prompt`);
  const tokRef = spawnSync(bin, ["tokenize", "--tokenizer", dir, "--json"], {input: want, encoding: "utf8"});
  const ours = await (await fetch(`${srv.base}/tokenize`, {method: "POST", body: JSON.stringify({messages, tools, reasoning_effort: "high"})})).json();
  const refIds = JSON.parse(tokRef.stdout);
  check(JSON.stringify(ours.tokens) === JSON.stringify(refIds) && refIds.includes(id["<|channel|>"]),
        `the server renders gpt-oss's template as @huggingface/jinja does (${ours.tokens?.length} / ${refIds.length} tokens)`);

  // Without a generation prompt the last final answer ends in <|end|>, not the template's <|return|> (llama.cpp
  // does the same: a prompt goes on after it).
  const last = [{role: "user", content: "Hi"}, {role: "assistant", content: "Hello"}];
  const lastRef = new Template(tmplSrc).render({messages: last, add_generation_prompt: false, bos_token: "", eos_token: ""});
  const lastIds = (await (await fetch(`${srv.base}/tokenize`, {method: "POST", body: JSON.stringify({messages: last, add_generation_prompt: false})})).json()).tokens;
  check(lastRef.endsWith("<|channel|>final<|message|>Hello<|return|>") && lastIds?.at(-1) === id["<|end|>"] && !lastIds.includes(id["<|return|>"]),
        "a trailing final answer ends in <|end|> without a generation prompt");

  // 2. Reasoning, then a tool call (recipient in the channel header, <|constrain|>json, as the model writes it).
  const callGrammar = gbnf(`${lit("<|channel|>analysis<|message|>")} "plan" [a-z ]{5,30} ${lit("<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>")} ${lit('{"city": "Oslo"}')}`);
  const ask = {model, messages: [{role: "user", content: "Weather in Oslo?"}], tools, max_tokens: 200, temperature: 1,
               guided_grammar: callGrammar, logit_bias: bias(["<|call|>"])};
  for (let seed = 0; seed < 3; ++seed) {
    const one = (await client.chat.completions.create({...ask, seed})).choices[0];
    const m = one.message;
    const call = m.tool_calls?.[0];
    check(one.finish_reason === "tool_calls" && m.content === null && /^plan[a-z ]+$/.test(m.reasoning_content ?? "") &&
          m.tool_calls?.length === 1 && call.function.name === "get_weather" && JSON.parse(call.function.arguments).city === "Oslo",
          `seed ${seed}: reasoning_content and one tool call (${JSON.stringify(m).slice(0, 200)}, finish ${one.finish_reason})`);
    let reasoning = "", content = "", finish = null, reasoningChunks = 0, order = "";
    const calls = [];
    for await (const ch of await client.chat.completions.create({...ask, seed, stream: true}))
      for (const c of ch.choices) {
        if (c.delta.reasoning_content) { reasoning += c.delta.reasoning_content; ++reasoningChunks; if (!order.endsWith("r")) order += "r"; }
        if (c.delta.content) content += c.delta.content;
        for (const t of c.delta.tool_calls ?? []) {
          if (!order.endsWith("t")) order += "t";
          calls[t.index] ??= {id: t.id, name: "", arguments: ""};
          if (t.function?.name) calls[t.index].name += t.function.name;
          if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    check(reasoning === m.reasoning_content && content === "" && finish === "tool_calls" && order === "rt" && reasoningChunks > 1 &&
          calls.length === 1 && calls[0].id && calls[0].name === call.function.name && calls[0].arguments === call.function.arguments,
          `seed ${seed}: streamed: reasoning in ${reasoningChunks} chunks, then the call, equal to the non-streamed message`);
  }

  // 3. Reasoning in two analysis messages, then the final answer.
  const finalAsk = {model, messages: [{role: "user", content: "Hi"}], max_tokens: 200, temperature: 1, seed: 7, logit_bias: bias(["<|return|>"]),
    guided_grammar: gbnf(`${lit("<|channel|>analysis<|message|>")} "one" [a-z]{1,8} ${lit("<|end|><|start|>assistant<|channel|>analysis<|message|>")} " two" ${lit("<|end|><|start|>assistant<|channel|>final<|message|>")} "Hello" [a-z ]{0,20}`)};
  const fin = (await client.chat.completions.create(finalAsk)).choices[0];
  let sr = "", sc = "", sf = null;
  for await (const ch of await client.chat.completions.create({...finalAsk, stream: true}))
    for (const c of ch.choices) { sr += c.delta.reasoning_content ?? ""; sc += c.delta.content ?? ""; sf = c.finish_reason ?? sf; }
  check(fin.finish_reason === "stop" && /^one[a-z]+ two$/.test(fin.message.reasoning_content ?? "") && /^Hello[a-z ]*$/.test(fin.message.content ?? "") &&
        !fin.message.tool_calls && sr === fin.message.reasoning_content && sc === fin.message.content && sf === "stop",
        `analysis messages concatenate into reasoning_content, final is content, streamed and not (${JSON.stringify(fin.message)})`);

  // 4. Cut by max_tokens inside the analysis message: reasoning only.
  const cutAsk = {...finalAsk, max_tokens: 20,
    guided_grammar: gbnf(`${lit("<|channel|>analysis<|message|>")} "one" [a-z]{60,80} ${lit("<|end|><|start|>assistant<|channel|>final<|message|>")} "Hello"`)};
  const cut = (await client.chat.completions.create(cutAsk)).choices[0];
  let cr = "", cc = "", cf = null;
  for await (const ch of await client.chat.completions.create({...cutAsk, stream: true}))
    for (const c of ch.choices) { cr += c.delta.reasoning_content ?? ""; cc += c.delta.content ?? ""; cf = c.finish_reason ?? cf; }
  check(cut.finish_reason === "length" && /^one[a-z]+$/.test(cut.message.reasoning_content ?? "") && cut.message.content === "" &&
        cr === cut.message.reasoning_content && cc === "" && cf === "length",
        `max_tokens inside analysis gives reasoning only, streamed and not (${JSON.stringify(cut.message)})`);

  // 5. The Responses API: a reasoning item, then the function_call item, streamed and not (no logit_bias there:
  // the grammar alone forces the markers).
  const rreq = {model, input: "Weather in Oslo?", max_output_tokens: 200, temperature: 1, seed: 3,
                tools: [{type: "function", name: "get_weather", description: "Gets the weather.", parameters: tools[0].function.parameters}],
                structured_outputs: {grammar: callGrammar}};
  const rr = await client.responses.create(rreq);
  const rItem = rr.output.find(o => o.type === "reasoning"), fc = rr.output.find(o => o.type === "function_call");
  const rText = rItem?.content?.[0]?.text ?? "";
  const events = [];
  for await (const e of await client.responses.create({...rreq, stream: true})) events.push(e);
  const done = events.at(-1)?.response;
  const rDeltas = events.filter(e => e.type === "response.reasoning_text.delta").map(e => e.delta).join("");
  const aDeltas = events.filter(e => e.type === "response.function_call_arguments.delta").map(e => e.delta).join("");
  check(/^plan[a-z ]+$/.test(rText) && fc?.name === "get_weather" && JSON.parse(fc.arguments ?? "null")?.city === "Oslo" &&
        rr.output_text === "" && rr.usage.output_tokens_details?.reasoning_tokens > 0,
        `responses: a reasoning item and a function_call (${JSON.stringify(rr.output).slice(0, 240)})`);
  check(rDeltas === rText && aDeltas === fc?.arguments && done?.output.some(o => o.type === "function_call" && o.arguments === fc?.arguments),
        `responses streamed: reasoning and argument deltas equal the non-streamed items`);

  // 6. Gated grammars (engine/grammar_gate.h): tool_choice "required", a named function and response_format
  // constrain only the message after the call / final header, and the analysis messages before it run free, as
  // llama.cpp's gpt-oss grammar lets them. No guided_grammar here: the gate alone keeps the headers to Harmony's
  // and the body to the schema. This server's markers are special tokens, as a gpt-oss GGUF has them, so the
  // grammar cannot see them and only the gate places them. logit_bias: <|start|> leaves a free body now and then
  // (a random model writes no <|end|><|start|> of its own), <|channel|> (allowed only in a header) puts the
  // recipient after the channel, and the turn's end token is preferred where the grammar allows it.
  await gatedGrammars();
} finally {
  check(await srv.stop() === 0, "server shut down cleanly");
  fs.rmSync(tmp, {recursive: true, force: true});
}
done("harmony");

async function gatedGrammars() {
  const sdir = path.join(tmp, "special");
  fs.cpSync(dir, sdir, {recursive: true});
  const stj = JSON.parse(fs.readFileSync(path.join(sdir, "tokenizer.json"), "utf8"));
  for (const t of stj.added_tokens) if (MARKERS.includes(t.content)) t.special = true;
  fs.writeFileSync(path.join(sdir, "tokenizer.json"), JSON.stringify(stj));
  const s2 = await startServer(bin, ["-m", sdir, "--chat-template", tmpl]);
  const c2 = new OpenAI({baseURL: `${s2.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await c2.models.list()).data[0].id;
  const weather = {type: "object", properties: {city: {type: "string", maxLength: 12}}, required: ["city"], additionalProperties: false};
  const time = {type: "object", properties: {zone: {type: "integer"}}, required: ["zone"], additionalProperties: false};
  const gtools = [{type: "function", function: {name: "get_weather", description: "Gets the weather.", parameters: weather}},
                  {type: "function", function: {name: "get_time", description: "Gets the time.", parameters: time}}];
  // The schemas above, checked by hand: exactly the properties, of their types.
  const valid = (schema, v) => v !== null && typeof v === "object" && !Array.isArray(v) &&
    JSON.stringify(Object.keys(v).sort()) === JSON.stringify(Object.keys(schema.properties).sort()) &&
    Object.entries(schema.properties).every(([k, p]) => p.type === "integer" ? Number.isInteger(v[k]) :
      typeof v[k] === "string" && [...v[k]].length <= p.maxLength);  // code points, as JSON Schema counts
  const parse = s => { try { return JSON.parse(s); } catch { return undefined; } };
  // <|message|> is lowered where a header could end as a preamble (`commentary<|message|>`) or go on to a call's
  // recipient; where it is the one token a header allows, the bias does not matter.
  const bias = end => ({[id["<|start|>"]]: 8, [id["<|channel|>"]]: 100, [id["<|message|>"]]: -4, [id[end]]: 100});
  // The same answer streamed: reasoning, content and calls from the deltas.
  const streamed = async ask => {
    const out = {reasoning: "", content: "", calls: [], finish: null};
    for await (const ch of await c2.chat.completions.create({...ask, stream: true}))
      for (const c of ch.choices) {
        out.reasoning += c.delta.reasoning_content ?? "";
        out.content += c.delta.content ?? "";
        for (const t of c.delta.tool_calls ?? []) {
          out.calls[t.index] ??= {name: "", arguments: ""};
          out.calls[t.index].name += t.function?.name ?? "";
          out.calls[t.index].arguments += t.function?.arguments ?? "";
        }
        if (c.finish_reason) out.finish = c.finish_reason;
      }
    return out;
  };
  try {
    const cases = [
      {what: "tool_choice required", tool_choice: "required", names: ["get_weather", "get_time"]},
      // get_weather: the function these seeds' unforced choice is not.
      {what: "a named tool_choice", tool_choice: {type: "function", function: {name: "get_weather"}}, names: ["get_weather"]},
    ];
    for (const k of cases) {
      let reasoned = 0;
      for (let seed = 0; seed < 4; ++seed) {
        const ask = {model, messages: [{role: "user", content: "Weather in Oslo?"}], tools: gtools, tool_choice: k.tool_choice,
                     max_tokens: 800, temperature: 1, seed, logit_bias: bias("<|call|>")};
        const one = (await c2.chat.completions.create(ask)).choices[0];
        const m = one.message, call = m.tool_calls?.[0];
        const schema = call?.function.name === "get_time" ? time : weather;
        if (m.reasoning_content) ++reasoned;
        check(one.finish_reason === "tool_calls" && m.tool_calls?.length === 1 && k.names.includes(call.function.name) &&
              valid(schema, parse(call.function.arguments)),
              `${k.what}, seed ${seed}: one call whose arguments validate (${one.finish_reason}: ${JSON.stringify(m).slice(0, 300)})`);
        const st = await streamed(ask);
        check(st.finish === "tool_calls" && st.reasoning === (m.reasoning_content ?? "") && st.calls.length === 1 &&
              st.calls[0].name === call?.function.name && st.calls[0].arguments === call?.function.arguments,
              `${k.what}, seed ${seed}: streamed, the same reasoning and call`);
      }
      // The free analysis messages: random text no JSON grammar would allow, before the constrained call.
      check(reasoned > 0, `${k.what}: ${reasoned} of 4 answers reasoned (free analysis) before the call`);
    }
    let reasoned = 0;
    for (let seed = 0; seed < 4; ++seed) {
      const ask = {model, messages: [{role: "user", content: "Weather in Oslo?"}], max_tokens: 800, temperature: 1, seed,
                   logit_bias: bias("<|return|>"), response_format: {type: "json_schema", json_schema: {name: "w", schema: weather, strict: true}}};
      const one = (await c2.chat.completions.create(ask)).choices[0];
      if (one.message.reasoning_content) ++reasoned;
      check(one.finish_reason === "stop" && valid(weather, parse(one.message.content)) && !one.message.tool_calls,
            `response_format json_schema, seed ${seed}: the content validates (${JSON.stringify(one.message).slice(0, 300)})`);
      const st = await streamed(ask);
      check(st.finish === "stop" && st.content === one.message.content && st.reasoning === (one.message.reasoning_content ?? ""),
            `response_format json_schema, seed ${seed}: streamed, the same reasoning and content`);
    }
    check(reasoned > 0, `response_format: ${reasoned} of 4 answers reasoned (free analysis) before the final answer`);
  } finally {
    check(await s2.stop() === 0, "the special-marker server shut down cleanly");
  }
}
