// HTTP-level conformance (issue 34), through the clients that use each item:
// - x-request-id on every answer (the openai SDK's `_request_id` / withResponse().request_id): the client's own
//   X-Request-Id echoed, a fresh id otherwise; on plain, streamed and error answers;
// - gzip for JSON answers when the client accepts it (curl --compressed), identical JSON after decoding, never
//   for streams, never when gzip is refused;
// - x-request-id also on the HTTP layer's own answers (a 413 for a body over the limit echoes the client's id, a
//   malformed request gets a fresh one, as does the 503 for a connection over --max-connections, whose
//   Content-Length must match its body), and exposed to browser clients (Access-Control-Expose-Headers);
// - GET /version (vLLM's route), the version `deepinfer --version` prints;
// - llama-server's route aliases without /v1 (/completions, /chat/completions, /models, /responses, /v1/health).
import {spawnSync} from "node:child_process";
import net from "node:net";
import {startServer, OpenAI, checker} from "./common.mjs";

const bin = process.argv[2];
const {check, done} = checker();

// Writes `bytes` on a fresh connection and returns everything the server sends until it closes (or 5 s pass).
function rawExchange(port, bytes) {
  return new Promise(resolve => {
    let got = "";
    const s = net.connect(port, "127.0.0.1", () => s.write(bytes));
    s.on("data", d => { got += d.toString("latin1"); });
    s.on("error", () => {});
    s.on("close", () => resolve(got));
    s.setTimeout(5000, () => s.destroy());
  });
}
const headerOf = (raw, name) => raw.match(new RegExp(`^${name}: *(.*?)\r$`, "mi"))?.[1];

function curl(args) {
  const r = spawnSync("curl", ["-sS", "-D", "-", ...args], {encoding: "buffer", maxBuffer: 64 << 20});
  const raw = r.stdout;
  const sep = raw.indexOf("\r\n\r\n");
  const head = raw.subarray(0, sep).toString("latin1");
  const headers = Object.fromEntries(head.split("\r\n").slice(1).map(l => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
  return {status: Number(head.split(" ")[1]), headers, body: raw.subarray(sep + 4), rc: r.status};
}

const srv = await startServer(bin);
try {
  const client = new OpenAI({baseURL: `${srv.base}/v1`, apiKey: "x", maxRetries: 0});
  const model = (await client.models.list()).data[0].id;
  const req = {model, messages: [{role: "user", content: "Once upon a time"}], max_tokens: 8, temperature: 0};

  // --- x-request-id
  const plain = await client.chat.completions.create(req);
  check(typeof plain._request_id === "string" && /^[0-9a-f]{32}$/.test(plain._request_id),
        `a generated x-request-id reaches the SDK as _request_id (${plain._request_id})`);
  const again = await client.chat.completions.create(req);
  check(again._request_id !== plain._request_id, "each answer gets its own id");
  const mine = await client.chat.completions.create(req, {headers: {"X-Request-Id": "client-chosen-42"}});
  check(mine._request_id === "client-chosen-42", `the client's X-Request-Id is echoed (${mine._request_id})`);
  const {request_id: streamId} = await client.chat.completions.create({...req, stream: true}, {headers: {"X-Request-Id": "stream-7"}}).withResponse();
  check(streamId === "stream-7", `a streamed answer carries it too (${streamId})`);
  let errId = null;
  try { await client.chat.completions.create({...req, temperature: -1}, {headers: {"X-Request-Id": "bad-1"}}); } catch (e) { errId = e.requestID ?? e.headers?.get?.("x-request-id"); }
  check(errId === "bad-1", `an error answer carries it (${errId})`);
  const spaced = curl([`${srv.base}/health`, "-H", "X-Request-Id: has space"]);
  check(/^[0-9a-f]{32}$/.test(spaced.headers["x-request-id"] ?? ""), `an unusable client id (space) is replaced by a fresh one (${spaced.headers["x-request-id"]})`);
  // The HTTP layer's own errors: a body over the limit is refused once the headers are read (the client's id is
  // among them), a malformed request line before any header (a fresh id).
  const tooBig = await rawExchange(srv.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-body-9\r\n" +
                                               "Content-Length: 99999999999\r\n\r\n");
  check(/^HTTP\/1.1 413/.test(tooBig) && headerOf(tooBig, "x-request-id") === "big-body-9",
        `the HTTP layer's 413 echoes the client's id (${headerOf(tooBig, "x-request-id")})`);
  const malformed = await rawExchange(srv.port, "BAD\r\n\r\n");
  check(/^HTTP\/1.1 400/.test(malformed) && /^[0-9a-f]{32}$/.test(headerOf(malformed, "x-request-id") ?? ""),
        `a malformed request's 400 has a fresh id (${headerOf(malformed, "x-request-id")})`);
  // Browsers hide answer headers from cross-origin scripts unless they are exposed by name.
  const cors = await fetch(`${srv.base}/health`, {headers: {Origin: "http://app.example"}});
  check(cors.headers.get("access-control-allow-origin") === "*" &&
        /(^|,\s*)x-request-id(\s*,|$)/i.test(cors.headers.get("access-control-expose-headers") ?? ""),
        `x-request-id is exposed to browser clients (${cors.headers.get("access-control-expose-headers")})`);

  // --- gzip: a JSON answer over 1 KiB (n = 8 samples with logprobs) compressed, decoded equal to the plain one
  const big = {model, prompt: "Once upon a time", max_tokens: 24, temperature: 0, n: 4, logprobs: 2};
  const post = (extra, body = big, path = "/v1/completions") =>
    curl([`${srv.base}${path}`, "-H", "Content-Type: application/json", "-d", JSON.stringify(body), ...extra]);
  const raw = post([]);
  const gz = post(["--compressed"]);
  const zipped = post(["-H", "Accept-Encoding: gzip"]);  // curl does not decode: the bytes on the wire
  const refused = post(["-H", "Accept-Encoding: gzip;q=0, identity"]);
  const strip = b => { const j = JSON.parse(b.toString("utf8")); delete j.id; delete j.created; return JSON.stringify(j); };
  check(raw.status === 200 && raw.body.length > 1024 && !raw.headers["content-encoding"], `no gzip unless asked (${raw.body.length} bytes plain)`);
  check(zipped.headers["content-encoding"] === "gzip" && zipped.headers["vary"]?.includes("Accept-Encoding") &&
        zipped.body[0] === 0x1f && zipped.body[1] === 0x8b && zipped.body.length < raw.body.length &&
        Number(zipped.headers["content-length"]) === zipped.body.length,
        `Accept-Encoding: gzip gets a gzip body (${zipped.body.length} bytes, Content-Length matches)`);
  check(gz.status === 200 && strip(gz.body) === strip(raw.body), "curl --compressed decodes it to the same JSON");
  check(!refused.headers["content-encoding"], "gzip;q=0 is honoured (plain answer)");
  const refusedUpper = post(["-H", "Accept-Encoding: GZIP; Q=0"]);  // names and parameters are case-insensitive
  check(refusedUpper.status === 200 && !refusedUpper.headers["content-encoding"], "GZIP; Q=0 is honoured too (plain answer)");
  const starred = post(["-H", "Accept-Encoding: br;q=1, *;q=0.5"]);
  check(starred.headers["content-encoding"] === "gzip", "* with q > 0 admits gzip");
  const streamed = post(["-H", "Accept-Encoding: gzip"], {...big, stream: true, n: 1});
  check(!streamed.headers["content-encoding"] && streamed.body.toString().startsWith("data: "), "streams are never compressed");
  const small = curl([`${srv.base}/health`, "-H", "Accept-Encoding: gzip"]);
  check(!small.headers["content-encoding"], "small answers stay plain");

  // --- /version
  const v = curl([`${srv.base}/version`]);
  const vj = JSON.parse(v.body.toString());
  check(v.status === 200 && /^\d+\.\d+\.\d+$/.test(vj.version), `GET /version: ${v.body.toString().trim()}`);
  const cliVersion = spawnSync(bin, ["--version"], {encoding: "utf8"}).stdout.trim();
  check(cliVersion === `deepinfer ${vj.version}`, `deepinfer --version says the same (${cliVersion})`);

  // --- llama-server's aliases without /v1 answer as the /v1 routes do
  const viaAlias = post([], {...req, max_tokens: 6}, "/chat/completions");
  const viaV1 = post([], {...req, max_tokens: 6}, "/v1/chat/completions");
  check(viaAlias.status === 200 && JSON.parse(viaAlias.body).choices[0].message.content === JSON.parse(viaV1.body).choices[0].message.content,
        "POST /chat/completions == /v1/chat/completions");
  const compAlias = post([], {model, prompt: "Hi", max_tokens: 6, temperature: 0}, "/completions");
  const compV1 = post([], {model, prompt: "Hi", max_tokens: 6, temperature: 0}, "/v1/completions");
  check(compAlias.status === 200 && JSON.parse(compAlias.body).choices[0].text === JSON.parse(compV1.body).choices[0].text,
        "POST /completions == /v1/completions");
  const models = curl([`${srv.base}/models`]);
  check(models.status === 200 && JSON.parse(models.body).data[0].id === model, "GET /models lists the model");
  const resp = post([], {model, input: "Hi", max_output_tokens: 4}, "/responses");
  check(resp.status === 200 && JSON.parse(resp.body).object === "response", "POST /responses answers a response");
  const health = curl([`${srv.base}/v1/health`]);
  check(health.status === 200 && JSON.parse(health.body).status === "ok", `GET /v1/health (llama-server's) is /health (${health.status})`);
  const viaSdk = new OpenAI({baseURL: srv.base, apiKey: "x", maxRetries: 0});  // a base URL without /v1
  const listed = await viaSdk.models.list();
  const one = await viaSdk.models.retrieve(model);
  check(listed.data[0].id === model && one.id === model, "the openai SDK with a base URL without /v1 lists and retrieves the model");
  const unknown = curl([`${srv.base}/v2/chat/completions`, "-d", "{}"]);
  check(unknown.status === 404, "unknown routes are still 404");
  const unknown2 = curl([`${srv.base}/chat/completion`, "-d", "{}"]);
  check(unknown2.status === 404 && /^[0-9a-f]{32}$/.test(unknown2.headers["x-request-id"] ?? ""), "a near-miss alias is 404 too (with an id)");
} catch (e) {
  check(false, `unexpected: ${e.stack ?? e}`);
} finally {
  check(await srv.stop() === 0, "server shut down cleanly");
}

// A connection over --max-connections is answered 503 before any request is read: an id of its own, and a
// Content-Length that matches the body (a client reads exactly that many bytes).
const one = await startServer(bin, ["--max-connections", "1"]);
try {
  const holder = net.connect(one.port, "127.0.0.1");
  await new Promise(r => holder.once("connect", r));
  await new Promise(r => setTimeout(r, 200));  // the server has accepted it
  const busy = await rawExchange(one.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const sep = busy.indexOf("\r\n\r\n");
  const body = sep < 0 ? "" : busy.slice(sep + 4);
  check(/^HTTP\/1.1 503/.test(busy) && Number(headerOf(busy, "content-length")) === Buffer.byteLength(body, "latin1") &&
        JSON.parse(body).error?.code === 503,
        `503 too many connections: Content-Length ${headerOf(busy, "content-length")}, body ${Buffer.byteLength(body, "latin1")} bytes`);
  check(/^[0-9a-f]{32}$/.test(headerOf(busy, "x-request-id") ?? ""), `the 503 has an id (${headerOf(busy, "x-request-id")})`);
  holder.destroy();
} catch (e) {
  check(false, `unexpected: ${e.stack ?? e}`);
} finally {
  check(await one.stop() === 0, "the one-connection server shut down cleanly");
}
done("server_conformance_http");
