// What real clients sent and deepinfer got wrong (issue 34), each through the client that sends it:
// - the `developer` role (OpenAI's name for the system turn) reaches the prompt as the system message;
// - chat logprobs carry `bytes`, from which the client rebuilds the UTF-8 text across tokens;
// - assistant prefill: `continue_final_message` continues the last assistant message instead of closing it;
// - /v1/responses reports the request's own settings (tool_choice, tools, parallel_tool_calls, temperature,
//   metadata, ...), honours top_logprobs + include, stop and top_k, and refuses what it cannot honour by name.
// stories260K (no template: ChatML) and a random-weight qwen3 make-tiny model with the real Qwen3 template.
import {startServer, startTinyQwen3, OpenAI, checker} from "./common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const rng = makeRng(34);

async function post(base, route, body) {
  const r = await fetch(`${base}${route}`, {method: "POST", headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
  return {status: r.status, body: await r.json()};
}

const stories = await startServer(bin);
const {dir, srv: qwen, made} = await startTinyQwen3(bin, "di-conf-chat-");
check(made, "make-tiny qwen3");
try {
  const client = new OpenAI({baseURL: `${stories.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  const qclient = new OpenAI({baseURL: `${qwen.base}/v1`, apiKey: "x", maxRetries: 0});
  const qmodel = (await qclient.models.list()).data[0].id;

  // --- developer role: rendered as the system message (same prompt, same greedy answer).
  const sys = {model, max_tokens: 12, temperature: 0};
  const asSystem = await client.chat.completions.create({...sys, messages: [{role: "system", content: "Be brief."}, {role: "user", content: "hi"}]});
  const asDev = await client.chat.completions.create({...sys, messages: [{role: "developer", content: "Be brief."}, {role: "user", content: "hi"}]});
  const bare = await client.chat.completions.create({...sys, messages: [{role: "user", content: "hi"}]});
  check(asDev.usage.prompt_tokens === asSystem.usage.prompt_tokens && asDev.usage.prompt_tokens > bare.usage.prompt_tokens &&
        asDev.choices[0].message.content === asSystem.choices[0].message.content,
        `developer == system (prompt tokens ${asDev.usage.prompt_tokens} vs ${asSystem.usage.prompt_tokens}, without: ${bare.usage.prompt_tokens})`);
  // With a system and a developer message both, a template that takes one system turn gets them merged.
  const both = await qclient.chat.completions.create({model: qmodel, max_tokens: 4, temperature: 0,
    messages: [{role: "system", content: "A."}, {role: "developer", content: "B."}, {role: "user", content: "hi"}]});
  const merged = await qclient.chat.completions.create({model: qmodel, max_tokens: 4, temperature: 0,
    messages: [{role: "system", content: "A.\n\nB."}, {role: "user", content: "hi"}]});
  check(both.usage.prompt_tokens === merged.usage.prompt_tokens && both.choices[0].message.content === merged.choices[0].message.content,
        `system + developer render as one system message on Qwen3 (${both.usage.prompt_tokens} vs ${merged.usage.prompt_tokens} tokens)`);

  // --- logprobs bytes: every entry (and every top entry) has them; joined, they are the answer's UTF-8 bytes.
  // The qwen3 vocabulary has byte-level tokens, so random weights at temperature 1 produce multi-byte text.
  let bytesOk = 0, bytesRuns = 0, multibyte = 0;
  for (let i = 0; i < 4; ++i) {
    const seed = rng.int(1000000);
    const r = await qclient.chat.completions.create({model: qmodel, max_tokens: 48, temperature: 1, seed, logprobs: true, top_logprobs: 2,
      messages: [{role: "user", content: "Write anything."}], chat_template_kwargs: {enable_thinking: false}});
    const content = r.choices[0].logprobs?.content ?? [];
    const allHave = content.length > 0 && content.every(e => Array.isArray(e.bytes) && e.top_logprobs.every(t => Array.isArray(t.bytes)));
    // Control tokens (<|...|>) are in the logprobs with their text but not in the answer (special tokens skipped).
    const joined = Buffer.from(content.filter(e => !/^<\|[^|]*\|>$/.test(e.token)).flatMap(e => e.bytes ?? []));
    const sampledIsTop = content.every(e => e.top_logprobs.length === 2);
    multibyte += content.filter(e => (e.bytes ?? []).some(b => b >= 0x80)).length;
    // The message is the answer's text; when the template opened nothing, all tokens are content.
    const text = r.choices[0].message.content ?? "";
    bytesRuns++;
    // Random weights also write stray bytes that are not UTF-8: those read as U+FFFD on both sides (how many
    // replacement characters a stray byte becomes is the decoder's choice), so they are left out of the comparison.
    const clean = t => t.replace(/\uFFFD/g, "").trim();
    if (allHave && sampledIsTop && text.length > 0 && clean(joined.toString("utf8")) === clean(text)) bytesOk++;
    else console.log(`  seed ${seed}: ${content.length} entries, text ${JSON.stringify(text.slice(0, 40))}`);
  }
  check(bytesOk === bytesRuns && multibyte > 0, `logprobs.content[].bytes rebuild the answer's UTF-8 (${bytesOk}/${bytesRuns} runs, ${multibyte} tokens with bytes >= 0x80)`);

  // --- assistant prefill on stories260K (ChatML fallback): the prompt is the ChatML text up to the partial answer,
  // so the chat answer equals the completion of that text written by hand.
  const chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nOnce upon a";
  const cont = await client.chat.completions.create({model, max_tokens: 10, temperature: 0, continue_final_message: true,
    messages: [{role: "user", content: "hi"}, {role: "assistant", content: "Once upon a"}]});
  const comp = await client.completions.create({model, prompt: chatml, max_tokens: 10, temperature: 0});
  check(cont.usage.prompt_tokens === comp.usage.prompt_tokens && cont.choices[0].message.content === comp.choices[0].text,
        `continue_final_message continues the answer (${JSON.stringify(cont.choices[0].message.content)}, prompt ${cont.usage.prompt_tokens} == ${comp.usage.prompt_tokens} tokens)`);
  const contTok = await post(qwen.base, "/tokenize", {messages: [{role: "user", content: "hi"}, {role: "assistant", content: "Once upon a"}],
                                                     continue_final_message: true, add_generation_prompt: false});
  const contText = contTok.status === 200 ? (await post(qwen.base, "/detokenize", {tokens: contTok.body.tokens})).body.prompt : "";
  const lastTurn = String(contText).slice(String(contText).lastIndexOf("<|im_start|>assistant"));
  check(typeof contText === "string" && contText.endsWith("Once upon a") && !lastTurn.includes("<|im_end|>"),
        `continue_final_message on the Qwen3 template leaves the turn open: ...${JSON.stringify(String(contText).slice(-40))}`);
  for (const [what, body, field] of [
    ["both flags", {continue_final_message: true, add_generation_prompt: true, messages: [{role: "user", content: "hi"}, {role: "assistant", content: "x"}]}, "add_generation_prompt"],
    ["last message not assistant", {continue_final_message: true, messages: [{role: "user", content: "hi"}]}, "assistant"],
    ["not a boolean", {continue_final_message: "yes", messages: [{role: "user", content: "hi"}, {role: "assistant", content: "x"}]}, "true or false"]]) {
    const r = await post(stories.base, "/v1/chat/completions", {model, max_tokens: 2, ...body});
    check(r.status === 400 && r.body.error?.message.includes(field), `continue_final_message, ${what}: 400 (${r.body.error?.message})`);
  }

  // --- /v1/responses echoes what the request asked for.
  const tools = [{type: "function", name: "lookup", description: "Look up a word.",
                  parameters: {type: "object", properties: {q: {type: "string"}}, required: ["q"]}}];
  const req = {model, input: "Tell me a story.", max_output_tokens: 6, temperature: 0.25, top_p: 0.5, tools, tool_choice: "none",
               parallel_tool_calls: false, metadata: {team: "a"}, top_logprobs: 3, include: ["message.output_text.logprobs"],
               user: "u1", truncation: "disabled", instructions: "Short."};
  const r = await client.responses.create(req);
  check(r.tool_choice === "none" && r.parallel_tool_calls === false && r.tools.length === 1 && r.tools[0].name === "lookup" &&
        r.temperature === 0.25 && r.top_p === 0.5 && r.metadata?.team === "a" && r.top_logprobs === 3 && r.user === "u1" &&
        r.truncation === "disabled" && r.instructions === "Short." && r.max_output_tokens === 6,
        `response echoes the request: tool_choice ${JSON.stringify(r.tool_choice)}, parallel_tool_calls ${r.parallel_tool_calls}, ` +
        `tools ${r.tools.length}, temperature ${r.temperature}, top_p ${r.top_p}, metadata ${JSON.stringify(r.metadata)}, top_logprobs ${r.top_logprobs}`);
  const defaults = await client.responses.create({model, input: "hi", max_output_tokens: 2});
  check(defaults.tool_choice === "auto" && defaults.parallel_tool_calls === true && defaults.tools.length === 0 &&
        defaults.temperature === 1 && defaults.top_logprobs === 0, "a response without those fields reports OpenAI's defaults");
  const lps = r.output[0].content[0].logprobs ?? [];
  check(lps.length === r.usage.output_tokens && lps.every(e => e.top_logprobs.length === 3 && Array.isArray(e.bytes)) &&
        lps.map(e => e.token).join("") === r.output_text,
        `top_logprobs + include: ${lps.length} entries for ${r.usage.output_tokens} tokens, 3 alternatives each, tokens join to the text`);
  // Streamed: the deltas' log-probs are the final object's.
  const events = [];
  for await (const e of await client.responses.create({...req, temperature: 0, stream: true})) events.push(e);
  const deltaLps = events.filter(e => e.type === "response.output_text.delta").flatMap(e => e.logprobs);
  const final = events[events.length - 1].response;
  check(JSON.stringify(deltaLps) === JSON.stringify(final.output[0].content[0].logprobs) && deltaLps.length === final.usage.output_tokens,
        `streamed output_text.delta log-probs == the final object's (${deltaLps.length} entries)`);
  // stop and top_k (sampling extensions) are honoured, as on chat completions.
  const chatStop = await client.chat.completions.create({model, max_tokens: 30, temperature: 0, stop: ["e"], messages: [{role: "user", content: "hi"}]});
  const respStop = await client.responses.create({model, input: "hi", max_output_tokens: 30, temperature: 0, stop: ["e"]});
  check(respStop.output_text === chatStop.choices[0].message.content && !respStop.output_text.includes("e"),
        `stop reaches the engine (${JSON.stringify(respStop.output_text)})`);
  const k1 = await client.responses.create({model, input: "hi", max_output_tokens: 16, temperature: 1.5, seed: 9, top_k: 1});
  const greedy = await client.responses.create({model, input: "hi", max_output_tokens: 16, temperature: 0});
  check(k1.output_text === greedy.output_text, "top_k 1 at temperature 1.5 is the greedy answer");
  // Refused by name: fields not implemented, unknown fields, values not implemented.
  for (const [body, field] of [[{foo: 1}, "foo"], [{truncation: "auto"}, "truncation"], [{include: ["reasoning.encrypted_content"]}, "include"],
                               [{top_logprobs: 21}, "top_logprobs"], [{metadata: {a: 1}}, "metadata"], [{background: true}, "background"]]) {
    const x = await post(stories.base, "/v1/responses", {model, input: "hi", max_output_tokens: 2, ...body});
    check(x.status === 400 && x.body.error?.message.includes(field), `responses ${JSON.stringify(body)}: 400 naming it (${x.body.error?.message})`);
  }
} catch (e) {
  check(false, `unexpected: ${e.stack ?? e}`);
} finally {
  check(await stories.stop() === 0, "stories260K server shut down cleanly");
  check(await qwen.stop() === 0, "qwen3 server shut down cleanly");
  (await import("node:fs")).rmSync(dir, {recursive: true, force: true});
}
done("server_conformance_chat");
