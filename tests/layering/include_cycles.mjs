// Layering check: the top-level folders of src/ (base, tensor, format, kernels, kv, model, tokenizer, engine,
// server, ...) must form a DAG under #include. Every `#include "folder/..."` in a file under src/F/ is an edge
// F -> folder; any strongly connected component with more than one folder (or a folder that is part of a
// cycle) fails the check, printed with one example include per edge so the offending line is easy to find.
//
//   node tests/layering/include_cycles.mjs [SRC_DIR]        exit 0: no cycle; 1: cycles printed
//   node tests/layering/include_cycles.mjs --self-test      feeds the checker a tree with a known cycle
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

export function findCycles(srcDir) {
  const folders = fs.readdirSync(srcDir, {withFileTypes: true}).filter(d => d.isDirectory()).map(d => d.name);
  const edges = new Map(folders.map(f => [f, new Map()]));  // from -> (to -> "file:line")
  const walk = (dir, top) => {
    for (const e of fs.readdirSync(dir, {withFileTypes: true})) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) { walk(p, top); continue; }
      if (!/\.(h|hpp|cc|cpp|inc)$/.test(e.name)) continue;
      fs.readFileSync(p, "utf8").split("\n").forEach((line, i) => {
        const m = /^\s*#\s*include\s+"([^"/]+)\//.exec(line);
        if (!m || m[1] === top || !edges.has(m[1])) return;
        if (!edges.get(top).has(m[1])) edges.get(top).set(m[1], `${path.relative(srcDir, p)}:${i + 1}`);
      });
    }
  };
  for (const f of folders) walk(path.join(srcDir, f), f);
  // Tarjan's strongly connected components.
  let index = 0;
  const idx = new Map(), low = new Map(), stack = [], on = new Set(), sccs = [];
  const strong = v => {
    idx.set(v, index); low.set(v, index); ++index; stack.push(v); on.add(v);
    for (const w of edges.get(v).keys()) {
      if (!idx.has(w)) { strong(w); low.set(v, Math.min(low.get(v), low.get(w))); }
      else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const c = [];
      let w;
      do { w = stack.pop(); on.delete(w); c.push(w); } while (w !== v);
      if (c.length > 1) sccs.push(c.sort());
    }
  };
  for (const f of folders) if (!idx.has(f)) strong(f);
  return sccs.map(c => ({folders: c, edges: c.flatMap(a => [...edges.get(a)].filter(([b]) => c.includes(b)).map(([b, at]) => `${a} -> ${b} (${at})`))}));
}

function report(srcDir) {
  const cycles = findCycles(srcDir);
  for (const c of cycles) {
    console.log(`include cycle between ${c.folders.join(", ")}:`);
    for (const e of c.edges) console.log(`  ${e}`);
  }
  return cycles;
}

if (process.argv.includes("--self-test")) {
  // A tree with a -> b -> c -> a and an unrelated d -> a must report exactly {a, b, c}; removing c's include
  // must report nothing. Checks that the checker can fail, not only that the real tree passes.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "include-cycles-"));
  const put = (f, text) => { fs.mkdirSync(path.dirname(path.join(dir, f)), {recursive: true}); fs.writeFileSync(path.join(dir, f), text); };
  put("a/a.h", '#include "b/b.h"\n');
  put("b/b.cc", '#include <vector>\n#include "c/x/c.h"\n');
  put("c/x/c.h", '#pragma once\n  #include "a/a.h"\n');
  put("d/d.cc", '#include "a/a.h"\n#include "d/own.h"\n');
  let cycles = findCycles(dir);
  const ok1 = cycles.length === 1 && cycles[0].folders.join() === "a,b,c" && cycles[0].edges.some(e => e.includes("c/x/c.h:2"));
  put("c/x/c.h", '#pragma once\n');
  cycles = findCycles(dir);
  const ok2 = cycles.length === 0;
  fs.rmSync(dir, {recursive: true, force: true});
  console.log(`${ok1 ? "ok  " : "FAIL"} a fed cycle a -> b -> c -> a is reported with the offending line`);
  console.log(`${ok2 ? "ok  " : "FAIL"} the same tree without the back edge passes`);
  process.exit(ok1 && ok2 ? 0 : 1);
}
const srcDir = path.resolve(process.argv[2] ?? path.join(here, "../../src"));
const cycles = report(srcDir);
console.log(cycles.length ? `${cycles.length} include cycle(s) between folders of ${srcDir}` : `no include cycle between the folders of ${srcDir}`);
process.exit(cycles.length ? 1 : 0);
