// The router fed by KV events (issue 35, "router from KV events"):
// 1. serve's GET /v1/kv_events on a replica with a tiny KV pool and an API key: 401 without the key; a snapshot
//    first (block size, hash scheme, the prompt digest /v1/models reports); after a completion, a delta that
//    stores exactly the prompt's block chain hashes (computed here from /tokenize ids with the FNV-1a chain of
//    src/kv/prefix_hash.h); after enough other prompts to fill the pool, a delta that removes them.
// 2. three replicas with small KV pools behind `route --model` (cache_aware from KV events) on a multi-tenant
//    workload (8 long shared prefixes, 96 streamed requests, seeded): the prefix-hit rate from the replicas'
//    usage.prompt_tokens_details.cached_tokens is within 10% of the ideal and above round_robin's on the same
//    replicas (a salted workload of its own); the router's /metrics shows the events it received, its per-replica
//    events-based hit estimate, and cache_hit decisions; a replica stopped is forgotten (unsynced, no blocks), and
//    started again on its port is subscribed to again and its cold snapshot replaces the set.
// 3. a router whose chat template differs from the replicas' reports them mismatched (/metrics, log) and still
//    serves requests.
// 4. the KV tiers' blocks are events too: on a replica with a tiny pool and --kv-offload-ram, the prompt's blocks
//    are reported stored with medium "ram", stay there when the pool evicts them (medium "pool" removed), and a new
//    subscriber's snapshot (sliced: --kv-events-slice 4) lists them under tiers.ram; behind `route --model`, that prompt then goes to this
//    replica as a cache hit (a tier hit) rather than to an idle replica that never saw it, and is served as cached.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, checker, metrics, sharedModels, chainHashes} from "./common.mjs";
import {makeWorkload, startRouter, runWorkload, idealHitRate} from "./router_workload.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const model = path.join(sharedModels, "stories260K.gguf");
const sleep = ms => new Promise(r => setTimeout(r, ms));

// A GET /v1/kv_events subscription: its events in order, and a wait for one that satisfies `pred`.
async function subscribe(base, key) {
  const ctl = new AbortController();
  const r = await fetch(`${base}/v1/kv_events`, {headers: key ? {Authorization: `Bearer ${key}`} : {}, signal: ctl.signal});
  const events = [];
  let waiters = [];
  (async () => {
    const dec = new TextDecoder();
    let buf = "";
    try {
      for await (const piece of r.body) {
        buf += dec.decode(piece, {stream: true});
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = ev.split("\n").find(l => l.startsWith("data: "));
          if (data) events.push(JSON.parse(data.slice(6)));
          waiters = waiters.filter(w => !w());
        }
      }
    } catch {}
  })();
  const waitFor = (pred, ms = 5000) => new Promise(resolve => {
    const t = setTimeout(() => resolve(null), ms);
    const w = () => { const e = events.find(pred); if (e) { clearTimeout(t); resolve(e); return true; } return false; };
    if (!w()) waiters.push(w);
  });
  return {status: r.status, headers: r.headers, events, waitFor, close: () => ctl.abort()};
}

async function tokenize(base, prompt, key) {
  const r = await fetch(`${base}/tokenize`, {method: "POST", headers: {"Content-Type": "application/json", Authorization: `Bearer ${key}`},
                                             body: JSON.stringify({prompt})});
  return (await r.json()).tokens;
}

async function complete(base, prompt, key) {
  const r = await fetch(`${base}/v1/completions`, {method: "POST",
    headers: {"Content-Type": "application/json", ...(key ? {Authorization: `Bearer ${key}`} : {})},
    body: JSON.stringify({prompt, max_tokens: 2, temperature: 0})});
  return r.json();
}

const servers = [];
const routers = [];
try {
  // 1. The endpoint on a replica of 24 blocks of 16 tokens (stories260K: 5 layers x 32 K and 32 V floats x 4 bytes a token).
  const KEY = "kv-sekret";
  const tiny = await startServer(bin, ["-t", "1", "--prep-workers", "1", "--api-key", KEY, "--kv-cache", String(24 * 16 * 1280),
                                       "--max-num-seqs", "2"]);
  servers.push(tiny);
  const blocksLine = tiny.log().match(/KV cache: (\d+) blocks/);
  console.log(`tiny replica: ${blocksLine ? blocksLine[0] : tiny.log().split("\n").find(l => l.includes("KV cache"))}`);
  const denied = await fetch(`${tiny.base}/v1/kv_events`);
  check(denied.status === 401, `GET /v1/kv_events without the API key: ${denied.status}`);
  const sub = await subscribe(tiny.base, KEY);
  check(sub.status === 200 && (sub.headers.get("content-type") ?? "").startsWith("text/event-stream"), `subscribed: ${sub.status} ${sub.headers.get("content-type")}`);
  const snap = await sub.waitFor(e => e.type === "snapshot");
  const models = await (await fetch(`${tiny.base}/v1/models`, {headers: {Authorization: `Bearer ${KEY}`}})).json();
  check(snap && snap.block_size === 16 && snap.hash_scheme === "fnv1a64-chain-v1" && snap.group === 0 && Array.isArray(snap.hashes) &&
        snap.hashes.length === 0 && /^[0-9a-f]{16}$/.test(snap.prompt_digest) && snap.prompt_digest === models.data[0].prompt_digest,
        `first event: an empty snapshot with block size, hash scheme and the prompt digest of /v1/models (${JSON.stringify(snap)?.slice(0, 200)})`);
  const p1 = "Once upon a time there was a little girl who liked to play in the park with her dog and her friends every single day.";
  const ids1 = await tokenize(tiny.base, p1, KEY);
  const want = chainHashes(ids1, 16);
  await complete(tiny.base, p1, KEY);
  const storedAll = await sub.waitFor(() => want.every(h => sub.events.some(e => e.type === "delta" && e.stored.some(s => s.hash === h))));
  const stored = sub.events.filter(e => e.type === "delta").flatMap(e => e.stored);
  check(want.length >= 2 && storedAll !== null, `the prompt's ${want.length} block hashes (from /tokenize ids) reported stored`);
  const s1 = stored.find(s => s.hash === want[1]);
  check(s1 && s1.parent === want[0] && stored.find(s => s.hash === want[0])?.parent === "0000000000000000",
        "each stored block names its parent (the previous block's chain hash; zeros for the first)");
  // Other prompts, enough to fill 24 blocks: the pool evicts p1's blocks and says so.
  for (let i = 0; i < 6; ++i)
    await complete(tiny.base, `Prompt ${i}: the sun was big and the cat saw a tree, and they ran home to mom and dad. ${"x ".repeat(30)}`, KEY);
  const removed = await sub.waitFor(() => want.every(h => sub.events.some(e => e.type === "delta" && e.removed.includes(h))));
  check(removed !== null, "after the pool filled with other prompts, the same hashes reported removed");
  const firstStore = sub.events.findIndex(e => e.type === "delta" && e.stored.some(s => s.hash === want[0]));
  const firstRemove = sub.events.findIndex(e => e.type === "delta" && e.removed.includes(want[0]));
  check(firstStore >= 0 && firstRemove > firstStore, `stored (event ${firstStore}) before removed (event ${firstRemove}); seq increasing: ` +
        sub.events.filter(e => e.seq !== undefined).every((e, i, a) => i === 0 || e.seq >= a[i - 1].seq));
  const load = await sub.waitFor(e => e.type === "load");
  check(load && load.kv_total_blocks > 0 && load.kv_total_blocks <= 24 && Number.isInteger(load.waiting) && Number.isInteger(load.running),
        `load events: ${JSON.stringify(load)}`);
  // A second subscriber's snapshot is the pool's cached set now.
  const sub2 = await subscribe(tiny.base, KEY);
  const snap2 = await sub2.waitFor(e => e.type === "snapshot");
  check(snap2 && snap2.hashes.length > 0 && !want.some(h => snap2.hashes.includes(h)),
        `a new subscriber's snapshot holds ${snap2?.hashes.length} blocks, none of the evicted prompt's`);
  sub.close();
  sub2.close();

  // 2. Hit rate: three replicas of 64 blocks each (about five tenants' prefixes; round_robin's replicas see all eight), cache_aware from KV events vs
  // round_robin (each run salts its prompts, so neither finds the other's prefixes cached).
  const reps = await Promise.all([0, 1, 2].map(() => startServer(bin, ["-t", "1", "--prep-workers", "1", "--kv-cache", String(64 * 16 * 1280)])));
  servers.push(...reps);
  const urls = reps.map(r => r.base);
  const runs = {};
  for (const [phase, policy, extra] of [["k", "cache_aware", ["--model", model]], ["r", "round_robin", []]]) {
    const r = await startRouter(bin, urls, ["--policy", policy, ...extra]);
    routers.push(r);
    if (policy === "cache_aware") {  // wait for the three snapshots
      for (let i = 0; i < 50; ++i) {
        const m = await metrics(r.base);
        if (urls.every(u => m.text.includes(`deepinfer_router_replica_kv_synced{replica="${u}"} 1`))) break;
        await sleep(100);
      }
    }
    const items = makeWorkload({seed: 35, phase, requests: 96});
    const ideal = await idealHitRate(urls[0], items);
    const w = await runWorkload(r.base, items, {concurrency: 4, maxTokens: 2});
    const m = await metrics(r.base);
    const per = urls.map((u, k) => w.results.filter(x => x.replica === String(k)).length);
    console.log(`${policy}${extra.length ? " (KV events)" : ""}: hit rate ${w.hitRate.toFixed(3)} (ideal ${ideal.toFixed(3)}), ` +
                `mean TTFT ${w.meanTtft.toFixed(1)} ms, requests per replica ${per.join("/")}`);
    runs[policy] = {...w, ideal, m};
    if (policy === "cache_aware") {
      // A replica that goes away: its stream breaks and the router forgets its blocks; started again on the same
      // port it is subscribed to again (backoff), and its fresh snapshot (a cold cache) replaces the old set.
      const k = 2, port = reps[k].port, url = urls[k];
      const gauge = async (name) => {
        const mm = (await metrics(r.base)).text.match(new RegExp(`^${name}\\{replica="${url.replace(/[.]/g, "\\.")}"\\} ([0-9.e+-]+)$`, "m"));
        return mm ? Number(mm[1]) : NaN;
      };
      const before = await gauge("deepinfer_router_replica_kv_blocks");
      await reps[k].stop();
      servers.splice(servers.indexOf(reps[k]), 1);
      let cleared = false;
      for (let i = 0; i < 50 && !cleared; ++i) {
        cleared = await gauge("deepinfer_router_replica_kv_synced") === 0 && await gauge("deepinfer_router_replica_kv_blocks") === 0;
        if (!cleared) await sleep(100);
      }
      check(before > 0 && cleared, `replica stopped: its ${before} blocks forgotten, its stream marked unsynced`);
      reps[k] = await startServer(bin, ["-t", "1", "--prep-workers", "1", "--kv-cache", String(64 * 16 * 1280), "--port", String(port)]);
      servers.push(reps[k]);
      let back = false;
      for (let i = 0; i < 60 && !back; ++i) {
        back = await gauge("deepinfer_router_replica_kv_synced") === 1;
        if (!back) await sleep(100);
      }
      check(back && await gauge("deepinfer_router_replica_kv_resyncs_total") >= 1 && await gauge("deepinfer_router_replica_kv_blocks") === 0,
            "restarted on the same port: subscribed again, its cold snapshot replaced the set (a resync counted)");
    }
    await r.stop();
    routers.pop();
  }
  const ca = runs.cache_aware, rr = runs.round_robin;
  check(ca.results.length === 96 && ca.results.every(x => x.prompt > 100), "96 streamed requests through the router");
  check(ca.hitRate >= 0.9 * ca.ideal, `KV-events hit rate ${ca.hitRate.toFixed(3)} within 10% of the ideal ${ca.ideal.toFixed(3)}`);
  check(ca.hitRate > rr.hitRate + 0.05, `KV events beat round_robin on hit rate: ${ca.hitRate.toFixed(3)} vs ${rr.hitRate.toFixed(3)}`);
  const get = (name, u) => {
    const mm = ca.m.text.match(new RegExp(`^${name}\\{replica="${u.replace(/[.]/g, "\\.")}"\\} ([0-9.e+-]+)$`, "m"));
    return mm ? Number(mm[1]) : NaN;
  };
  const events = urls.map(u => get("deepinfer_router_replica_kv_events_total", u));
  const est = urls.map(u => get("deepinfer_router_replica_kv_hit_rate_estimate", u));
  console.log(`router /metrics: KV events per replica ${events.join("/")}, events-based hit estimate ${est.map(x => x.toFixed(2)).join("/")}`);
  check(events.every(x => x > 0), "the router received KV events from every replica");
  check(est.every(x => x > 0.5 && x <= 1), "the events-based hit estimate per replica is in (0.5, 1]");
  const hits = ca.m.get('deepinfer_router_decisions_total\\{policy="cache_aware_kv_events",outcome="cache_hit"\\}');
  check(hits > 60, `most requests routed as cache hits by the events (${hits})`);

  // 3. A router whose chat template is not the replicas': mismatched, logged, routed by load, still serving.
  const tmpl = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "kvev-")), "other.jinja");
  fs.writeFileSync(tmpl, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  const bad = await startRouter(bin, urls, ["--model", model, "--chat-template", tmpl]);
  routers.push(bad);
  let mm = null;
  for (let i = 0; i < 50; ++i) {
    mm = await metrics(bad.base);
    if (urls.every(u => mm.text.includes(`deepinfer_router_replica_kv_mismatch{replica="${u}"} 1`))) break;
    await sleep(100);
  }
  check(urls.every(u => mm.text.includes(`deepinfer_router_replica_kv_mismatch{replica="${u}"} 1`)) &&
        /tokenizes differently from --model/.test(bad.log()), "another chat template: every replica reported mismatched, logged");
  const ans = await complete(bad.base, "Once upon a time");
  check(ans.choices?.length === 1, "requests are still served through it");

  // 4. Tier blocks as events: a replica of 24 blocks with a RAM tier, next to a fresh replica with a large pool.
  // --kv-events-slice 4: its snapshots come in events of 4 blocks (a snapshot, then snapshot_parts).
  const tiered = await startServer(bin, ["-t", "1", "--prep-workers", "1", "--kv-cache", String(24 * 16 * 1280), "--max-num-seqs", "2",
                                         "--kv-offload-ram", "16M", "--kv-events-slice", "4"]);
  servers.push(tiered);
  const idle = await startServer(bin, ["-t", "1", "--prep-workers", "1"]);
  servers.push(idle);
  const tsub = await subscribe(tiered.base);
  await tsub.waitFor(e => e.type === "snapshot");
  const p4 = "The little dog ran to the big red barn where the old farmer kept his cows, sheep and a very noisy goose.";
  const want4 = chainHashes(await tokenize(tiered.base, p4, ""), 16);
  await complete(tiered.base, p4);
  const deltas = m => tsub.events.filter(e => e.type === "delta" && e.medium === m);
  const inRam = await tsub.waitFor(() => want4.every(h => deltas("ram").some(e => e.stored.some(x => x.hash === h))));
  check(want4.length >= 2 && inRam !== null, `the prompt's ${want4.length} blocks reported stored with medium "ram"`);
  for (let i = 0; i < 6; ++i)
    await complete(tiered.base, `Tier ${i}: a bird sang on the roof and the children laughed in the warm sun. ${"y ".repeat(30)}`);
  const outOfPool = await tsub.waitFor(() => want4.every(h => deltas("pool").some(e => e.removed.includes(h))));
  check(outOfPool !== null && !want4.some(h => deltas("ram").some(e => e.removed.includes(h))),
        "the pool evicted them (medium \"pool\" removed) while RAM kept them (no \"ram\" removal)");
  tsub.close();
  const tsub2 = await subscribe(tiered.base);
  const last = await tsub2.waitFor(e => (e.type === "snapshot" || e.type === "snapshot_part") && e.more === false);
  const parts = tsub2.events.slice(0, tsub2.events.indexOf(last) + 1).filter(e => e.type !== "load");
  const tsnap = {hashes: parts.flatMap(e => e.hashes), ram: parts.flatMap(e => e.tiers?.ram ?? [])};
  check(last && parts[0].type === "snapshot" && parts.length > 2 && parts.slice(1).every(e => e.type === "snapshot_part") &&
        parts.every(e => e.hashes.length + e.tiers.ram.length + e.tiers.disk.length <= 2 * 4 && e.seq === parts[0].seq) &&
        parts.slice(0, -1).every(e => e.more === true),
        `a new subscriber's snapshot comes in ${parts.length} events of at most 4 blocks, more: true until the last`);
  check(!want4.some(h => tsnap.hashes.includes(h)) && want4.every(h => tsnap.ram.includes(h)),
        `that snapshot: the prompt's blocks not in "hashes" (the pool), all in tiers.ram (${tsnap.ram.length} blocks)`);
  tsub2.close();
  const tr = await startRouter(bin, [tiered.base, idle.base], ["--model", model]);
  routers.push(tr);
  for (let i = 0; i < 50; ++i) {
    const m = await metrics(tr.base);
    if ([tiered.base, idle.base].every(u => m.text.includes(`deepinfer_router_replica_kv_synced{replica="${u}"} 1`))) break;
    await sleep(100);
  }
  const tm = await metrics(tr.base);
  const tierGauge = tm.text.match(new RegExp(`^deepinfer_router_replica_kv_tier_blocks\\{replica="${tiered.base.replace(/[.]/g, "\\.")}"\\} (\\d+)$`, "m"));
  check(tierGauge && Number(tierGauge[1]) >= want4.length, `the router counts the replica's tier blocks (${tierGauge?.[1]})`);
  const hitsBefore = tm.get('deepinfer_router_decisions_total\\{policy="cache_aware_kv_events",outcome="cache_hit"\\}') || 0;
  const r4 = await fetch(`${tr.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
                                                        body: JSON.stringify({prompt: p4, max_tokens: 2, temperature: 0})});
  const b4 = await r4.json();
  const hitsAfter = (await metrics(tr.base)).get('deepinfer_router_decisions_total\\{policy="cache_aware_kv_events",outcome="cache_hit"\\}');
  check(r4.headers.get("x-deepinfer-replica") === "0" && hitsAfter === hitsBefore + 1,
        `routed to the replica whose RAM tier holds the prefix, as a cache hit (replica ${r4.headers.get("x-deepinfer-replica")}, cache_hit ${hitsBefore} -> ${hitsAfter})`);
  // Every whole block but the one holding the last prompt token (which is always computed).
  check(b4.usage?.prompt_tokens_details?.cached_tokens === 16 * Math.floor((b4.usage?.prompt_tokens - 1) / 16) && want4.length >= 2,
        `served from the tier: ${b4.usage?.prompt_tokens_details?.cached_tokens} cached tokens of ${b4.usage?.prompt_tokens}`);
} catch (e) {
  check(false, `exception: ${e.stack}`);
} finally {
  for (const r of routers) await r.stop();
  for (const s of servers) await s.stop();
}
done("router_kv_events");
