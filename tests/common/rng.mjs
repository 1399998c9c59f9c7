// The one seeded generator of the JavaScript tests, tools and benchmarks (tests/, tools/ref/, bench/).
//
// mulberry32: a 32-bit state advanced by a Weyl step and mixed with Math.imul, so every operation is exact
// 32-bit integer arithmetic. (The hand-written LCG it replaces, `seed = (seed * 1103515245 + 12345) % 2^31`,
// computed the product in doubles: past 2^53 its low bits were rounded away, so `seed % n` was almost always
// even - the prompts never read an odd embedding row - and `seed % 4` picked one of four patterns.)
//
//   const rng = makeRng(42);
//   rng.next()        uint32
//   rng.float()       [0, 1), 32 random bits
//   rng.int(n)        integer in [0, n), n in 1..2^32: floor(next() * n / 2^32), computed exactly (every value
//                     equally likely to within one draw in 2^32 / n)
//   rng.range(lo, hi) integer in [lo, hi], both ends included
//   rng.pick(arr)     an element of a non-empty array
//
// tokenPrompt(seed, n, hi, opts) draws a prompt of token ids and asserts it covers the vocabulary: odd and even
// ids, and an id in the top 10% of the vocabulary (checkVocabCoverage), so a generator regression fails loudly.
export function makeRng(seed) {
  if (!Number.isInteger(seed)) throw new Error(`makeRng: the seed must be an integer, got ${seed}`);
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  const float = () => next() / 4294967296;
  const int = n => {
    if (!Number.isInteger(n) || n < 1 || n > 4294967296) throw new Error(`rng.int: n must be an integer in 1..2^32, got ${n}`);
    // floor(next() * n / 2^32) in exact integer steps (every product < 2^49)
    const x = next(), hi = Math.floor(x / 65536), lo = x & 0xffff;
    return Math.floor((hi * n + Math.floor((lo * n) / 65536)) / 65536);
  };
  const range = (lo, hi) => {
    if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo <= hi)) throw new Error(`rng.range: bad range [${lo}, ${hi}]`);
    return lo + int(hi - lo + 1);
  };
  const pick = arr => {
    if (!arr.length) throw new Error("rng.pick: empty array");
    return arr[int(arr.length)];
  };
  return {next, float, int, range, pick};
}

// Throws unless `ids` (token ids of prompts meant to cover a vocabulary of `vocab` ids) hold an even id, an odd id
// and an id in the top 10% of the vocabulary (>= 0.9 * vocab). Returns the counts, for printing.
export function checkVocabCoverage(ids, vocab, label = "prompt") {
  const top = Math.ceil(0.9 * vocab);
  const even = ids.filter(t => t % 2 === 0).length, odd = ids.filter(t => t % 2 === 1).length;
  const high = ids.filter(t => t >= top).length, outside = ids.filter(t => !(Number.isInteger(t) && t >= 0 && t < vocab)).length;
  const counts = {n: ids.length, even, odd, top: high, topFrom: top, max: Math.max(...ids)};
  if (!even || !odd || !high || outside)
    throw new Error(`${label}: token ids do not cover the vocabulary of ${vocab}: ${even} even, ${odd} odd, ${high} >= ${top}, ` +
                    `${outside} outside [0, ${vocab}) in ${ids.length}`);
  return counts;
}

// A prompt of n token ids drawn uniformly from [lo, hi) by makeRng(seed), checked to cover the vocabulary
// (vocab defaults to hi: ids from hi up, e.g. make-tiny's bos/eos at 510/511 of 512, are left out on purpose).
export function tokenPrompt(seed, n, hi, {lo = 0, vocab = hi} = {}) {
  const rng = makeRng(seed);
  const ids = Array.from({length: n}, () => rng.range(lo, hi - 1));
  checkVocabCoverage(ids, vocab, `tokenPrompt(seed ${seed}, ${n} ids in [${lo}, ${hi}))`);
  return ids;
}
