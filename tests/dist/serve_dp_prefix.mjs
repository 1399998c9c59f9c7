// Issue 35 (Router: `--dp` inside one mpirun job uses the same policy code): `mpirun -np 2 deepinfer serve --dp 2`
// routes each request to the group whose prefix cache holds the most of its leading blocks, as the router's
// KvEventsPolicy scores them from each group's KV events (shipped to rank 0 inside the per-iteration Sync).
//
// A multi-tenant workload: 16 system prefixes of 4 blocks each, random suffixes, all from tests/common/rng.mjs.
// Phase A sends each tenant once (its prefix lands in one group's cache); then a pause longer than the policy's
// prediction TTL (5 s), so what phase B's routing knows of the caches comes from the groups' events alone; phase
// B sends every tenant twice more, interleaved, 4 at a time. Its prefix hit rate (cached_tokens summed / the
// ideal, every phase B prompt's whole prefix) must be near ideal with --dp-policy cache_aware and clearly above
// --dp-policy least_load's (each request to the group with fewer in flight, wherever its prefix is cached), and
// both runs must answer the same (greedy). Under either policy, rank 0's GET /v1/kv_events (what `deepinfer route`
// sees of this job) reports every group's blocks: after phase A its snapshot holds all 16 tenants' prefix blocks,
// although each group cached only the tenants routed to it.
import {startServer, metrics, checker, chainHashes, kvSnapshot} from "../server/common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const BLOCK = 16, TENANTS = 16, PREFIX_BLOCKS = 4, PHASE_B_PER_TENANT = 2, CONCURRENCY = 4;
const MIN_HIT = 0.9;     // cache_aware: phase B's hit rate over the ideal, at least (the routing is deterministic
                         // given the events; 10% leaves room for a request that arrives in the same iteration as
                         // an eviction)
const MIN_MARGIN = 0.15;  // and above least_load's by this much (least_load lands on the cached group about half the time)
const rng = makeRng(35);
const tok = () => rng.range(1, 509);  // the tiny vocabulary's ordinary ids
const prefixes = Array.from({length: TENANTS}, () => Array.from({length: PREFIX_BLOCKS * BLOCK}, tok));
const withSuffix = t => [...prefixes[t], ...Array.from({length: rng.range(1, 2 * BLOCK)}, tok)];
const phaseA = prefixes.map((_, t) => ({t, ids: withSuffix(t)}));
const phaseB = [];
for (let k = 0; k < PHASE_B_PER_TENANT; ++k) for (let t = 0; t < TENANTS; ++t) phaseB.push({t, ids: withSuffix(t)});
for (let i = phaseB.length - 1; i > 0; --i) {  // interleaved: a seeded shuffle
  const j = rng.int(i + 1);
  [phaseB[i], phaseB[j]] = [phaseB[j], phaseB[i]];
}

async function send(base, reqs) {
  const out = new Array(reqs.length);
  let next = 0;
  await Promise.all(Array.from({length: CONCURRENCY}, async () => {
    while (next < reqs.length) {
      const i = next++;
      const r = await fetch(`${base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify({prompt: reqs[i].ids, max_tokens: 2, temperature: 0})});
      const j = await r.json();
      out[i] = {text: j.choices?.[0]?.text, cached: j.usage?.prompt_tokens_details?.cached_tokens ?? NaN};
    }
  }));
  return out;
}

async function run(policy) {
  process.env.DEEPINFER_SERVE_MPI = "2";
  process.env.DEEPINFER_SERVE_ARGS = `--dp 2 --dp-policy ${policy}`;
  const srv = await startServer(bin);
  const a = await send(srv.base, phaseA);
  await new Promise(r => setTimeout(r, 5500));
  const snap = await kvSnapshot(srv.base);
  const held = prefixes.filter(p => chainHashes(p, BLOCK).every(h => snap?.hashes?.includes(h))).length;
  check(held === TENANTS, `${policy}: rank 0's /v1/kv_events snapshot holds every tenant's prefix blocks (${held} of ${TENANTS}), ` +
        `from both groups (${snap?.hashes?.length} blocks)`);
  const b = await send(srv.base, phaseB);
  const m = await metrics(srv.base);
  const code = await srv.stop();
  const cached = b.reduce((s, x) => s + x.cached, 0), ideal = phaseB.length * PREFIX_BLOCKS * BLOCK;
  const decisions = outcome => [0, 1].map(g => Number(new RegExp(
    `^deepinfer_dp_routing_decisions_total\\{[^}]*dp_rank="${g}",outcome="${outcome}"\\} ([0-9.e+-]+)$`, "m").exec(m.text)?.[1]));
  console.log(`${policy}: phase B cached ${cached} of ${ideal} ideal prompt tokens (hit rate ${(cached / ideal).toFixed(3)}); ` +
              `decisions per group: cache_hit ${decisions("cache_hit")}, cache_miss ${decisions("cache_miss")}, ` +
              `least_load ${decisions("least_load")}`);
  check(code === 0, `${policy}: the job exits 0 after SIGTERM (exit ${code})`);
  const blocks = name => [0, 1].reduce((s, g) => s + Number(new RegExp(
    `^${name}\\{[^}]*dp_rank="${g}"\\} ([0-9.e+-]+)$`, "m").exec(m.text)?.[1]), 0);
  const matched = blocks("deepinfer_dp_routing_matched_blocks_total"), promptBlocks = blocks("deepinfer_dp_routing_prompt_blocks_total");
  console.log(`${policy}: the chosen groups held ${matched} of ${promptBlocks} prompt blocks at routing (by their events)`);
  return {rate: cached / ideal, texts: [...a, ...b].map(x => x.text), decisions, matched, log: srv.log()};
}

const aware = await run("cache_aware");
const least = await run("least_load");
check(aware.texts.every(t => typeof t === "string") && JSON.stringify(aware.texts) === JSON.stringify(least.texts),
      `${aware.texts.length} greedy answers equal under both policies`);
check(aware.rate >= MIN_HIT, `cache_aware: phase B hit rate ${aware.rate.toFixed(3)} >= ${MIN_HIT} of ideal`);
check(aware.rate >= least.rate + MIN_MARGIN,
      `cache_aware's hit rate ${aware.rate.toFixed(3)} beats least_load's ${least.rate.toFixed(3)} by >= ${MIN_MARGIN}`);
const hits = aware.decisions("cache_hit");
check(hits[0] > 0 && hits[1] > 0 && hits[0] + hits[1] >= MIN_HIT * phaseB.length,
      `cache_aware: /metrics counts cache_hit decisions on both groups (${hits}) for >= ${MIN_HIT} of phase B's ${phaseB.length}`);
// Phase B's every prompt starts with its tenant's 4 cached blocks: at routing the chosen group held them.
check(aware.matched >= MIN_HIT * phaseB.length * PREFIX_BLOCKS && aware.matched <= (phaseA.length + phaseB.length) * (PREFIX_BLOCKS + 2),
      `cache_aware: /metrics counts ${aware.matched} leading prompt blocks held by the chosen group (>= ${MIN_HIT * phaseB.length * PREFIX_BLOCKS})`);
check(/shipped \d+ KV event hashes to rank 0/.test(aware.log) && /policy cache_aware_kv_events: cache hits per group/.test(aware.log),
      "the drain log reports the shipped KV events and the routing");
done("serve_dp_prefix");
