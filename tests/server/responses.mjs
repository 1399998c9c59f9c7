// /v1/responses through the official `openai` SDK (client.responses.create, plain and streamed) on a random-weight
// qwen3 make-tiny model serving the real Qwen3 chat template: the response object, the stream's event sequence
// (its deltas concatenating to the done events and to the non-streamed answer for the same seed), `instructions`,
// text.format json_schema (ajv on the output), function tools with tool_choice required (ajv on the arguments),
// conversation state (previous_response_id, store, GET /v1/responses/{id}), and 400s / 404s naming the field.
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
  // The arguments stream as they are generated: several delta events, the call's item added before them.
  const nDeltas = tev.filter(e => e.type === "response.function_call_arguments.delta").length;
  const addedAt = tev.findIndex(e => e.type === "response.output_item.added" && e.item.type === "function_call");
  const firstDelta = tev.findIndex(e => e.type === "response.function_call_arguments.delta");
  check(nDeltas >= 2 && addedAt >= 0 && addedAt < firstDelta, `function_call arguments arrive in ${nDeltas} delta events`);
  // Named tool_choice in the Responses shape.
  const named = await client.responses.create({...treq, tool_choice: {type: "function", name: "get_weather"}});
  check(named.output.some(o => o.type === "function_call" && o.name === "get_weather"), "tool_choice {type: function, name}: the call is made");

  // Conversation state: previous_response_id continues a stored response. The second turn's prompt holds the
  // first turn's input and answer (more input tokens than both together); a third turn chains on; the answer
  // equals sending the same history by hand as input items; the tool call's output can come back by call_id.
  const t1 = await client.responses.create({...base, input: "Name a city."});
  const t2 = await client.responses.create({...base, input: "And another one.", previous_response_id: t1.id});
  const t1In = t1.usage.input_tokens, t1Out = t1.usage.output_tokens;
  check(t2.status && t2.usage.input_tokens > t1In + t1Out,
        `previous_response_id: turn 2 prompt holds turn 1 (${t2.usage.input_tokens} > ${t1In} + ${t1Out} input tokens)`);
  const byHand = await client.responses.create({...base, input: [
    {role: "user", content: "Name a city."}, {role: "assistant", content: [{type: "output_text", text: t1.output_text}]},
    {role: "user", content: "And another one."}]});
  check(byHand.output_text === t2.output_text && byHand.usage.input_tokens === t2.usage.input_tokens,
        "previous_response_id equals sending the history as input items");
  const t3 = await client.responses.create({...base, input: "One more.", previous_response_id: t2.id});
  check(t3.usage.input_tokens > t2.usage.input_tokens + t2.usage.output_tokens, "a third turn chains on the second");
  const toolTurn = await client.responses.create({...base, max_output_tokens: 300, input: [{type: "function_call_output", call_id: fc.call_id, output: "12 C"}],
                                                  previous_response_id: t.id, tools: treq.tools});
  check(toolTurn.status === "completed" || toolTurn.status === "incomplete", `a function_call_output answers the stored call (${toolTurn.status})`);
  // Instructions are not carried over (OpenAI's rule): the same input with the previous turn's instructions
  // dropped gives fewer input tokens than with them repeated.
  const i1 = await client.responses.create({...base, instructions: "Answer only in lower case letters, always.", input: "Hi."});
  const i2 = await client.responses.create({...base, input: "Again.", previous_response_id: i1.id});
  const i3 = await client.responses.create({...base, instructions: "Answer only in lower case letters, always.", input: "Again.", previous_response_id: i1.id});
  check(i3.usage.input_tokens > i2.usage.input_tokens, `instructions are not carried over (${i2.usage.input_tokens} < ${i3.usage.input_tokens})`);
  // GET /v1/responses/{id}: the stored object; store: false keeps nothing.
  const got = await client.responses.retrieve(t2.id);
  check(got.id === t2.id && got.output_text === t2.output_text, "responses.retrieve returns the stored response");
  const unstored = await client.responses.create({...base, store: false});
  let st = 0, code = "";
  try { await client.responses.create({...base, previous_response_id: unstored.id}); } catch (e) { st = e.status; code = e.code; }
  check(st === 404 && code === "previous_response_not_found", `store: false is not continued (${st} ${code})`);
  st = 0;
  try { await client.responses.retrieve("resp_nope"); } catch (e) { st = e.status; }
  check(st === 404, `unknown response id: 404 (${st})`);
  // Reasoning items handed back are accepted (and not fed to the model).
  const withReasoning = await client.responses.create({...base, input: [
    {type: "reasoning", id: "rs_1", summary: []}, {role: "user", content: "Say something."}]});
  check(withReasoning.output_text === r.output_text, "a reasoning input item is accepted and left out");

  // Reasoning: a grammar (vLLM's structured_outputs extension) makes the random model write a think block, as
  // Qwen3 does. The output is a reasoning item (reasoning_text content) before the message; streamed, the
  // reasoning item is added and done before the message item, its deltas concatenate to the non-streamed
  // reasoning, and with reasoning.summary the summary events carry the same text. reasoning_tokens counts the
  // tokens up to </think>; reasoning.effort "none" turns Qwen3's thinking off (enable_thinking: false adds an
  // empty think block to the prompt: more input tokens).
  const thinkReq = {...base, max_output_tokens: 120, structured_outputs: {grammar:
    'root ::= "<think>\n" "plan" [a-z ]{0,30} "\n</think>\n\n" "so" [a-z ]{0,20}\n'}};
  const th = await client.responses.create(thinkReq);
  const rItem = th.output[0], mItem = th.output[1];
  const rText = rItem?.content?.[0]?.text ?? "";
  check(rItem?.type === "reasoning" && rItem.id.startsWith("rs_") && Array.isArray(rItem.summary) && rItem.summary.length === 0 &&
        rText.startsWith("plan") && !rText.includes("think>") && mItem?.type === "message" && th.output_text.startsWith("so") &&
        !th.output_text.includes("think>"),
        `reasoning item then message: ${JSON.stringify(rText.slice(0, 30))} / ${JSON.stringify(th.output_text.slice(0, 20))}`);
  const rTokens = th.usage.output_tokens_details?.reasoning_tokens;
  check(rTokens > 0 && rTokens < th.usage.output_tokens, `reasoning_tokens ${rTokens} of ${th.usage.output_tokens} output tokens`);
  check(r.usage.output_tokens_details?.reasoning_tokens === 0, "no reasoning: reasoning_tokens 0");
  const tse = await streamed({...thinkReq, reasoning: {summary: "auto"}});
  const rAdded = tse.findIndex(e => e.type === "response.output_item.added" && e.item.type === "reasoning");
  const rDone = tse.findIndex(e => e.type === "response.output_item.done" && e.item.type === "reasoning");
  const mAdded = tse.findIndex(e => e.type === "response.output_item.added" && e.item.type === "message");
  const rDeltas = tse.filter(e => e.type === "response.reasoning_text.delta").map(e => e.delta).join("");
  const sDeltas = tse.filter(e => e.type === "response.reasoning_summary_text.delta").map(e => e.delta).join("");
  const tDeltas = tse.filter(e => e.type === "response.output_text.delta").map(e => e.delta).join("");
  const fin = tse[tse.length - 1].response;
  check(rAdded >= 0 && rAdded < rDone && rDone < mAdded && rDeltas === rText && sDeltas === rText && tDeltas === th.output_text &&
        fin.output[0].type === "reasoning" && fin.output[0].summary[0]?.text === rText && fin.output[1].type === "message" &&
        tse.filter(e => e.type === "response.output_item.added").every((e, i) => e.output_index === i),
        `streamed reasoning item (${rDeltas.length} chars, summary mirrored) before the message, output indices in order`);
  const effNone = await client.responses.create({...base, reasoning: {effort: "none"}});
  check(effNone.usage.input_tokens > r.usage.input_tokens && effNone.reasoning?.effort === "none",
        `reasoning.effort none reaches the template (${effNone.usage.input_tokens} > ${r.usage.input_tokens} input tokens)`);
  // A reasoning item handed back becomes the reasoning_content of the assistant turn after it; the Qwen3
  // template shows it only after the last user query (a tool loop), so there it adds input tokens.
  const loop = (withR) => client.responses.create({...base, input: [
    {role: "user", content: "Weather?"},
    ...(withR ? [{type: "reasoning", id: "rs_x", summary: [], content: [{type: "reasoning_text", text: "I should call the tool."}]}] : []),
    {type: "function_call", call_id: "c1", name: "get_weather", arguments: "{\"city\":\"Oslo\"}"},
    {type: "function_call_output", call_id: "c1", output: "12 C"}], tools: treq.tools});
  const [noR, withR] = [await loop(false), await loop(true)];
  check(withR.usage.input_tokens > noR.usage.input_tokens,
        `a reasoning input item reaches the template in a tool loop (${withR.usage.input_tokens} > ${noR.usage.input_tokens})`);

  // 400s and 404s naming the field.
  for (const [body, param, want] of [[{input: undefined}, "input", 400], [{input: [{type: "image_generation_call"}]}, "input[0].type", 400],
                               [{previous_response_id: "resp_1"}, "previous_response_id", 404], [{text: {format: {type: "yaml"}}}, "text.format.type", 400],
                               [{tools: [{type: "web_search"}]}, "tools[0]", 400], [{store: "yes"}, "store", 400],
                               [{reasoning: {effort: "max"}}, "reasoning.effort", 400]]) {
    let status = 0, p = "";
    try { await client.responses.create({...base, ...body}); } catch (e) { status = e.status; p = e.param; }
    check(status === want && p === param, `${want} naming '${param}' (${status}, ${p})`);
  }
} finally {
  check(await srv.stop() === 0, "server shut down cleanly");
  fs.rmSync(dir, {recursive: true, force: true});
}
done("responses");
