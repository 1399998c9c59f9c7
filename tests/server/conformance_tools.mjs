// Forced tool calls and JSON whitespace (issue 34), through the clients that use them (run with the Node 22 that
// tools/ref pins, for the Vercel AI SDK):
// - named and required tool_choice on stories260K, whose (ChatML fallback) template has no tool-call syntax:
//   tool_calls whose arguments validate against the tool's schema (ajv), streamed and not (openai SDK), and the
//   AI SDK's forced tool call; tool_choice "auto" on such a model is still refused (it needs the template's
//   syntax); a model whose template has a syntax (the real Qwen3 template) is still forced in that syntax;
// - JSON whitespace: 200 seeded json_schema requests (max_tokens 64) on a random-weight model, the share that
//   ends in `length` with llama.cpp's whitespace rule (structured_outputs.disable_any_whitespace: false) and with
//   the compact default: printed, and the default's must be lower.
import {createRequire} from "node:module";
import path from "node:path";
import {startServer, startTinyQwen3, OpenAI, checker, repoRoot} from "./common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const Ajv = require("ajv").default;
const ajv = new Ajv({strict: false, allErrors: true});
const ai = await import(require.resolve("ai"));
const {createOpenAICompatible} = await import(require.resolve("@ai-sdk/openai-compatible"));
const valid = (s, v) => { try { return ajv.validate(s, typeof v === "string" ? JSON.parse(v) : v); } catch { return false; } };
const rng = makeRng(3434);

const lookup = {type: "object", properties: {q: {type: "string", minLength: 1, maxLength: 8}, n: {type: "integer", minimum: 0, maximum: 99}},
                required: ["q", "n"], additionalProperties: false};
const add = {type: "object", properties: {a: {type: "integer", minimum: -9, maximum: 9}, b: {type: "integer", minimum: -9, maximum: 9}},
             required: ["a", "b"], additionalProperties: false};
const tools = [{type: "function", function: {name: "lookup", description: "Look a word up.", parameters: lookup}},
               {type: "function", function: {name: "add", description: "Add two numbers.", parameters: add}}];
const schemaOf = {lookup, add};

const stories = await startServer(bin);
const {dir, srv: qwen, made} = await startTinyQwen3(bin, "di-conf-tools-");
check(made, "make-tiny qwen3");
try {
  const client = new OpenAI({baseURL: `${stories.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  const base = {model, messages: [{role: "user", content: "Once upon a time"}], tools, max_tokens: 300};

  // --- named: one call of that function, arguments valid, finish_reason tool_calls; the stream assembles to it.
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({...base, seed, tool_choice: {type: "function", function: {name: "add"}}});
    const c = r.choices[0];
    const calls = c.message.tool_calls ?? [];
    check(calls.length === 1 && calls[0].function.name === "add" && valid(add, calls[0].function.arguments) &&
          c.finish_reason === "tool_calls" && c.message.content === null,
          `named tool_choice (seed ${seed}): add(${calls[0]?.function.arguments}), finish ${c.finish_reason}`);
    const stream = await client.chat.completions.create({...base, seed, stream: true, tool_choice: {type: "function", function: {name: "add"}}});
    const acc = [];
    let finish = null, chunks = 0;
    for await (const ch of stream) {
      for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
        acc[d.index] ??= {name: "", arguments: "", id: null};
        if (d.id) acc[d.index].id = d.id;
        if (d.function?.name) acc[d.index].name += d.function.name;
        if (d.function?.arguments) { acc[d.index].arguments += d.function.arguments; ++chunks; }
      }
      finish = ch.choices[0]?.finish_reason ?? finish;
    }
    check(acc.length === 1 && acc[0].name === "add" && acc[0].arguments === calls[0].function.arguments && chunks > 1 && finish === "tool_calls",
          `streamed named call assembles to the same call from ${chunks} argument deltas`);
  }

  // --- required, one call (parallel_tool_calls false), then several.
  let requiredOk = 0, requiredRuns = 0;
  const names = new Set();
  for (const seed of [5, 6, 7, 8]) {
    const r = await client.chat.completions.create({...base, seed, tool_choice: "required", parallel_tool_calls: false});
    const calls = r.choices[0].message.tool_calls ?? [];
    ++requiredRuns;
    if (calls.length === 1 && schemaOf[calls[0].function.name] && valid(schemaOf[calls[0].function.name], calls[0].function.arguments) &&
        r.choices[0].finish_reason === "tool_calls") requiredOk++;
    else console.log(`  seed ${seed}: ${JSON.stringify(r.choices[0])}`);
    for (const c of calls) names.add(c.function.name);
  }
  check(requiredOk === requiredRuns, `required, parallel_tool_calls false: one valid call each (${requiredOk}/${requiredRuns}; functions chosen: ${[...names].join(", ")})`);
  const many = await client.chat.completions.create({...base, seed: 11, tool_choice: "required", max_tokens: 400});
  const mc = many.choices[0].message.tool_calls ?? [];
  const complete = many.choices[0].finish_reason === "length" ? mc.slice(0, -1) : mc;  // a call cut by max_tokens keeps what it got
  check(mc.length >= 1 && complete.every(c => valid(schemaOf[c.function.name], c.function.arguments)),
        `required, parallel: ${mc.length} call(s), the complete ones valid (finish ${many.choices[0].finish_reason})`);
  const reqStream = await client.chat.completions.create({...base, seed: 5, tool_choice: "required", parallel_tool_calls: false, stream: true});
  const sacc = [];
  for await (const ch of reqStream)
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
      sacc[d.index] ??= {name: "", arguments: ""};
      if (d.function?.name) sacc[d.index].name += d.function.name;
      if (d.function?.arguments) sacc[d.index].arguments += d.function.arguments;
    }
  const plain5 = (await client.chat.completions.create({...base, seed: 5, tool_choice: "required", parallel_tool_calls: false})).choices[0].message.tool_calls;
  check(sacc.length === 1 && sacc[0].name === plain5[0].function.name && sacc[0].arguments === plain5[0].function.arguments,
        "streamed required call == the non-streamed one");

  // --- auto still needs the template's syntax; a tool not in the list is named in the error.
  const auto = await fetch(`${stories.base}/v1/chat/completions`, {method: "POST", body: JSON.stringify({...base, tool_choice: "auto"})});
  check(auto.status === 400 && (await auto.json()).error.message.includes("required"), "tool_choice auto without a template syntax: 400 pointing at required/named");
  const missing = await fetch(`${stories.base}/v1/chat/completions`, {method: "POST",
    body: JSON.stringify({...base, tool_choice: {type: "function", function: {name: "nope"}}})});
  check(missing.status === 400 && (await missing.json()).error.message.includes("nope"), "a named function not in tools: 400 naming it");

  // --- a template with its own syntax is still forced in it: Qwen3's <tool_call> tokens are in the answer.
  const qclient = new OpenAI({baseURL: `${qwen.base}/v1`, apiKey: "x", maxRetries: 0});
  const q = await qclient.chat.completions.create({model: "m", messages: [{role: "user", content: "hi"}], tools, max_tokens: 300, seed: 2,
    logprobs: true, tool_choice: {type: "function", function: {name: "lookup"}}, chat_template_kwargs: {enable_thinking: false}});
  const qtext = (q.choices[0].logprobs?.content ?? []).map(e => e.token).join("");
  const qcall = q.choices[0].message.tool_calls?.[0];
  check(qtext.includes("<tool_call>") && qcall?.function.name === "lookup" && valid(lookup, qcall.function.arguments),
        `Qwen3 template: the forced call is written in its <tool_call> syntax (${JSON.stringify(qtext.slice(0, 40))}...)`);

  // --- the Vercel AI SDK forcing a tool on stories260K.
  const m = createOpenAICompatible({name: "deepinfer", baseURL: `${stories.base}/v1`, apiKey: "x"})(model);
  const t = await ai.generateText({model: m, prompt: "Once upon a time", maxOutputTokens: 300, seed: 3, maxRetries: 0,
    toolChoice: {type: "tool", toolName: "lookup"},
    tools: {lookup: ai.tool({description: "Look a word up.", inputSchema: ai.jsonSchema(lookup)}),
            add: ai.tool({description: "Add two numbers.", inputSchema: ai.jsonSchema(add)})}});
  check(t.toolCalls.length === 1 && t.toolCalls[0].toolName === "lookup" && valid(lookup, t.toolCalls[0].input) && t.finishReason === "tool-calls",
        `AI SDK toolChoice {type: "tool"}: ${t.toolCalls[0]?.toolName}(${JSON.stringify(t.toolCalls[0]?.input)}), finish ${t.finishReason}`);

  // --- JSON whitespace: 200 seeded requests, each at its own seed and schema, flexible vs compact.
  const schemas = [
    {type: "object", properties: {city: {type: "string", maxLength: 10}, temp: {type: "integer"}}, required: ["city", "temp"]},
    {type: "object", properties: {items: {type: "array", items: {type: "integer"}, maxItems: 4}, ok: {type: "boolean"}}, required: ["items", "ok"]},
    {type: "object", properties: {name: {type: "string", maxLength: 6}, tags: {type: "array", items: {type: "string", maxLength: 4}, maxItems: 3}}, required: ["name", "tags"]},
  ];
  const reqs = Array.from({length: 200}, () => ({seed: rng.int(1 << 30), schema: rng.pick(schemas)}));
  const lengthShare = async flexible => {
    let lengths = 0, validJson = 0;
    for (let i = 0; i < reqs.length; i += 20) {
      const batch = reqs.slice(i, i + 20).map(({seed, schema}) => qclient.chat.completions.create({
        model: "m", messages: [{role: "user", content: "Give JSON."}], max_tokens: 64, temperature: 1, seed,
        chat_template_kwargs: {enable_thinking: false},
        response_format: {type: "json_schema", json_schema: {name: "x", schema}},
        ...(flexible ? {structured_outputs: {disable_any_whitespace: false}} : {})}));
      for (const r of await Promise.all(batch)) {
        if (r.choices[0].finish_reason === "length") ++lengths;
        else if (valid({}, r.choices[0].message.content)) ++validJson;
      }
    }
    return {lengths, validJson};
  };
  const before = await lengthShare(true), after = await lengthShare(false);
  console.log(`  json_schema, 200 requests, max_tokens 64: ended in length ${before.lengths}/200 with llama.cpp's whitespace rule, ` +
              `${after.lengths}/200 compact (complete JSON: ${before.validJson} vs ${after.validJson})`);
  check(after.lengths < before.lengths, `bounded whitespace: fewer answers run out of tokens (${after.lengths} < ${before.lengths} of 200)`);
  const bad = await fetch(`${qwen.base}/v1/chat/completions`, {method: "POST", body: JSON.stringify({model: "m", messages: [{role: "user", content: "x"}],
    response_format: {type: "json_object"}, structured_outputs: {disable_any_whitespace: "no"}})});
  check(bad.status === 400 && (await bad.json()).error.message.includes("disable_any_whitespace"), "a non-boolean disable_any_whitespace: 400 naming it");
} catch (e) {
  check(false, `unexpected: ${e.stack ?? e}`);
} finally {
  check(await stories.stop() === 0, "stories260K server shut down cleanly");
  check(await qwen.stop() === 0, "qwen3 server shut down cleanly");
  (await import("node:fs")).rmSync(dir, {recursive: true, force: true});
}
done("server_conformance_tools");
