// Router benchmark (docs/benchmarks.md): three `deepinfer serve` replicas (stories260K, one thread each) on
// loopback behind `deepinfer route`.
// 1. Added latency: the same small non-streamed completion (1 token) sent N times straight to a replica and
//    through a router whose only replica it is; medians and means of the two, and their difference.
//    The same through a router with --model (it tokenizes each prompt to hash its blocks).
// 2. The multi-tenant workload of tests/server/router.mjs (8 shared prefixes, R streamed requests, 4 clients)
//    through cache_aware (the text tree), cache_aware with --model (the replicas' KV events), round_robin and
//    least_load: prefix-hit rate from the replicas' own
//    usage.prompt_tokens_details.cached_tokens, the ideal, mean TTFT and wall time.
// usage: node bench/router.mjs build/deepinfer [requests=400] [--kv-cache SIZE (per replica)]
import path from "node:path";
import {startServer, metrics, sharedModels} from "../tests/server/common.mjs";
import {makeWorkload, startRouter, runWorkload, idealHitRate} from "../tests/server/router_workload.mjs";

const bin = process.argv[2] ?? "build/deepinfer";
const requests = Number(process.argv[3] ?? 400);
const kvAt = process.argv.indexOf("--kv-cache");
const replicaArgs = ["-t", "1", "--prep-workers", "1", ...(kvAt > 0 ? ["--kv-cache", process.argv[kvAt + 1]] : [])];
const reps = await Promise.all([0, 1, 2].map(() => startServer(bin, replicaArgs)));
const urls = reps.map(r => r.base);
const modelArgs = ["--model", path.join(sharedModels, "stories260K.gguf")];
const stats = xs => {
  const s = [...xs].sort((a, b) => a - b);
  return {median: s[Math.floor(s.length / 2)], mean: s.reduce((a, b) => a + b, 0) / s.length};
};
try {
  const N = 300;
  const once = async base => {
    const t0 = performance.now();
    const r = await fetch(`${base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                     body: JSON.stringify({prompt: "Once upon a time", max_tokens: 1, temperature: 0})});
    await r.text();
    return performance.now() - t0;
  };
  for (const [label, extra] of [["text tree", []], ["--model", modelArgs]]) {
    const solo = await startRouter(bin, [urls[0]], ["-q", ...extra]);
    for (let i = 0; i < 20; ++i) { await once(urls[0]); await once(solo.base); }  // warm-up
    const direct = [], routed = [];
    for (let i = 0; i < N; ++i) { direct.push(await once(urls[0])); routed.push(await once(solo.base)); }  // interleaved
    await solo.stop();
    const d = stats(direct), r = stats(routed);
    console.log(`added latency, router ${label} (${N} x 1-token completion, sequential): direct median ${d.median.toFixed(3)} ms mean ${d.mean.toFixed(3)} ms; ` +
                `routed median ${r.median.toFixed(3)} ms mean ${r.mean.toFixed(3)} ms; added median ${(r.median - d.median).toFixed(3)} ms ` +
                `mean ${(r.mean - d.mean).toFixed(3)} ms`);
  }
  const phases = {cache_aware: ["ca", []], "cache_aware --model": ["ck", modelArgs], round_robin: ["rr", []], least_load: ["ll", []]};
  for (const policy of Object.keys(phases)) {
    const [phase, extra] = phases[policy];
    const router = await startRouter(bin, urls, ["--policy", policy.split(" ")[0], "-q", ...extra]);
    if (extra.length)  // the replicas' snapshots first
      for (let i = 0; i < 50; ++i) {
        const m = await metrics(router.base);
        if (urls.every(u => m.text.includes(`deepinfer_router_replica_kv_synced{replica="${u}"} 1`))) break;
        await new Promise(res => setTimeout(res, 100));
      }
    const items = makeWorkload({phase, requests});
    const ideal = await idealHitRate(urls[0], items);
    const w = await runWorkload(router.base, items, {concurrency: 4, maxTokens: 4});
    const per = urls.map((u, k) => w.results.filter(x => x.replica === String(k)).length);
    console.log(`${policy.padEnd(19)} ${requests} requests: hit rate ${w.hitRate.toFixed(3)} (ideal ${ideal.toFixed(3)}), ` +
                `mean TTFT ${w.meanTtft.toFixed(2)} ms, wall ${(w.wall / 1000).toFixed(2)} s, per replica ${per.join("/")}`);
    await router.stop();
  }
} finally {
  for (const s of reps) await s.stop();
}
