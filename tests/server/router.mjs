// `deepinfer route` over three `deepinfer serve` replicas on loopback (issue 35, must-show 3 and 4):
// 1. a multi-tenant workload (8 shared "system prompt" prefixes, 120 streamed requests, 4 clients): cache_aware
//    reaches a prefix-hit rate within 10% of the ideal and beats round_robin, both measured from the replicas' own
//    usage.prompt_tokens_details.cached_tokens (mean TTFT printed for both);
// 3. the openai SDK (chat, streamed chat, completion, response) through the router, which has an API key of its own and,
//    among its replicas, one unreachable and one serving another model (4: both logged, shown in /metrics,
//    excluded; requests still served); the usage shape, cached_tokens included, comes through;
// 2. kill -9 of one replica in the middle of a run of non-streamed requests: every request succeeds (the ones in
//    flight there are retried), the router's /metrics and log report the replica down, and a replica started
//    again on the same port is taken back in; a stream cut by the kill ends with an error event; a replica that
//    hangs (SIGSTOP) is taken out when /health goes silent, its calls in flight retried, and taken back in after
//    SIGCONT;
// 4. every replica unreachable: a clear log line, and requests get 503 with a JSON error.
import net from "node:net";
import {startServer, OpenAI, checker, metrics} from "./common.mjs";
import {makeWorkload, startRouter, runWorkload, idealHitRate} from "./router_workload.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const replicaArgs = ["-t", "1", "--prep-workers", "1"];

// A loopback port nothing listens on.
async function deadUrl() {
  const srv = net.createServer();
  await new Promise(r => srv.listen(0, "127.0.0.1", r));
  const port = srv.address().port;
  await new Promise(r => srv.close(r));
  return `http://127.0.0.1:${port}`;
}
const sleep = ms => new Promise(r => setTimeout(r, ms));
const label = url => `{replica="${url}"}`;
const metric = (m, name, url) => m.get(`${name}${url ? label(url).replace(/[{}]/g, "\\$&") : ""}`);

const reps = await Promise.all([0, 1, 2].map(() => startServer(bin, replicaArgs)));
const other = await startServer(bin, [...replicaArgs, "--served-model-name", "another-model"]);
const urls = reps.map(r => r.base);
const routers = [];
let victim = 2;
let restarted = null, stopped = null;
try {
  // 1. Hit rate: cache_aware vs round_robin on the same workload shape (each run salts its prompts, so neither
  // finds the other's prefixes cached).
  const runs = {};
  for (const [phase, policy] of [["a", "cache_aware"], ["b", "round_robin"]]) {
    const r = await startRouter(bin, urls, ["--policy", policy]);
    routers.push(r);
    const items = makeWorkload({phase});
    const ideal = await idealHitRate(urls[0], items);
    const w = await runWorkload(r.base, items, {concurrency: 4, maxTokens: 4});
    const m = await metrics(r.base);
    const per = urls.map((u, k) => w.results.filter(x => x.replica === String(k)).length);
    console.log(`${policy}: hit rate ${w.hitRate.toFixed(3)} (ideal ${ideal.toFixed(3)}), mean TTFT ${w.meanTtft.toFixed(1)} ms, ` +
                `requests per replica ${per.join("/")}, router's estimate per replica ` +
                urls.map(u => metric(m, "deepinfer_router_replica_prefix_hit_rate_estimate", u).toFixed(2)).join("/"));
    runs[policy] = {...w, ideal, m};
    await r.stop();
    routers.pop();
  }
  const ca = runs.cache_aware, rr = runs.round_robin;
  check(ca.results.length === 120 && ca.results.every(x => x.prompt > 100 && x.ttft !== null), "120 streamed requests through the router");
  check(ca.hitRate >= 0.9 * ca.ideal, `cache_aware hit rate ${ca.hitRate.toFixed(3)} within 10% of the ideal ${ca.ideal.toFixed(3)}`);
  check(ca.hitRate > rr.hitRate + 0.05, `cache_aware beats round_robin on hit rate: ${ca.hitRate.toFixed(3)} vs ${rr.hitRate.toFixed(3)}`);
  check(ca.m.text.includes('deepinfer_router_decisions_total{policy="cache_aware",outcome="cache_hit"}') &&
        ca.m.get('deepinfer_router_decisions_total\\{policy="cache_aware",outcome="cache_hit"\\}') > 80,
        `cache_aware routed most requests as cache hits (${ca.m.get('deepinfer_router_decisions_total\\{policy="cache_aware",outcome="cache_hit"\\}')})`);

  // 3 + 4: the SDK through a router with an API key, an unreachable replica and one serving another model.
  const dead = await deadUrl();
  const r3 = await startRouter(bin, [...urls, dead, other.base], ["--api-key", "sekret"]);
  routers.push(r3);
  {
    const log = r3.log();
    check(log.includes(`replica ${dead} unreachable at start`), `unreachable replica logged: ${log.split("\n").find(l => l.includes(dead))}`);
    check(/serves model 'another-model', not 'stories260K.gguf'.*excluded/.test(log), "replica with another model logged and excluded");
    const m = await metrics(r3.base);
    check(metric(m, "deepinfer_router_replica_up", dead) === 0 && metric(m, "deepinfer_router_replica_wrong_model", other.base) === 1 &&
          urls.every(u => metric(m, "deepinfer_router_replica_up", u) === 1), "/metrics: 3 replicas up, the dead one down, the other model's excluded");
    const noKey = await fetch(`${r3.base}/v1/models`);
    check(noKey.status === 401, `the router's own API key is required (${noKey.status})`);
    const client = new OpenAI({baseURL: `${r3.base}/v1`, apiKey: "sekret", maxRetries: 0});
    const models = await client.models.list();
    check(models.data.length === 1 && models.data[0].id === "stories260K.gguf", "models.list from a replica");
    const model = "stories260K.gguf";
    const chat = await client.chat.completions.create({model, messages: [{role: "user", content: "Tell me a story"}], max_tokens: 12});
    check(chat.object === "chat.completion" && typeof chat.choices[0].message.content === "string" && chat.usage.completion_tokens > 0,
          `SDK chat completion: ${JSON.stringify(chat.choices[0].message.content.slice(0, 40))}`);
    let text = "", chunks = 0, usage = null;
    for await (const ch of await client.chat.completions.create({model, messages: [{role: "user", content: "Tell me a story"}], max_tokens: 12,
                                                                  stream: true, stream_options: {include_usage: true}})) {
      ++chunks;
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) text += c.delta?.content ?? "";
    }
    check(chunks > 3 && text.length > 0 && usage?.completion_tokens > 0, `SDK streamed chat completion: ${chunks} chunks`);
    const c1 = await client.completions.create({model, prompt: "Once upon a time", max_tokens: 30, temperature: 0});
    check(c1.choices[0].text.startsWith(", there was a little girl named Lily"), `SDK completion: ${JSON.stringify(c1.choices[0].text.slice(0, 40))}`);
    const resp = await client.responses.create({model, input: "Tell me a story", max_output_tokens: 8});
    check(resp.object === "response" && ["completed", "incomplete"].includes(resp.status) && typeof resp.output_text === "string" &&
          typeof resp.usage?.input_tokens_details?.cached_tokens === "number", `SDK response (/v1/responses): ${JSON.stringify(resp.output_text)}`);
    // The same long prompt twice: the second lands where the first was cached, and cached_tokens comes through.
    const long = makeWorkload({phase: "sdk", tenants: 1, requests: 1})[0].prompt;
    await client.completions.create({model, prompt: long, max_tokens: 2});
    const again = await client.completions.create({model, prompt: long + " again", max_tokens: 2});
    check(again.usage.prompt_tokens_details?.cached_tokens >= 100,
          `usage.prompt_tokens_details.cached_tokens through the router: ${JSON.stringify(again.usage.prompt_tokens_details)}`);
    const bad = await fetch(`${r3.base}/v1/completions`, {method: "POST", headers: {Authorization: "Bearer sekret", "Content-Type": "application/json"},
                                                           body: JSON.stringify({model, prompt: "x", max_tokens: -3})});
    const badBody = await bad.json();
    check(bad.status === 400 && badBody.error?.message, `a replica's error passes through: ${bad.status} ${badBody.error?.message}`);
  }
  await r3.stop();
  routers.pop();

  // 2. kill -9 one replica while non-streamed requests are in flight on it (through r2), and while a stream is
  // in flight on it (through rS, whose only replica it is).
  const r2 = await startRouter(bin, urls, ["--policy", "least_load", "--health-interval", "0.2", "--health-timeout", "0.5"]);
  routers.push(r2);
  const rS = await startRouter(bin, [urls[victim]]);
  routers.push(rS);
  {
    const streamRes = await fetch(`${rS.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({prompt: "Once", max_tokens: 480, ignore_eos: true, temperature: 0, stream: true})});
    const streamBody = (async () => {
      let text = "";
      for await (const piece of streamRes.body) text += new TextDecoder().decode(piece);
      return text;
    })();
    const items = makeWorkload({phase: "kill", requests: 36});
    let next = 0;
    const statuses = [];
    const clients = Array.from({length: 6}, async () => {
      while (next < items.length) {
        const i = next++;
        const r = await fetch(`${r2.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
          body: JSON.stringify({prompt: items[i].prompt, max_tokens: 150, ignore_eos: true, temperature: 0})});
        const b = await r.json();
        statuses[i] = r.status === 200 && b.choices?.[0]?.text?.length > 0 ? 200 : r.status;
      }
    });
    let killedWith = 0;
    for (let i = 0; i < 400; ++i) {
      const m = await metrics(r2.base);
      killedWith = metric(m, "deepinfer_router_replica_in_flight", urls[victim]);
      if (killedWith >= 1 && next >= 6) break;
      await sleep(5);
    }
    reps[victim].proc.kill("SIGKILL");
    await Promise.all(clients);
    const streamed = await streamBody;
    check(/data: \{"error":\{"code":502,"message":"the replica failed in the middle of the stream/.test(streamed) && !streamed.includes("[DONE]"),
          `a stream cut by the kill ends with an error event: ${JSON.stringify(streamed.slice(-160))}`);
    check((await metrics(rS.base)).get("deepinfer_router_stream_errors_total") === 1, "/metrics counts the cut stream");
    await rS.stop();
    routers.splice(routers.indexOf(rS), 1);
    const ok = statuses.filter(s => s === 200).length;
    check(ok === items.length, `every non-streamed request succeeded after kill -9 of a replica with ${killedWith} in flight: ${ok}/${items.length}`);
    await sleep(500);
    const m = await metrics(r2.base);
    check(metric(m, "deepinfer_router_replica_up", urls[victim]) === 0 && metric(m, "deepinfer_router_replica_down_total", urls[victim]) >= 1,
          "/metrics reports the killed replica down");
    check(m.get("deepinfer_router_retries_total") >= 1, `its requests in flight were retried (${m.get("deepinfer_router_retries_total")})`);
    const downLine = r2.log().split("\n").find(l => l.includes(`replica ${urls[victim]} down`));
    check(!!downLine, `the log reports it: ${downLine}`);
    // Back on the same port: taken in again by the health check.
    restarted = await startServer(bin, [...replicaArgs, "--port", String(reps[victim].port)]);
    let up = 0;
    for (let i = 0; i < 50 && up !== 1; ++i) {
      await sleep(100);
      up = metric(await metrics(r2.base), "deepinfer_router_replica_up", urls[victim]);
    }
    check(up === 1 && r2.log().includes(`replica ${urls[victim]} answers again: taken back in`), "the restarted replica is taken back in");

    // A replica that hangs (SIGSTOP) stops answering /health: taken out, its calls in flight aborted and retried;
    // after SIGCONT it is taken back in.
    const retriesBefore = (await metrics(r2.base)).get("deepinfer_router_retries_total");
    const hung = makeWorkload({phase: "hang", requests: 18});
    let nextHung = 0;
    const hungStatuses = [];
    const hungClients = Array.from({length: 6}, async () => {
      while (nextHung < hung.length) {
        const i = nextHung++;
        const r = await fetch(`${r2.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
          body: JSON.stringify({prompt: hung[i].prompt, max_tokens: 150, ignore_eos: true, temperature: 0})});
        hungStatuses[i] = r.status;
        await r.text();
      }
    });
    let inFlight = 0;
    for (let i = 0; i < 400 && inFlight < 1; ++i) {
      inFlight = metric(await metrics(r2.base), "deepinfer_router_replica_in_flight", urls[0]);
      if (inFlight < 1) await sleep(5);
    }
    reps[0].proc.kill("SIGSTOP");
    stopped = reps[0];
    await Promise.all(hungClients);
    const mh = await metrics(r2.base);
    check(hungStatuses.filter(x => x === 200).length === hung.length && metric(mh, "deepinfer_router_replica_up", urls[0]) === 0 &&
          mh.get("deepinfer_router_retries_total") > retriesBefore && r2.log().includes(`replica ${urls[0]} down (stopped answering GET /health`),
          `a hung replica (${inFlight} in flight) is taken out on its /health silence and its requests retried: ` +
          `${hungStatuses.filter(x => x === 200).length}/${hung.length} ok, retries ${retriesBefore} -> ${mh.get("deepinfer_router_retries_total")}`);
    reps[0].proc.kill("SIGCONT");
    stopped = null;
    up = 0;
    for (let i = 0; i < 50 && up !== 1; ++i) {
      await sleep(100);
      up = metric(await metrics(r2.base), "deepinfer_router_replica_up", urls[0]);
    }
    check(up === 1, "after SIGCONT it is taken back in");
  }
  await r2.stop();
  routers.pop();

  // 4. No replica reachable.
  const deadA = await deadUrl(), deadB = await deadUrl();
  const r4 = await startRouter(bin, [deadA, deadB]);
  routers.push(r4);
  {
    check(r4.log().includes("no replica reachable"), `logged: ${r4.log().split("\n").find(l => l.includes("no replica"))}`);
    const r = await fetch(`${r4.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                         body: JSON.stringify({prompt: "hi", max_tokens: 2})});
    const body = await r.json();
    check(r.status === 503 && body.error?.type === "server_error" && /no replica available: 0 of 2 replicas up/.test(body.error.message),
          `503 with a JSON error: ${JSON.stringify(body.error)}`);
    const h = await fetch(`${r4.base}/health`);
    check(h.status === 503, `/health 503 (${h.status})`);
  }
  await r4.stop();
  routers.pop();
} finally {
  if (stopped) stopped.proc.kill("SIGCONT");
  for (const r of routers) await r.stop();
  for (let i = 0; i < reps.length; ++i) if (i !== victim) await reps[i].stop();
  if (restarted) await restarted.stop();
  await other.stop();
}
done("router");
