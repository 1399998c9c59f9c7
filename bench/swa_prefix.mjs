// Sliding-window prefix hits benchmark (docs/benchmarks.md, issue 32): time to first token of a prompt that shares
// a long prefix with an earlier one, on a model with windowed layers (gpt-oss, Gemma 3), served cold, as a direct
// hit (every window still cached), and as a hit that lands between sparse window checkpoints (`--swa-checkpoint-every
// S`: the windowed layers recompute the tokens since the checkpoint before the hit, reading the cached full-attention
// K/V), with the cached and replayed token counts the server reports, and the windowed blocks each server keeps cached.
// usage: node bench/swa_prefix.mjs build/deepinfer MODEL.gguf [prefix tokens=4096] [checkpoint every=512] [threads=2]
//        [token ids below=30000: ordinary text tokens of every large vocabulary; less for a tiny model]
import {startServer, metrics, streamedTtft as ttft} from "../tests/server/common.mjs";
import {tokenPrompt} from "../tests/common/rng.mjs";

const [bin = "build/deepinfer", model, nArg, everyArg, threadsArg, vocabArg] = process.argv.slice(2);
if (!model) throw new Error("usage: node bench/swa_prefix.mjs BIN MODEL.gguf [prefix=4096] [every=512] [threads=2] [ids below=30000]");
const N = Number(nArg ?? 4096), EVERY = Number(everyArg ?? 512), THREADS = String(threadsArg ?? 2);
const VOCAB_HI = Number(vocabArg ?? 30000);  // token ids drawn from [256, VOCAB_HI)

const replayed = async base => (await metrics(base)).get("deepinfer_swa_replayed_tokens_total");
const cachedBlocks = async base => (await metrics(base)).get("deepinfer_kv_cache_blocks_cached");

const base = tokenPrompt(3201, N + 64, VOCAB_HI, {lo: 256});
const prefix = base.slice(0, N);
const own = seed => tokenPrompt(seed, 32, VOCAB_HI, {lo: 256});
const hitAt = N - EVERY / 2;  // between two checkpoints: the windows at hitAt are cached only with every window kept
const args = ["-m", model, "-t", THREADS, "--ctx-size", String(N + 128), "--max-num-seqs", "4"];
const rows = [];
async function measure(label, serverArgs, secondPrompt) {
  const srv = await startServer(bin, [...args, ...serverArgs]);
  try {
    const cold = await ttft(srv.base, [...prefix, ...own(1)]);
    const r0 = await replayed(srv.base);
    const blocks = await cachedBlocks(srv.base);
    const hit = await ttft(srv.base, secondPrompt);
    const rep = (await replayed(srv.base)) - r0;
    rows.push({label, cold, hit, replayed: rep, blocks});
  } finally {
    await srv.stop();
  }
}
await measure(`every window kept, hit at ${N}`, [], [...prefix, ...own(2)]);
await measure(`every window kept, hit at ${hitAt}`, [], [...prefix.slice(0, hitAt), ...own(3)]);
await measure(`--swa-checkpoint-every ${EVERY}, hit at ${N}`, ["--swa-checkpoint-every", String(EVERY)], [...prefix, ...own(2)]);
await measure(`--swa-checkpoint-every ${EVERY}, hit at ${hitAt}`, ["--swa-checkpoint-every", String(EVERY)],
              [...prefix.slice(0, hitAt), ...own(3)]);
console.log(`\n${N}-token prefix + 32 own tokens, ${THREADS} threads, ${model}:`);
console.log("| server, second request | cold TTFT ms | hit TTFT ms | cached tokens | replayed tokens | cold / hit | blocks cached after the first |");
console.log("|---|---|---|---|---|---|---|");
for (const r of rows)
  console.log(`| ${r.label} | ${r.cold.ms.toFixed(0)} | ${r.hit.ms.toFixed(0)} | ${r.hit.cached} | ${r.replayed} | ` +
              `${(r.cold.ms / r.hit.ms).toFixed(1)}x | ${r.blocks} |`);
