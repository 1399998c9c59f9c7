// `route --model` tokenizes chat requests as `serve` does (issue 35: the router's KV-events policy hashes the
// prompt's blocks from its own token ids, which must be the replica's). For chat requests of several shapes
// (system prompt, multi-turn, content parts, tool definitions (a named tool_choice: the tiny model's template has
// no tool-call format of its own) and a tool call with its result, non-ASCII text,
// long turns), through a router with one replica:
// - the router's token count (its debug log) equals the replica's usage.prompt_tokens, exactly;
// - sent again once the router's predictions have expired (5 s), the router finds, by the replica's KV events
//   alone, every full block of the prompt, which the replica reports as cached: the block hashes of both
//   tokenizations agree.
// Fails when the router renders or tokenizes differently (another template, a BOS, a special token handled as
// text): the counts differ, or the events name hashes the router does not compute (0 blocks matched).
import path from "node:path";
import {startServer, checker, sharedModels} from "./common.mjs";
import {startRouter} from "./router_workload.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const model = path.join(sharedModels, "stories260K.gguf");
const rng = makeRng(3535);
const words = ["once", "upon", "a", "time", "little", "girl", "named", "Lily", "dog", "park", "happy", "sun", "tree"];
const sentence = n => Array.from({length: n}, () => rng.pick(words)).join(" ");
const shapes = [
  ["system and user", [{role: "system", content: `You are ${sentence(12)}.`}, {role: "user", content: sentence(40)}]],
  ["multi-turn", [{role: "user", content: sentence(20)}, {role: "assistant", content: sentence(25)},
                  {role: "user", content: sentence(30)}]],
  ["content parts", [{role: "user", content: [{type: "text", text: sentence(15)}, {type: "text", text: sentence(25)}]}]],
  ["non-ASCII", [{role: "user", content: `Héllo — ${sentence(20)} 日本語 🙂 ${sentence(20)}`}]],
  ["long turn", [{role: "system", content: sentence(30)}, {role: "user", content: sentence(160)}]],
];
const tools = [{type: "function", function: {name: "get_weather", description: "Weather of a city",
                                             parameters: {type: "object", properties: {city: {type: "string"}}, required: ["city"]}}}];
shapes.push(["tools and a tool call", [{role: "user", content: `What is the weather in Paris? ${sentence(20)}`},
  {role: "assistant", content: "", tool_calls: [{id: "call_1", type: "function", function: {name: "get_weather", arguments: "{\"city\":\"Paris\"}"}}]},
  {role: "tool", tool_call_id: "call_1", content: `sunny ${sentence(10)}`}], tools]);

async function chat(base, messages, toolList) {
  const r = await fetch(`${base}/v1/chat/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({messages, max_tokens: 2, temperature: 0,
                         ...(toolList ? {tools: toolList, tool_choice: {type: "function", function: {name: toolList[0].function.name}}} : {})})});
  const body = await r.json();
  if (r.status !== 200) throw new Error(`status ${r.status}: ${JSON.stringify(body)}`);
  return {prompt: body.usage.prompt_tokens, cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0};
}
const sleep = ms => new Promise(r => setTimeout(r, ms));
const BLOCK = 16;

const replica = await startServer(bin, ["--block-size", String(BLOCK)]);
process.env.DEEPINFER_LOG = "debug";
const router = await startRouter(bin, [replica.base], ["--model", model]);
delete process.env.DEEPINFER_LOG;
try {
  // The router's lines for chat requests, in order: "route: /v1/chat/completions: N prompt tokens; replica 0 holds
  // M of its K full blocks".
  const routed = () => [...router.log().matchAll(/route: \/v1\/chat\/completions: (\d+) prompt tokens; replica \d+ holds (\d+) of its (\d+) full blocks/g)]
    .map(m => ({tokens: Number(m[1]), matched: Number(m[2]), blocks: Number(m[3])}));
  for (let t = 0; t < 100 && !/subscribed|snapshot/.test(router.log()); ++t) await sleep(50);
  const first = [];
  for (const [, messages, toolList] of shapes) first.push(await chat(router.base, messages, toolList));
  const lines1 = routed();
  check(lines1.length === shapes.length, `the router logged its token count for each chat request (${lines1.length} of ${shapes.length})`);
  shapes.forEach(([label], i) =>
    check(lines1[i]?.tokens === first[i].prompt, `${label}: the router's ${lines1[i]?.tokens} prompt tokens = the replica's ${first[i].prompt}`));
  await sleep(5500);  // the router's predicted blocks expire: what it matches now comes from the replica's events
  const second = [];
  for (const [, messages, toolList] of shapes) second.push(await chat(router.base, messages, toolList));
  const lines2 = routed().slice(shapes.length);
  shapes.forEach(([label], i) => {
    // Every full block of the prompt is in the replica's cache (its first run stored them), so the router, by
    // its own hashes, must find them all; the replica reuses them all but one when the prompt ends on a block
    // boundary (its last token always runs).
    const full = Math.floor(second[i].prompt / BLOCK), reused = Math.floor((second[i].prompt - 1) / BLOCK);
    check(full > 0 && lines2[i]?.matched === full && second[i].cached === reused * BLOCK,
          `${label}: the router found ${lines2[i]?.matched} of ${full} full blocks by the replica's events; the replica reused ${second[i].cached / BLOCK}`);
  });
} finally {
  await router.stop();
  await replica.stop();
}
done("router_chat_tokens");
