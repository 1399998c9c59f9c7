// Must-show 2 of the server issue: 1000 concurrent streaming requests on the 2-core machine complete with no
// error; 300 of them disconnect mid-stream; afterwards the KV pool is completely free, nothing is running or
// waiting, and the SIGTERM shutdown's leak check passes.
import http from "node:http";
import {startServer, checker, metrics} from "./common.mjs";

const bin = process.argv[2];
const N = Number(process.argv[3] ?? 1000), DROP = Number(process.argv[4] ?? 300);
const {check, done} = checker();
const srv = await startServer(bin, ["--max-num-seqs", "64"]);
const agent = new http.Agent({keepAlive: false, maxSockets: Infinity});

function stream(i, drop) {
  return new Promise(resolve => {
    const body = JSON.stringify({model: "stories260K.gguf", prompt: `Story ${i}: Once upon a time`, max_tokens: 24 + (i % 40),
                                 temperature: 0.8, seed: i, stream: true, ignore_eos: true});
    const req = http.request(`${srv.base}/v1/completions`, {method: "POST", agent,
      headers: {"Content-Type": "application/json", "Content-Length": Buffer.byteLength(body)}}, res => {
      let buf = "", events = 0, finish = null, doneSeen = false, text = "";
      res.setEncoding("utf8");
      res.on("data", d => {
        buf += d;
        let k;
        while ((k = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (!ev.startsWith("data: ")) continue;
          const data = ev.slice(6);
          if (data === "[DONE]") { doneSeen = true; continue; }
          const j = JSON.parse(data);
          ++events;
          for (const c of j.choices) { text += c.text; if (c.finish_reason) finish = c.finish_reason; }
          if (drop && events === 2) { req.destroy(); resolve({dropped: true, status: res.statusCode}); return; }
        }
      });
      res.on("end", () => resolve({status: res.statusCode, events, finish, doneSeen, text}));
      res.on("error", () => resolve({status: res.statusCode, error: "response error"}));
    });
    req.on("error", e => resolve({error: e.message, dropped: drop}));
    req.end(body);
  });
}

const t0 = performance.now();
const results = await Promise.all(Array.from({length: N}, (_, i) => stream(i, i % Math.round(N / DROP) === 0 && i / Math.round(N / DROP) < DROP)));
const secs = (performance.now() - t0) / 1000;
const kept = results.filter(r => !r.dropped), dropped = results.filter(r => r.dropped);
const good = kept.filter(r => r.status === 200 && r.doneSeen && r.finish === "length" && r.events > 0);
check(dropped.length === DROP, `${dropped.length} clients disconnected mid-stream`);
check(good.length === kept.length, `${good.length}/${kept.length} streams completed with [DONE] and finish_reason (${secs.toFixed(1)} s)`);
const bad = kept.filter(r => !(r.status === 200 && r.doneSeen));
if (bad.length) console.log("first failures:", JSON.stringify(bad.slice(0, 3)));

// The server must have noticed every disconnect and freed everything.
let m;
for (let i = 0; i < 100; ++i) {
  m = await metrics(srv.base);
  if (m.get("deepinfer_num_requests_in_flight") === 0 && m.get("deepinfer_num_requests_running") === 0) break;
  await new Promise(r => setTimeout(r, 100));
}
check(m.get("deepinfer_num_requests_in_flight") === 0, "no request left in flight");
check(m.get("deepinfer_num_requests_running") === 0 && m.get("deepinfer_num_requests_waiting") === 0, "engine idle");
check(m.get("deepinfer_kv_cache_usage_perc") === 0, `KV pool fully free (usage ${m.get("deepinfer_kv_cache_usage_perc")})`);
const disc = Number(m.text.match(/outcome="client_disconnected"\} (\d+)/)[1]);
check(disc >= DROP * 0.9, `server saw ${disc} client disconnects and aborted their requests`);
const after = await fetch(`${srv.base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
  body: JSON.stringify({prompt: "Once", max_tokens: 4})});
check(after.status === 200, "still serving afterwards");
const code = await srv.stop();
check(code === 0, `SIGTERM: clean shutdown with the leak check (exit ${code})`);
done("server load");
