// Structured output end to end, through the official `openai` SDK, on stories260K (a real SentencePiece-style
// vocabulary) and a random-weight qwen3 make-tiny model (byte-level BPE). Random or tiny models write nonsense,
// so these are tests of enforcement: every output is checked by independent validators (JSON.parse, ajv with
// ajv-formats for JSON Schema, zod through chat.completions.parse, JavaScript RegExp for regexes), never by the
// engine's own matcher. Also: 400s naming the problem, seeded reproducibility, and batch invariance (the same
// seeded requests alone and mixed into a concurrent batch give identical text).
import {spawnSync} from "node:child_process";
import {createRequire} from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {startServer, OpenAI, checker, repoRoot} from "./common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const {check, done} = checker();
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const Ajv = require("ajv").default;
const addFormats = require("ajv-formats").default;
const {z} = require("zod");
const {zodResponseFormat} = require("openai/helpers/zod");

// Deterministic generator for the schema corpus (the shared seeded generator of tests/common/rng.mjs).
const {int: rnd, pick} = makeRng(12345);
const PATTERNS = ["^[A-Z]{2}[0-9]{3}$", "^(yes|no)$", "^[a-f0-9]{4}-[a-f0-9]{2}$", "^\\d{1,3}(\\.\\d)?$"];
const FORMATS = ["date", "time", "date-time", "uuid", "email"];
// Room for the longest corpus outputs: nested arrays of objects of up to 4 fields, with the whitespace JSON allows
// between tokens (stories260K writes runs of spaces and newlines there), reach ~450 tokens.
const MAX_TOKENS = 1000;

// A fresh $defs name, reserved before its body is generated (a $ref made inside the body must get another name).
function reserve(defs) {
  const name = `d${Object.keys(defs).length}`;
  defs[name] = null;
  return name;
}

function genSchema(depth, defs) {
  const leaf = [
    () => ({type: "string", maxLength: 1 + rnd(6)}),
    () => ({type: "string", minLength: 1, maxLength: 4}),
    () => ({enum: pick([["red", "green", "blue"], ["a", 1, null, true], ["x y", "é", "中"]])}),
    () => ({type: "integer", minimum: -rnd(50), maximum: rnd(1000)}),
    () => ({type: "integer", exclusiveMinimum: rnd(10), exclusiveMaximum: 20 + rnd(30)}),
    () => ({type: "integer"}),
    () => ({type: "number"}),
    () => ({type: "number", minimum: 0, maximum: 100}),
    () => ({type: "boolean"}),
    () => ({type: "null"}),
    () => ({const: pick(["fixed", 42, false])}),
    () => ({type: "string", pattern: pick(PATTERNS)}),
    () => ({type: "string", pattern: pick(PATTERNS)}),  // twice: about 15 uses of each pattern in the corpus
    () => ({type: "string", format: pick(FORMATS)}),
    () => ({type: "string", format: pick(FORMATS)}),
    () => ({type: ["string", "null"], maxLength: 3}),
    () => ({type: "integer", nullable: true, minimum: 1, maximum: 9}),
  ];
  if (depth <= 0) return pick(leaf)();
  const kind = rnd(11);
  if (kind < 4) {
    const props = {}, n = 1 + rnd(4), required = [];
    for (let i = 0; i < n; ++i) {
      const k = pick(["id", "name", "value", "tags", "meta", "when", "kind", "n", "ok", "x-y"]) + (i ? i : "");
      props[k] = genSchema(depth - 1, defs);
      if (rnd(3)) required.push(k);
    }
    return {type: "object", properties: props, required, additionalProperties: false};
  }
  if (kind < 6) {
    const min = rnd(2), max = min + rnd(3);
    return {type: "array", items: genSchema(depth - 1, defs), minItems: min, maxItems: max};
  }
  if (kind < 7) {
    // One time in three, a branch is itself an anyOf (nested alternatives: the grammar must flatten or nest them).
    const inner = rnd(3) ? null : {anyOf: [genSchema(depth - 1, defs), genSchema(depth - 1, defs)]};
    return {anyOf: [inner ?? genSchema(depth - 1, defs), genSchema(depth - 1, defs)]};
  }
  if (kind < 8) {
    const name = reserve(defs);
    defs[name] = genSchema(depth - 1, defs);
    return {$ref: `#/$defs/${name}`};
  }
  if (kind < 9) {
    // A recursive definition: an object that refers to itself through a nullable field (a list) or a short
    // array (a tree of at most 2 children per node). Either way the recursion can stop at every level.
    const name = reserve(defs), self = () => ({$ref: `#/$defs/${name}`});
    const back = rnd(2) ? {anyOf: [self(), {type: "null"}]} : {type: "array", items: self(), maxItems: 1 + rnd(2)};
    const field = pick(["next", "children", "sub"]);
    defs[name] = {type: "object", properties: {v: genSchema(depth - 1, defs), [field]: back},
                  required: rnd(2) ? ["v", field] : [field], additionalProperties: false};
    return self();
  }
  return pick(leaf)();
}

function corpus(n) {
  const out = [];
  for (let i = 0; i < n; ++i) {
    const defs = {};
    const s = genSchema(1 + rnd(3), defs);
    if (Object.keys(defs).length) s.$defs = defs;
    out.push(s);
  }
  // A recursive one: a linked list through $ref.
  out.push({$defs: {node: {type: "object", properties: {v: {type: "integer", minimum: 0, maximum: 9},
            next: {anyOf: [{$ref: "#/$defs/node"}, {type: "null"}]}}, required: ["v", "next"], additionalProperties: false}},
            $ref: "#/$defs/node"});
  return out;
}

// What the corpus holds, so a generator regression fails loudly (the double-precision LCG this file used before
// gave 171 one-property objects, no $ref, one pattern of four, minItems 0 in 85 of 86 arrays). Counted over the
// 201 schemas (nodes inside $defs included). The seeded generator gives 232, 45, 51, 22, 16..26 per pattern and
// 9..16 per format; the minimums are about half of that, so they catch a collapse (a kind never drawn, a field
// always 0 or 1, one pick always the same) without pinning the exact draw:
//   objects with 2+ properties        >= 100 nodes
//   schemas with a recursive $ref     >= 20 (a $defs entry that reaches itself through $refs)
//   arrays with minItems > 0          >= 25 nodes
//   nested anyOf                      >= 10 anyOf nodes with another anyOf inside a branch
//   each pattern of PATTERNS          >= 8 uses; each format of FORMATS >= 4 uses
const COVERAGE_MIN = {objects2: 100, recursiveRef: 20, minItems: 25, nestedAnyOf: 10, pattern: 8, format: 4};
function coverage(schemas) {
  const c = {objects2: 0, recursiveRef: 0, minItems: 0, nestedAnyOf: 0, refs: 0, props: {},
             patterns: Object.fromEntries(PATTERNS.map(p => [p, 0])), formats: Object.fromEntries(FORMATS.map(f => [f, 0]))};
  const hasAnyOf = node => node && typeof node === "object" &&
    (Array.isArray(node) ? node.some(hasAnyOf) : "anyOf" in node || Object.values(node).some(hasAnyOf));
  const walk = node => {
    if (!node || typeof node !== "object") return;
    if (Array.isArray(node)) return node.forEach(walk);
    if (node.type === "object") {
      const n = Object.keys(node.properties ?? {}).length;
      c.props[n] = (c.props[n] ?? 0) + 1;
      if (n >= 2) ++c.objects2;
    }
    if (node.type === "array" && node.minItems > 0) ++c.minItems;
    if (Array.isArray(node.anyOf) && node.anyOf.some(hasAnyOf)) ++c.nestedAnyOf;
    if (typeof node.pattern === "string") c.patterns[node.pattern] = (c.patterns[node.pattern] ?? 0) + 1;
    if (typeof node.format === "string") c.formats[node.format] = (c.formats[node.format] ?? 0) + 1;
    if (typeof node.$ref === "string") ++c.refs;
    for (const [k, v] of Object.entries(node)) if (k !== "enum" && k !== "const") walk(v);
  };
  for (const s of schemas) {
    walk(s);
    // Recursion: some $defs entry reaches itself by following $refs (through other entries too).
    const defs = s.$defs ?? {};
    const refsOf = node => !node || typeof node !== "object" ? [] :
      Object.entries(node).flatMap(([k, v]) => k === "$ref" && typeof v === "string" ? [v.replace("#/$defs/", "")] : refsOf(v));
    const reaches = (from, to, seen = new Set()) => refsOf(defs[from]).some(d => d === to || (!seen.has(d) && seen.add(d) && reaches(d, to, seen)));
    if (Object.keys(defs).some(d => reaches(d, d))) ++c.recursiveRef;
  }
  return c;
}

async function pool(items, width, fn) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({length: width}, async () => {
    while (next < items.length) { const i = next++; results[i] = await fn(items[i], i); }
  }));
  return results;
}

async function suite(label, modelArgs, schemas) {
  const srv = await startServer(bin, modelArgs);
  const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  const ajv = new Ajv({strict: false, allErrors: true});
  addFormats(ajv);
  try {
    // The corpus: every output parses and validates.
    let valid = 0, stopped = 0, longest = 0;
    const failures = [];
    const texts = await pool(schemas, 8, async (schema, i) => {
      const r = await client.completions.create({model, prompt: "Once upon a time", max_tokens: MAX_TOKENS, temperature: 1, seed: i,
        response_format: {type: "json_schema", json_schema: {name: `s${i}`, schema, strict: true}}});
      const c = r.choices[0];
      if (c.finish_reason === "stop") ++stopped;
      longest = Math.max(longest, r.usage?.completion_tokens ?? 0);
      let ok = false;
      try { ok = ajv.validate(schema, JSON.parse(c.text)); } catch { ok = false; }
      if (ok) ++valid; else if (failures.length < 3) failures.push(`${JSON.stringify(schema)} -> ${JSON.stringify(c.text)} (${c.finish_reason})`);
      return c.text;
    });
    check(valid === schemas.length && stopped === schemas.length,
          `${label}: ${valid}/${schemas.length} outputs valid against their schema (ajv), ${stopped} finished by the grammar ` +
          `(longest ${longest} tokens, max_tokens ${MAX_TOKENS}) ${failures.join("; ")}`);

    // Seeded reproducibility and batch invariance: requests 0..15 alone, one at a time, equal the batch's.
    const alone = [];
    for (let i = 0; i < 16; ++i) {
      const r = await client.completions.create({model, prompt: "Once upon a time", max_tokens: MAX_TOKENS, temperature: 1, seed: i,
        response_format: {type: "json_schema", json_schema: {name: `s${i}`, schema: schemas[i]}}});
      alone.push(r.choices[0].text);
    }
    check(alone.every((t, i) => t === texts[i]), `${label}: seeded grammar outputs are identical alone and in a concurrent batch`);
    // Overlap on/off identity: a --no-overlap server gives the same constrained texts for the same seeds.
    const srv2 = await startServer(bin, [...modelArgs, "--no-overlap"]);
    const client2 = new OpenAI({baseURL: `${srv2.base}/v1`, apiKey: "x", maxRetries: 0});
    const noOverlap = await pool(schemas.slice(0, 24), 8, async (schema, i) => (await client2.completions.create({model,
      prompt: "Once upon a time", max_tokens: MAX_TOKENS, temperature: 1, seed: i,
      response_format: {type: "json_schema", json_schema: {name: `s${i}`, schema}}})).choices[0].text);
    check(noOverlap.every((t, i) => t === texts[i]) && (await srv2.stop()) === 0,
          `${label}: --no-overlap gives identical constrained outputs (24 seeded requests, 8 concurrent)`);

    // chat.completions.parse with a zod schema.
    const Person = z.object({name: z.string().max(8), age: z.number().int().min(0).max(120), pet: z.enum(["dog", "cat"]),
                             tags: z.array(z.enum(["a", "b"])).max(2)});
    const parsed = await client.chat.completions.parse({model, messages: [{role: "user", content: "Describe a person."}],
      max_tokens: 300, temperature: 1, seed: 7, response_format: zodResponseFormat(Person, "person")});
    const msg = parsed.choices[0].message;
    check(msg.parsed && Person.safeParse(msg.parsed).success && parsed.choices[0].finish_reason === "stop",
          `${label}: chat.completions.parse with zod gives a parsed object ${JSON.stringify(msg.content)}`);

    // json_object: any JSON object. Strings in "any JSON" are unbounded, and a random model rarely picks the
    // closing quote among ~all tokens, so a logit bias for the tokens spelling `"`, `}`, `]` (and against `,`) makes them
    // finish (the bias acts before the mask: the grammar still decides what is allowed).
    const tokenize = async text => (await (await fetch(`${srv.base}/tokenize`, {method: "POST", headers: {"Content-Type": "application/json"},
                                     body: JSON.stringify({prompt: text, add_special_tokens: false})})).json()).tokens ?? [];
    const spaces = new Set(await tokenize(" "));  // SentencePiece spells a leading space as its own token
    const bias = {};
    for (const ch of ['"', "}", "]"]) for (const id of await tokenize(ch)) if (!spaces.has(id)) bias[id] = 8;
    for (const id of await tokenize(",")) if (!spaces.has(id)) bias[id] = -8;  // and objects close
    let objects = 0;
    for (let s = 0; s < 4; ++s) {
      const r = await client.chat.completions.create({model, messages: [{role: "user", content: "JSON please"}], max_tokens: 600,
        temperature: 0.7, seed: s, response_format: {type: "json_object"}, logit_bias: bias});
      const c = r.choices[0];
      try { const v = JSON.parse(c.message.content); if (c.finish_reason === "stop" && v && typeof v === "object" && !Array.isArray(v)) ++objects; }
      catch { console.log(`  json_object output (${c.finish_reason}): ${JSON.stringify(c.message.content).slice(0, 300)}`); }
    }
    check(objects === 4, `${label}: response_format json_object: ${objects}/4 outputs are JSON objects (bias ${JSON.stringify(bias)})`);

    // guided_regex / guided_choice / guided_grammar / structured_outputs, checked by RegExp and set membership.
    const regexes = ["[a-z]{1,8}@[a-z]{2,5}\\.(com|org)", "(\\+|-)?[0-9]{1,4}(\\.[0-9]{1,2})?", "(cat|dog|bird)( and (cat|dog|bird)){0,3}"];
    for (const re of regexes) {
      for (const field of ["guided_regex", "structured_outputs"]) {
        const body = field === "guided_regex" ? {guided_regex: re} : {structured_outputs: {regex: re}};
        const r = await client.completions.create({model, prompt: "The", max_tokens: 64, temperature: 1, seed: 3, ...body});
        const t = r.choices[0].text;
        check(new RegExp(`^(?:${re})$`).test(t) && r.choices[0].finish_reason === "stop", `${label}: ${field} ${re} -> ${JSON.stringify(t)}`);
      }
    }
    const choices = ["positive", "negative", "neutral ☺"];
    const seen = new Set();
    for (let s = 0; s < 6; ++s) {
      const r = await client.chat.completions.create({model, messages: [{role: "user", content: "sentiment?"}], max_tokens: 20,
        temperature: 1, seed: s, guided_choice: choices});
      seen.add(r.choices[0].message.content);
    }
    check([...seen].every(c => choices.includes(c)), `${label}: guided_choice outputs are among the choices: ${[...seen].join(" | ")}`);
    const gbnf = 'root ::= "(" expr ")"\nexpr ::= term ([+*] term){0,3}\nterm ::= [0-9]{1,2} | "x"\n';
    const g = await client.completions.create({model, prompt: "Math:", max_tokens: 40, temperature: 1, seed: 2, guided_grammar: gbnf});
    check(/^\((?:[0-9]{1,2}|x)(?:[+*](?:[0-9]{1,2}|x)){0,3}\)$/.test(g.choices[0].text), `${label}: guided_grammar -> ${JSON.stringify(g.choices[0].text)}`);

    // Streaming concatenates to the non-streamed constrained text.
    const sreq = {model, prompt: "Once upon a time", max_tokens: MAX_TOKENS, temperature: 1, seed: 3,
                  response_format: {type: "json_schema", json_schema: {name: "s3", schema: schemas[3]}}};
    let streamed = "";
    for await (const ch of await client.completions.create({...sreq, stream: true})) for (const c of ch.choices) streamed += c.text;
    check(streamed === texts[3], `${label}: a streamed constrained completion equals the non-streamed one`);

    // Invalid constraints: 400 naming the problem.
    const bad = [
      [{guided_regex: "(ab"}, "missing ')'"],
      [{guided_json: {type: "object", properties: {a: {type: "strng"}}}}, "unknown type 'strng'"],
      [{response_format: {type: "json_schema", json_schema: {name: "x", schema: {type: "string", not: {}}}}}, "unsupported keyword 'not'"],
      [{guided_grammar: "root ::= undefined-rule\n"}, "'undefined-rule'"],
      [{guided_grammar: "root ::= root \"a\"\n"}, "left-recursive"],
      [{guided_choice: []}, "empty"],
      [{guided_regex: "a", guided_choice: ["b"]}, "only one structured output constraint"],
      [{response_format: {type: "xml"}}, "response_format.type"],
      [{guided_json: "{not json"}, "not valid JSON"],
    ];
    for (const [body, want] of bad) {
      let status = 0, message = "";
      try { await client.completions.create({model, prompt: "x", max_tokens: 4, ...body}); }
      catch (e) { status = e.status; message = e.message; }
      check(status === 400 && message.includes(want), `${label}: 400 for ${JSON.stringify(body)}: ${message}`);
    }
  } finally {
    const code = await srv.stop();
    check(code === 0, `${label}: server shut down cleanly (${code})`);
  }
}

const schemas = corpus(200);
let covered;
{
  const c = coverage(schemas), m = COVERAGE_MIN;
  const low = [["objects with 2+ properties", c.objects2, m.objects2], ["recursive $ref", c.recursiveRef, m.recursiveRef],
               ["minItems > 0", c.minItems, m.minItems], ["nested anyOf", c.nestedAnyOf, m.nestedAnyOf],
               ...Object.entries(c.patterns).map(([k, n]) => [`pattern ${k}`, n, m.pattern]),
               ...Object.entries(c.formats).map(([k, n]) => [`format ${k}`, n, m.format])].filter(([, n, min]) => !(n >= min));
  covered = !low.length;
  check(covered,
        `schema corpus coverage (${schemas.length} schemas): objects with 2+ properties ${c.objects2} (min ${m.objects2}; ` +
        `objects by property count ${JSON.stringify(c.props)}), ` +
        `schemas with a recursive $ref ${c.recursiveRef} (min ${m.recursiveRef}; ${c.refs} $refs in all), ` +
        `arrays with minItems > 0 ${c.minItems} (min ${m.minItems}), nested anyOf ${c.nestedAnyOf} (min ${m.nestedAnyOf}), ` +
        `patterns ${JSON.stringify(c.patterns)} (min ${m.pattern} each), formats ${JSON.stringify(c.formats)} (min ${m.format} each)` +
        (low.length ? `; below the minimum: ${low.map(([k, n, min]) => `${k}: ${n} < ${min}`).join(", ")}` : ""));
}
if (process.argv[2] === "--dump-schemas") {  // the corpus for `deepinfer bench grammar --schemas`
  fs.writeFileSync(process.argv[3], schemas.map(s => JSON.stringify(s)).join("\n") + "\n");
  process.exit(covered ? 0 : 1);
}
await suite("stories260K", [], schemas);
// Offline batch mode (`generate --input`) takes the same fields.
{
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "di-so-batch-"));
  const lines = schemas.slice(0, 20).map((schema, i) => ({prompt: "Once upon a time", max_tokens: MAX_TOKENS, temperature: 1, seed: i,
                                                          response_format: {type: "json_schema", json_schema: {name: "s", schema}}}));
  lines.push({prompt: "Once", max_tokens: 20, temperature: 1, seed: 1, guided_choice: ["left", "right"]});
  fs.writeFileSync(path.join(dir, "in.jsonl"), lines.map(l => JSON.stringify(l)).join("\n") + "\n");
  const r = spawnSync(bin, ["generate", "-m", path.join(repoRoot, "../shared/models/stories260K.gguf"), "--input", path.join(dir, "in.jsonl"),
                            "--output", path.join(dir, "out.jsonl"), "-q"], {encoding: "utf8"});
  const out = fs.readFileSync(path.join(dir, "out.jsonl"), "utf8").trim().split("\n").map(l => JSON.parse(l));
  const ajv = new Ajv({strict: false});
  addFormats(ajv);
  const okSchemas = out.slice(0, 20).filter((o, i) => { try { return ajv.validate(schemas[i], JSON.parse(o.text)); } catch { return false; } }).length;
  check(r.status === 0 && okSchemas === 20 && ["left", "right"].includes(out[20].text),
        `generate --input: ${okSchemas}/20 schema lines valid (ajv), choice line ${JSON.stringify(out[20]?.text)}`);
  fs.rmSync(dir, {recursive: true, force: true});
}
const tiny = fs.mkdtempSync(path.join(os.tmpdir(), "di-so-"));
const mk = spawnSync(bin, ["make-tiny", "--arch", "qwen3", "--out", tiny, "-q", "--seed", "5"], {encoding: "utf8"});
check(mk.status === 0, `make-tiny qwen3 (${(mk.stderr || "").trim().slice(-200)})`);
await suite("random qwen3 tiny", ["-m", tiny], schemas.slice(0, 60));
fs.rmSync(tiny, {recursive: true, force: true});
done("structured_output");
