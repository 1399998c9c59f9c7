// /v1/responses through the official `openai` SDK (client.responses.create, plain and streamed) on a random-weight
// qwen3 make-tiny model serving the real Qwen3 chat template: the response object, the stream's event sequence
// (its deltas concatenating to the done events and to the non-streamed answer for the same seed), `instructions`,
// text.format json_schema (ajv on the output), function tools with tool_choice required (ajv on the arguments),
// and 400s naming the field.
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";
import {startTinyQwen3, OpenAI, checker, repoRoot} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const Ajv = require("ajv").default;
const ajv = new Ajv({strict: false, allErrors: true});

const {dir, srv, made} = await startTinyQwen3(bin, "di-resp-");
check(made, "make-tiny qwen3");
const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
const model = (await client.models.list()).data[0].id;

async function streamed(req) {
  const events = [];
  for await (const e of await client.responses.create({...req, stream: true})) events.push(e);
  return events;
}

try {
  // Plain, with instructions: the object's shape, and instructions reach the prompt (more input tokens).
  const base = {model, input: "Say something.", max_output_tokens: 12, temperature: 1, seed: 4};
  const r = await client.responses.create(base);
  const ri = await client.responses.create({...base, instructions: "You are terse and precise in every answer."});
  check(r.object === "response" && r.id.startsWith("resp_") && ["completed", "incomplete"].includes(r.status) &&
        r.output[0]?.type === "message" && r.output[0].content[0].type === "output_text" && typeof r.output_text === "string" &&
        r.usage.output_tokens > 0 && r.usage.input_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens,
        `responses.create: ${r.status}, output_text ${JSON.stringify(r.output_text.slice(0, 30))}, usage ${JSON.stringify(r.usage)}`);
  check(ri.usage.input_tokens > r.usage.input_tokens, `instructions reach the prompt (${ri.usage.input_tokens} > ${r.usage.input_tokens} input tokens)`);
  // An input message list gives the same answer as the string.
  const rl = await client.responses.create({...base, input: [{role: "user", content: [{type: "input_text", text: "Say something."}]}]});
  check(rl.output_text === r.output_text, "input as a message list equals input as a string");

  // Streamed: the event sequence, deltas == done text == the final response == the non-streamed answer.
  const ev = await streamed(base);
  const types = ev.map(e => e.type);
  const want = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
  const deltas = ev.filter(e => e.type === "response.output_text.delta").map(e => e.delta).join("");
  const doneText = ev.find(e => e.type === "response.output_text.done")?.text;
  const last = ev[ev.length - 1];
  check(want.every((t, i) => types[i] === t) && ["response.completed", "response.incomplete"].includes(last.type) &&
        ev.every((e, i) => e.sequence_number === i) && types.includes("response.output_item.done"),
        `stream event sequence: ${[...new Set(types)].join(", ")}`);
  check(deltas === doneText && doneText === last.response.output[0].content[0].text && doneText === r.output_text,
        "streamed output_text deltas == output_text.done == the final response == the non-streamed answer");

  // text.format json_schema: the output validates (ajv).
  const schema = {type: "object", properties: {name: {type: "string", maxLength: 6}, n: {type: "integer", minimum: 0, maximum: 9}},
                  required: ["name", "n"], additionalProperties: false};
  const js = await client.responses.create({...base, max_output_tokens: 200, text: {format: {type: "json_schema", name: "thing", schema, strict: true}}});
  let okJson = false;
  try { okJson = ajv.validate(schema, JSON.parse(js.output_text)); } catch {}
  check(okJson && js.status === "completed", `text.format json_schema: ${JSON.stringify(js.output_text)} validates`);

  // Function tools, tool_choice required: a function_call item whose arguments validate; streamed, the
  // arguments events carry the same arguments.
  const params = {type: "object", properties: {city: {type: "string", minLength: 1, maxLength: 8}}, required: ["city"], additionalProperties: false};
  const treq = {...base, max_output_tokens: 300, tools: [{type: "function", name: "get_weather", description: "Weather", parameters: params}],
                tool_choice: "required", parallel_tool_calls: false};
  const t = await client.responses.create(treq);
  const fc = t.output.find(o => o.type === "function_call");
  let okArgs = false;
  try { okArgs = ajv.validate(params, JSON.parse(fc.arguments)); } catch {}
  check(fc && fc.name === "get_weather" && fc.call_id && okArgs, `function_call: ${fc?.name}(${fc?.arguments})`);
  const tev = await streamed(treq);
  const argDone = tev.find(e => e.type === "response.function_call_arguments.done");
  const argDeltas = tev.filter(e => e.type === "response.function_call_arguments.delta").map(e => e.delta).join("");
  check(argDone?.arguments === fc.arguments && argDeltas === fc.arguments &&
        tev[tev.length - 1].response.output.some(o => o.type === "function_call" && o.arguments === fc.arguments),
        "streamed function_call_arguments delta/done equal the non-streamed call");
  // Named tool_choice in the Responses shape.
  const named = await client.responses.create({...treq, tool_choice: {type: "function", name: "get_weather"}});
  check(named.output.some(o => o.type === "function_call" && o.name === "get_weather"), "tool_choice {type: function, name}: the call is made");

  // 400s naming the field.
  for (const [body, param] of [[{input: undefined}, "input"], [{input: [{type: "image_generation_call"}]}, "input[0].type"],
                               [{previous_response_id: "resp_1"}, "previous_response_id"], [{text: {format: {type: "yaml"}}}, "text.format.type"],
                               [{tools: [{type: "web_search"}]}, "tools[0]"]]) {
    let status = 0, p = "";
    try { await client.responses.create({...base, ...body}); } catch (e) { status = e.status; p = e.param; }
    check(status === 400 && p === param, `400 naming '${param}' (${status}, ${p})`);
  }
} finally {
  check(await srv.stop() === 0, "server shut down cleanly");
  fs.rmSync(dir, {recursive: true, force: true});
}
done("responses");
