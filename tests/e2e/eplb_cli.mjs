// deepinfer eplb end to end: the README example of deepseek-ai/EPLB through the CLI (--json must print exactly
// the reference's phy2log/logcnt, a log2phy consistent with them, on one line), the global-policy vector, the
// table's imbalance figures, and exit codes for bad files (1) and bad command lines (2).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const bin = process.argv[2];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-eplb-"));
let failures = 0;
const check = (ok, msg) => { console.log(`${ok ? "ok  " : "FAIL"} ${msg}`); if (!ok) ++failures; };
const run = args => spawnSync(bin, ["eplb", ...args], {encoding: "utf8"});
const write = (name, text) => { const f = path.join(dir, name); fs.writeFileSync(f, text); return f; };
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

const weight = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]];
const load = write("load.json", JSON.stringify(weight));
const shape = ["--replicas", "16", "--ranks", "8", "--nodes", "2"];

// log2phy[l][e] lists exactly the slots p with phy2log[l][p] == e (logcnt[l][e] of them), padded with -1 to the
// largest count.
function consistent(r) {
  const width = Math.max(...r.logcnt.flat());
  return r.phy2log.every((row, l) => r.log2phy[l].every((slots, e) => {
    const real = slots.filter(s => s !== -1), want = row.flatMap((x, p) => x === e ? [p] : []);
    return slots.length === width && real.length === r.logcnt[l][e] && same([...real].sort((a, b) => a - b), want) &&
           slots.slice(real.length).every(s => s === -1);
  }));
}

{
  const r = run(["--weights", load, ...shape, "--groups", "4", "--json"]);
  check(r.status === 0, `hierarchical --json exits 0 (${r.stderr.trim()})`);
  const lines = r.stdout.split("\n");
  check(lines.length === 2 && lines[1] === "", "one line of output");
  let out = {};
  try { out = JSON.parse(r.stdout); } catch (e) { check(false, `output is JSON: ${e.message}`); }
  check(same(Object.keys(out), ["phy2log", "log2phy", "logcnt"]), `keys in order: ${Object.keys(out)}`);
  check(same(out.phy2log, [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                           [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]), "phy2log is the published vector");
  check(same(out.logcnt, [[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1], [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]]),
        "logcnt is the published vector");
  check(out.log2phy && consistent(out), "log2phy consistent with phy2log and logcnt");
}
{
  const r = run(["--weights", load, ...shape, "--groups", "1", "--json"]);
  const out = r.status === 0 ? JSON.parse(r.stdout) : {};
  check(same(out.phy2log, [[10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1],
                           [1, 10, 2, 4, 5, 11, 5, 0, 6, 7, 6, 3, 8, 8, 9, 7]]), "global policy vector (groups 1)");
  check(out.log2phy && consistent(out), "global: log2phy consistent");
}
{
  const r = run(["--weights", load, ...shape, "--groups", "4"]);
  check(r.status === 0 && /layer 0: .*-> 1\.208 eplb/.test(r.stdout) && /layer 1: .*-> 1\.242 eplb/.test(r.stdout),
        "table reports max/mean 1.208 and 1.242");
  check(/hierarchical/.test(r.stdout) && r.stdout.split("\n").filter(l => /^\s+\d+\s+\d+\s+[\d.]+\s/.test(l)).length === 16,
        "table: policy line and 8 ranks per layer");
}

const bad = [
  [["--weights", path.join(dir, "missing.json"), ...shape], 1, /cannot open/],
  [["--weights", write("bad.json", "[[1, 2"), ...shape], 1, /not valid JSON/],
  [["--weights", write("ragged.json", "[[1,2,3,4],[1,2]]"), "--replicas", "4", "--ranks", "2"], 1, /layer 1 has 2 experts/],
  [["--weights", write("neg.json", "[[1,-2,3,4]]"), "--replicas", "4", "--ranks", "2"], 1, /expert 1/],
  [["--weights", write("str.json", "[[1,\"x\"]]"), "--replicas", "2", "--ranks", "1"], 1, /not a number/],
  [["--weights", write("flat.json", "[1,2,3]"), "--replicas", "4", "--ranks", "1"], 1, /layer 0 is not an array/],
  [["--weights", load, "--replicas", "15", "--ranks", "8"], 1, /multiple of ranks/],
  [["--weights", load, "--replicas", "16", "--ranks", "8", "--groups", "5"], 1, /divide the number of logical experts/],
  [["--weights", load, "--replicas", "16", "--ranks", "8", "--nodes", "3"], 1, /multiple of nodes/],
  [["--weights", load, "--replicas", "8", "--ranks", "8"], 1, /every expert needs a slot/],
  [["--replicas", "16", "--ranks", "8"], 2, /--weights is required/],
  [["--weights", load, "--ranks", "8"], 2, /--replicas is required/],
  [["--weights", load, "--replicas", "sixteen", "--ranks", "8"], 2, /expects a number/],
  [["--weights", load, ...shape, "--frobnicate"], 2, /unknown flag/],
];
for (const [args, code, message] of bad) {
  const r = run(args);
  check(r.status === code && message.test(r.stderr) && r.stdout === "",
        `exit ${code} with ${message}: got ${r.status}, ${r.stderr.trim()}`);
}
const help = run(["--help"]);
check(help.status === 0 && /round-robin/.test(help.stdout) && /--replicas R/.test(help.stdout), "--help");

fs.rmSync(dir, {recursive: true, force: true});
console.log(failures ? `${failures} check(s) failed` : "eplb CLI checks passed");
process.exit(failures ? 1 : 0);
