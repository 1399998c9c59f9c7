// Seam check: the includes that would let a layer reach past its interface. Each rule names the files it covers
// and the include paths they may not use; every offending line is printed.
//   device seam  nothing in src/ outside src/kernels/ includes "kernels/cpu/..." (model code calls ops through
//                kernels/ops.h, whose CPU implementation is kernels/cpu/cpu_ops.cc)
//   api seam     the public API (src/api/, include/) does not include "server/..." (it shares src/protocol/)
//   no global    nothing in src/ outside src/dist/ (which keeps it) and src/api/ (the library's top level) reads
//                the process's distributed context, dist::Context(): model and engine code get the communicators
//                and the parallel plan passed in (EngineOptions::dist, LoadOptions::split, Transformer's dist)
//   router seam  nothing in src/ or include/ outside src/router/ includes "router/..." (the CLI, apps/, does), and
//                src/router/ includes only router/, server/, base/ and deepinfer/ (it forwards requests; it knows
//                no engine), plus what `route --model` needs to compute a prompt's KV block hashes as serve does:
//                tokenizer/, protocol/ (chat template, prompt parsing, prompt digest), model/model.h (the Model a
//                ChatFormatter reads: tokenizer and source, no weights) and kv/prefix_hash.h (the chain hash), and
//                routing/ (its policies)
//   routing seam src/routing/ (the transport-free policies `route` and `serve --dp` both drive) includes only
//                routing/, base/, deepinfer/ and kv/prefix_hash.h
//   cli seam     `deepinfer generate` and `serve` build on the public API alone: apps/deepinfer/main.cc,
//                cmd_generate.cc and cmd_serve.cc, every app-local file they include (startup.h, commands.h,
//                args.h, ...) with the .cc beside each such header (startup.cc), and the public headers they reach
//                (include/deepinfer/*.h) include nothing of the project but "deepinfer/..." and those app-local
//                files: no src/ header, by any spelling (<base/logging.h> neither). What they need from below has a
//                public interface (deepinfer/server.h, parallel.h, progress.h, runtime.h); the tools over
//                internals (logprobs, bench, ...) keep engine_flags.h, which the two never include
//
//   node tests/layering/seams.mjs [REPO_ROOT]     exit 0: no violation; 1: violations printed
//   node tests/layering/seams.mjs --self-test     feeds the checker a tree with known violations
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));

export const RULES = [
  {name: "device seam", files: f => f.startsWith("src/") && !f.startsWith("src/kernels/"), forbidden: /^kernels\/cpu\//,
   why: "call kernels through kernels/ops.h (Ops), not a device's kernels"},
  {name: "api seam", files: f => f.startsWith("src/api/") || f.startsWith("include/"), forbidden: /^server\//,
   why: "the public API speaks the request language of src/protocol/, it does not reach into the HTTP server"},
  {name: "no global", files: f => f.startsWith("src/") && !f.startsWith("src/dist/") && !f.startsWith("src/api/"),
   text: /\bdist::Context\(\)/, why: "take the communicators as a parameter; only the top level reads the global"},
  {name: "router seam", files: f => (f.startsWith("src/") || f.startsWith("include/")) && !f.startsWith("src/router/"),
   forbidden: /^router\//, why: "only the CLI (apps/) builds on the router"},
  {name: "router seam", files: f => f.startsWith("src/router/"), forbidden: /^(?!router\/|routing\/|server\/|base\/|deepinfer\/|tokenizer\/|protocol\/|model\/model\.h$|kv\/prefix_hash\.h$)/,
   why: "the router builds on the HTTP server and base only (and, for its token ids, the tokenizer, protocol/, model.h and the chain hash; its policies are routing/)"},
  {name: "routing seam", files: f => f.startsWith("src/routing/"), forbidden: /^(?!routing\/|base\/|deepinfer\/|kv\/prefix_hash\.h$)/,
   why: "the routing policies are transport-free (the router drives them over HTTP, serve --dp over its control plane): base, the status type and the chain hash only"},
  {name: "cli seam", roots: ["apps/deepinfer/main.cc", "apps/deepinfer/cmd_generate.cc", "apps/deepinfer/cmd_serve.cc"],
   why: "generate and serve build on include/deepinfer/ only: give what they need a public interface there"},
];

const INCLUDE = /^\s*#\s*include\s+(["<])([^">]+)[">]/;

// A "cli seam" include in `file`: the project file it names, if any (an app-local file beside it, or a public
// header), and whether the rule allows it. Angle-bracket includes are the system's and third parties' (nlohmann),
// unless their first folder is one of src/'s.
function cliInclude(root, srcDirs, file, quote, inc) {
  if (quote === "<") return {allowed: !srcDirs.has(inc.split("/")[0])};
  if (inc.startsWith("deepinfer/")) return {allowed: true, next: path.join("include", inc)};
  const local = path.join(path.dirname(file), inc);
  if (file.startsWith("apps/") && !inc.includes("/") && fs.existsSync(path.join(root, local))) return {allowed: true, next: local};
  return {allowed: false};
}

// The files the "cli seam" covers: its roots and, transitively, the project files they include (with the .cc
// beside each app-local header).
function cliFiles(root, roots, srcDirs) {
  const seen = new Set();
  const queue = roots.filter(f => fs.existsSync(path.join(root, f)));
  while (queue.length) {
    const f = queue.pop();
    if (seen.has(f) || !fs.existsSync(path.join(root, f))) continue;
    seen.add(f);
    const impl = f.replace(/\.h$/, ".cc");
    if (f.startsWith("apps/") && impl !== f) queue.push(impl);
    for (const line of fs.readFileSync(path.join(root, f), "utf8").split("\n")) {
      const m = INCLUDE.exec(line);
      if (!m) continue;
      const {allowed, next} = cliInclude(root, srcDirs, f, m[1], m[2]);
      if (allowed && next) queue.push(next);
    }
  }
  return seen;
}

function sourceFiles(root, dir) {
  const out = [];
  const walk = d => {
    if (!fs.existsSync(d)) return;
    for (const e of fs.readdirSync(d, {withFileTypes: true})) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(h|hpp|cc|cpp|inc)$/.test(e.name)) out.push(path.relative(root, p));
    }
  };
  walk(path.join(root, dir));
  return out;
}

export function findViolations(root, rules = RULES) {
  const out = [];
  const files = ["src", "apps", "include"].flatMap(d => sourceFiles(root, d));
  const srcPath = path.join(root, "src");
  const srcDirs = new Set(fs.existsSync(srcPath) ? fs.readdirSync(srcPath, {withFileTypes: true}).filter(e => e.isDirectory()).map(e => e.name) : []);
  const covered = new Map(rules.filter(r => r.roots).map(r => [r, cliFiles(root, r.roots, srcDirs)]));
  for (const f of files) {
    const lines = fs.readFileSync(path.join(root, f), "utf8").split("\n");
    for (const rule of rules) {
      if (rule.roots ? !covered.get(rule).has(f) : !rule.files(f)) continue;
      lines.forEach((line, i) => {
        if (rule.text) {
          const code = line.replace(/\/\/.*$/, "");  // comments may name it
          if (rule.text.test(code)) out.push(`${rule.name}: ${f}:${i + 1} reads ${rule.text.source.replace(/\\/g, "")} (${rule.why})`);
          return;
        }
        const m = INCLUDE.exec(line);
        if (!m) return;
        const bad = rule.roots ? !cliInclude(root, srcDirs, f, m[1], m[2]).allowed : m[1] === '"' && rule.forbidden.test(m[2]);
        const spelled = m[1] === '"' ? `"${m[2]}"` : `<${m[2]}>`;
        if (bad) out.push(`${rule.name}: ${f}:${i + 1} includes ${spelled} (${rule.why})`);
      });
    }
  }
  return out;
}

if (process.argv.includes("--self-test")) {
  // A model file including a CPU kernel header must be reported with its line; the same include inside
  // src/kernels/ and the neutral kernels/ops.h must not.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "seams-"));
  const put = (f, text) => { fs.mkdirSync(path.dirname(path.join(dir, f)), {recursive: true}); fs.writeFileSync(path.join(dir, f), text); };
  put("src/model/layer.cc", '#include "kernels/ops.h"\n#include <vector>\n  #include "kernels/cpu/gemm.h"\n');
  put("src/kernels/ops.cc", '#include "kernels/cpu/cpu_ops.h"\n');
  put("src/kernels/cpu/gemm.cc", '#include "kernels/cpu/gemm.h"\n');
  put("src/api/model.cc", '#include "protocol/chat.h"\n#include "server/chat.h"\n');
  put("src/server/http.cc", '#include "server/http.h"\n');
  put("src/engine/engine.cc", '// dist::Context() is read by the top level\n  auto* d = dist::Context();\n');
  put("src/dist/parallel.cc", 'DistContext* Context() { return g; }\nvoid F() { dist::Context(); }\n');
  put("src/engine/dist_control.cc", '#include "router/routing_policy.h"\n');
  put("src/router/router_server.cc", '#include "router/replica_set.h"\n#include "server/http_server.h"\n#include "engine/engine.h"\n');
  // The CLI: serve includes the HTTP server's internals (line 4); startup.cc, beside the startup.h serve includes,
  // includes the dist layer (line 2); generate spells a src/ header with angle brackets (line 2); a public header
  // serve reaches includes an internal one (line 2). engine_flags.h, which neither includes, and the bench command
  // may include internals.
  put("apps/deepinfer/cmd_serve.cc", '#include "deepinfer/server.h"\n#include "startup.h"\n#include <thread>\n#include "server/openai_server.h"\n');
  put("apps/deepinfer/startup.h", '#include "args.h"\n#include "deepinfer/engine.h"\n#include <nlohmann/json_fwd.hpp>\n');
  put("apps/deepinfer/startup.cc", '#include "startup.h"\n#include "dist/parallel.h"\n');
  put("apps/deepinfer/args.h", '#include <string>\n');
  put("apps/deepinfer/cmd_generate.cc", '#include "deepinfer/deepinfer.h"\n#include <base/progress.h>\n');
  put("apps/deepinfer/engine_flags.h", '#include "startup.h"\n#include "engine/engine.h"\n');
  put("apps/deepinfer/cmd_bench.cc", '#include "engine_flags.h"\n#include "model/transformer.h"\n');
  put("include/deepinfer/deepinfer.h", '#include "deepinfer/engine.h"\n#include "deepinfer/server.h"\n');
  put("include/deepinfer/engine.h", '#include <string>\n');
  put("include/deepinfer/server.h", '#include "deepinfer/engine.h"\n#include "engine/engine.h"\n');
  put("src/base/progress.h", '#include <string>\n');
  let v = findViolations(dir);
  const cli = v.filter(x => x.startsWith("cli seam"));
  const ok3 = cli.length === 4 && cli.some(x => x.includes('apps/deepinfer/cmd_serve.cc:4 includes "server/openai_server.h"')) &&
              cli.some(x => x.includes('apps/deepinfer/startup.cc:2 includes "dist/parallel.h"')) &&
              cli.some(x => x.includes("apps/deepinfer/cmd_generate.cc:2 includes <base/progress.h>")) &&
              cli.some(x => x.includes('include/deepinfer/server.h:2 includes "engine/engine.h"'));
  v = v.filter(x => !x.startsWith("cli seam"));
  const ok1 = v.length === 5 && v.some(x => x.includes("src/engine/dist_control.cc:1") && x.startsWith("router seam")) &&
              v.some(x => x.includes("src/router/router_server.cc:3") && x.startsWith("router seam")) && v.some(x => x.includes("src/model/layer.cc:3") && x.startsWith("device seam")) &&
              v.some(x => x.includes("src/api/model.cc:2") && x.startsWith("api seam")) &&
              v.some(x => x.includes("src/engine/engine.cc:2") && x.startsWith("no global"));
  put("src/model/layer.cc", '#include "kernels/ops.h"\n');
  put("src/api/model.cc", '#include "protocol/chat.h"\n');
  put("src/engine/engine.cc", '// dist::Context() is read by the top level\n  auto* d = opt.dist;\n');
  put("src/engine/dist_control.cc", '#include "engine/dist_control.h"\n');
  put("src/router/router_server.cc", '#include "router/replica_set.h"\n#include "server/http_server.h"\n');
  put("apps/deepinfer/cmd_serve.cc", '#include "deepinfer/server.h"\n#include "startup.h"\n#include <thread>\n');
  put("apps/deepinfer/startup.cc", '#include "startup.h"\n#include "deepinfer/parallel.h"\n');
  put("apps/deepinfer/cmd_generate.cc", '#include "deepinfer/deepinfer.h"\n#include "deepinfer/progress.h"\n');
  put("include/deepinfer/server.h", '#include "deepinfer/engine.h"\n');
  v = findViolations(dir);
  const ok2 = v.length === 0;
  fs.rmSync(dir, {recursive: true, force: true});
  console.log(`${ok1 ? "ok  " : "FAIL"} a model file including kernels/cpu/, an API file including server/, an engine file reading dist::Context(), an engine file including router/ and a router file including engine/ are reported with their lines`);
  console.log(`${ok3 ? "ok  " : "FAIL"} serve including server/, startup.cc (beside the startup.h serve includes) including dist/, generate including <base/progress.h> and a public header serve reaches including engine/ are reported with their lines; the bench command and engine_flags.h are not`);
  console.log(`${ok2 ? "ok  " : "FAIL"} the same tree through kernels/ops.h and the public headers passes`);
  process.exit(ok1 && ok2 && ok3 ? 0 : 1);
}

const root = path.resolve(process.argv[2] ?? path.join(here, "../.."));
const violations = findViolations(root);
for (const v of violations) console.log(v);
console.log(violations.length ? `${violations.length} seam violation(s)` : `seams: ${RULES.map(r => r.name).join(", ")}: no violation`);
process.exit(violations.length ? 1 : 0);
