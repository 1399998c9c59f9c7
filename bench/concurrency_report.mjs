// Markdown tables for docs/benchmarks.md from a bench/concurrency.sh result directory:
//   node bench/concurrency_report.mjs bench/results/concurrency-YYYYMMDD-HHMM
import fs from "node:fs";
import path from "node:path";

const dir = process.argv[2];
if (!dir) { console.error("usage: node bench/concurrency_report.mjs DIR"); process.exit(2); }
const read = f => { try { return JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")); } catch { return null; } };
const lines = f => { try { return fs.readFileSync(path.join(dir, f), "utf8").split("\n").filter(l => l.startsWith("{")).map(l => JSON.parse(l)); } catch { return []; } };
const f1 = x => (Number.isFinite(x) ? x.toFixed(1) : "-");
const fx = x => (Number.isFinite(x) && x > 0 ? `${x.toFixed(2)}x` : "-");
const names = {bf16: "bf16", q4km: "Q4_K_M", q8: "q8_0", f16: "f16"};
const files = fs.readdirSync(dir);
const out = [];
try { out.push("```", fs.readFileSync(path.join(dir, "machine.txt"), "utf8").trim(), "```", ""); } catch {}

for (const file of files.filter(f => /^throughput-.*\.json$/.test(f)).sort()) {
  const [, t, n] = file.match(/^throughput-(.+)-n(\d+)\.json$/);
  const j = read(file);
  if (!j) continue;
  out.push(`**Offline, ${names[t] ?? t}, ${j.n_prompt}-token prompts, ${n} new tokens each, ${j.threads} threads** ` +
           "(deepinfer overlap run; llama.cpp = llama_batched_ref, one llama_decode per step for all sequences):", "");
  out.push("| concurrent | deepinfer prompt tok/s | gen tok/s | output tok/s | llama.cpp prompt tok/s | gen tok/s | output tok/s | ratio prompt | ratio gen | ratio output |");
  out.push("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  let settings = "";
  for (const r of j.runs) {
    const d = r.overlap, p = r.peer ?? {};
    settings = p.settings_text ?? settings;  // the largest concurrency's (n_ctx and n_seq_max grow with it)
    out.push(`| ${r.concurrency} | ${f1(d.split?.prompt_tokens_per_s)} | ${f1(d.split?.gen_tokens_per_s)} | ${f1(d.tokens_per_s)} | ` +
             `${f1(p.prompt_tokens_per_second)} | ${f1(p.gen_tokens_per_second)} | ${f1(p.output_tokens_per_second)} | ` +
             `${fx(r.ratio_prompt_vs_peer)} | ${fx(r.ratio_gen_vs_peer)} | **${fx(r.ratio_vs_peer)}** |`);
  }
  if (settings) out.push("", `llama.cpp settings (at the largest concurrency): ${settings}`);
  out.push("");
}

for (const file of files.filter(f => /^batched-bench-.*\.rows\.jsonl$/.test(f)).sort()) {
  const t = file.match(/^batched-bench-(.+)\.rows\.jsonl$/)[1];
  const bb = lines(file), ref = lines(`batched-ref-random-${t}.jsonl`);
  if (!bb.length) continue;
  out.push(`**Cross-check, ${names[t] ?? t}: llama.cpp's llama-batched-bench (built from the bundle, release CPU flags) vs ` +
           "llama_batched_ref --random (same -c, 32-token prompts, 32 generation steps)**:", "");
  out.push("| B | batched-bench S_PP | llama_batched_ref S_PP | batched-bench S_TG | llama_batched_ref S_TG | TG ratio (ref / bench) |");
  out.push("| --- | --- | --- | --- | --- | --- |");
  for (const b of bb) {
    const r = ref.find(x => x.concurrency === b.pl) ?? {};
    out.push(`| ${b.pl} | ${f1(b.speed_pp)} | ${f1(r.prompt_tokens_per_second)} | ${f1(b.speed_tg)} | ${f1(r.gen_tokens_per_second)} | ` +
             `${fx(r.gen_tokens_per_second / b.speed_tg)} |`);
  }
  out.push("");
}

for (const t of Object.keys(names)) {
  const di = read(`serve-deepinfer-${t}.json`), ll = read(`serve-llama-${t}.json`);
  if (!di && !ll) continue;
  const ref = di ?? ll;
  out.push(`**Server, ${names[t]}: deepinfer serve vs llama-server -np C** (same client, bench/serve_peer.mjs: ` +
           `${ref.n_prompt}-id prompts, ${ref.n_gen} tokens, ignore_eos, ${ref.requests_per_client} requests per client, ` +
           `${ref.threads} threads; ms):`, "");
  out.push("| clients | deepinfer tok/s | llama-server tok/s | ratio | TTFT p50 / p99 deepinfer | llama-server | inter-token p50 / p99 deepinfer | llama-server |");
  out.push("| --- | --- | --- | --- | --- | --- | --- | --- |");
  const cs = [...new Set([...(di?.results ?? []), ...(ll?.results ?? [])].map(r => r.clients))].sort((a, b) => a - b);
  for (const c of cs) {
    const a = di?.results.find(r => r.clients === c), b = ll?.results.find(r => r.clients === c);
    const ok = r => (r && r.ok === r.requests && r.exact_length === r.ok ? "" : r ? ` (${r.ok}/${r.requests} ok)` : "");
    out.push(`| ${c} | ${f1(a?.output_tokens_per_s)}${ok(a)} | ${f1(b?.output_tokens_per_s)}${ok(b)} | ` +
             `**${fx(a?.output_tokens_per_s / b?.output_tokens_per_s)}** | ` +
             `${f1(a?.ttft_ms.p50)} / ${f1(a?.ttft_ms.p99)} | ${f1(b?.ttft_ms.p50)} / ${f1(b?.ttft_ms.p99)} | ` +
             `${f1(a?.itl_ms.p50)} / ${f1(a?.itl_ms.p99)} | ${f1(b?.itl_ms.p50)} / ${f1(b?.itl_ms.p99)} |`);
  }
  out.push("");
}
console.log(out.join("\n"));
