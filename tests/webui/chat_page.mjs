// The web chat page of `deepinfer serve` (issue 36), driven in Debian's headless Chromium by playwright-core
// (pinned in tests/webui/package-lock.json; no browser download). Against real servers:
// - `serve --no-webui` answers 404 at / and /index.html;
// - a random-weight qwen3 make-tiny model with the real Qwen3 chat template (it has <think> blocks, so the server
//   splits reasoning_content) behind --api-key: the page loads without the key, shows a readable 401 message, takes
//   the key in Settings; a message streams in several visible steps; Stop ends a long generation (the text stops
//   growing, the server aborted the request: /metrics shows it disconnected and nothing running); Regenerate
//   replaces the answer; Edit and resend truncates; a reasoning answer (a grammar makes the random model write a
//   <think> block, as tests/server/tool_calls.mjs does) shows a collapsible reasoning section; a prompt over the
//   context gets a readable message; conversations survive a reload; the page fits a phone-width screen; once the
//   server is stopped, sending shows a readable "cannot reach the server" message.
// Screenshots of each state go to build/webui-screens/ (next to the binary) for CI's artifacts. The time to first
// paint is printed (docs/benchmarks.md).
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";
import {fileURLToPath} from "node:url";
import {startServer, startTinyQwen3, metrics, checker} from "../server/common.mjs";

const bin = process.argv[2];
const here = path.dirname(fileURLToPath(import.meta.url));
const {chromium} = createRequire(path.join(here, "package.json"))("playwright-core");
const {check, done} = checker();
const screens = path.join(path.dirname(path.resolve(bin)), "webui-screens");
fs.rmSync(screens, {recursive: true, force: true});
fs.mkdirSync(screens, {recursive: true});
const t0 = Date.now();

// --- 3. --no-webui: 404 at / (the API is unchanged).
{
  const srv = await startServer(bin, ["--no-webui"]);
  const root = await fetch(`${srv.base}/`), index = await fetch(`${srv.base}/index.html`);
  check(root.status === 404 && index.status === 404, `--no-webui: GET / and /index.html are 404 (${root.status}, ${index.status})`);
  check((await fetch(`${srv.base}/health`)).status === 200, "--no-webui: /health still answers");
  check(await srv.stop() === 0, "--no-webui server shut down cleanly");
}

// --- The page behind --api-key.
const KEY = "webui-test-key";
const {dir, srv, made} = await startTinyQwen3(bin, "di-webui-", ["--api-key", KEY]);
check(made, "make-tiny qwen3");
const metric = async name => (await metrics(srv.base)).get(name);
{
  const r = await fetch(`${srv.base}/`, {headers: {"Accept-Encoding": "gzip"}});
  const csp = r.headers.get("content-security-policy") ?? "", etag = r.headers.get("etag");
  const html = await r.text();
  check(r.status === 200 && r.headers.get("content-type") === "text/html; charset=utf-8" && html.includes("<title>deepinfer chat</title>"),
        `GET / without the API key: 200 text/html (${r.status} ${r.headers.get("content-type")})`);
  check(/default-src 'self'/.test(csp) && /script-src 'self' 'unsafe-inline'/.test(csp) && /connect-src 'self'/.test(csp) &&
        !/https?:/.test(csp), `Content-Security-Policy: self + inline only (${csp})`);
  check(r.headers.get("cache-control") === "no-cache" && /^"[0-9a-f]{20}"$/.test(etag ?? ""), `caching: no-cache + ETag ${etag}`);
  check(!/(src|href)=["']?(https?:)?\/\//i.test(html), "the page loads nothing from another origin (no CDN)");
  const again = await fetch(`${srv.base}/index.html`, {headers: {"If-None-Match": etag}});
  check(again.status === 304 && (await again.text()) === "", `revalidation with If-None-Match: 304 (${again.status})`);
  check((await fetch(`${srv.base}/v1/models`)).status === 401, "the API itself still needs the key");
  check((await fetch(`${srv.base}/`, {method: "POST"})).status === 405, "POST / is 405");
}

const browser = await chromium.launch({executablePath: process.env.DEEPINFER_CHROMIUM ?? "/usr/bin/chromium", headless: true,
                                       args: ["--no-sandbox"]});  // CI runs as root, where Chromium's sandbox cannot start
const page = await browser.newPage({viewport: {width: 1100, height: 760}});
page.setDefaultTimeout(10000);  // a broken page fails in seconds, not playwright's 30 s per action
const pageErrors = [];
page.on("pageerror", e => pageErrors.push(e.message));
page.on("console", m => { if (m.type() === "error" && !/Failed to load resource/.test(m.text())) pageErrors.push(m.text()); });
const shot = async name => page.screenshot({path: path.join(screens, `${name}.png`)});
const errorText = () => page.locator("#error.on span").textContent({timeout: 10000});
const idle = () => page.waitForFunction(() => !document.body.classList.contains("busy"), null, {timeout: 20000});
const lastAssistant = () => page.locator(".msg.assistant").last();
async function settings(values) {
  await page.click("#settings-btn");
  for (const [id, v] of Object.entries(values)) await page.fill(`#${id}`, v);
  await page.click("#s-save");
}
async function send(text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}

try {
  // Time to first paint (the benchmark in docs/benchmarks.md): Chromium's own paint timing, from navigation
  // start. Five loads, each in a fresh context (empty cache and storage): the first also pays for the browser's
  // warm-up, the median of the other four is the page's own number.
  const loads = [];
  for (let i = 0; i < 5; ++i) {
    const ctx = await browser.newContext({viewport: {width: 1100, height: 760}});
    const p = await ctx.newPage();
    await p.goto(srv.base + "/");
    await p.waitForFunction(() => performance.getEntriesByType("paint").length >= 2);
    loads.push(await p.evaluate(() => {
      const paint = Object.fromEntries(performance.getEntriesByType("paint").map(e => [e.name, e.startTime]));
      const nav = performance.getEntriesByType("navigation")[0];
      return {fp: paint["first-paint"], fcp: paint["first-contentful-paint"], responseEnd: nav.responseEnd, bytes: nav.transferSize};
    }));
    await ctx.close();
  }
  const warm = loads.slice(1).sort((a, b) => a.fcp - b.fcp);
  const median = k => (warm[1][k] + warm[2][k]) / 2;
  console.log(`first paint: median ${median("fp").toFixed(1)} ms, first contentful paint ${median("fcp").toFixed(1)} ms, response end ` +
              `${median("responseEnd").toFixed(1)} ms over 4 loads (${warm.map(l => l.fcp.toFixed(0)).join(", ")} ms); first load with ` +
              `the browser cold: ${loads[0].fcp.toFixed(1)} ms; ${loads[0].bytes} bytes transferred (gzip)`);
  check(warm.every(l => l.fcp > 0), "first contentful paint measured");
  await page.goto(srv.base + "/");

  // No key yet: the API answered 401, and the page says what to do.
  const need = await errorText();
  check(/API key/.test(need) && /Settings/.test(need), `401 shown readably: "${need}"`);
  await shot("01-needs-api-key");

  // The key (and an answer of 2000 tokens: the tiny model streams 300 in ~100 ms, which a loaded machine's browser
  // may paint in 2 frames; 2000 take several hundred ms) in Settings: the model shows, the message goes away. The random model's
  // 512-token vocabulary would end answers at its EOS too early and at random: ignore_eos, through the page's extra
  // request fields, makes every answer run to Max tokens (or to Stop).
  await settings({"s-key": KEY, "s-max": "2000", "s-temp": "1", "s-extra": '{"ignore_eos": true}'});
  await page.waitForFunction(() => document.getElementById("model").textContent.includes("·"), null, {timeout: 5000});
  check(!(await page.locator("#error.on").count()), "with the key: no error, model listed: " + await page.locator("#model").textContent());

  // Streaming: every distinct text the answer shows while it arrives, seen by a MutationObserver.
  await page.evaluate(() => {
    window.__states = [];
    new MutationObserver(() => {
      const a = [...document.querySelectorAll(".msg.assistant .content")].pop();
      const t = a ? a.textContent : "";
      if (t && window.__states[window.__states.length - 1] !== t) window.__states.push(t);
    }).observe(document.getElementById("messages"), {childList: true, subtree: true, characterData: true});
  });
  await send("Hello! Who are you?");
  await idle();
  const states = await page.evaluate(() => window.__states);
  const final = await lastAssistant().locator(".content").textContent();
  check(states.length >= 3 && final.length > 0 && states[states.length - 1] === final,
        `streamed in ${states.length} visible steps to ${final.length} characters`);
  check(/2000 tokens/.test(await lastAssistant().locator(".note").textContent()), "the answer ends at Max tokens (2000), noted");
  await shot("02-streamed-answer");

  // Stop mid-stream: a generation to the end of the 8k context, stopped once it shows some text.
  const tokensBefore = await metric("deepinfer_generation_tokens_total");
  const lengthFinish = async () => Number((await metrics(srv.base)).text.match(/finish_reason="length"} (\d+)/)[1]);
  const lengthBefore = await lengthFinish();
  const disconnectsBefore = (await metrics(srv.base)).text.match(/outcome="client_disconnected"} (\d+)/)[1];
  await settings({"s-max": ""});
  await send("Tell me a very long story.");
  await page.waitForFunction(() => ([...document.querySelectorAll(".msg.assistant .content")].pop()?.textContent.length ?? 0) > 150,
                             null, {timeout: 15000});
  check(await page.locator("#stop").isVisible(), "Stop is offered while the answer streams");
  await shot("03-streaming");
  await page.click("#stop");
  await idle();
  const stopped = await lastAssistant().locator(".content").textContent();
  await page.waitForTimeout(600);
  const later = await lastAssistant().locator(".content").textContent();
  check(stopped === later && stopped.length > 150, `after Stop the text stays as it was (${stopped.length} characters)`);
  check((await lastAssistant().locator(".note").textContent()) === "Stopped.", "the answer is marked Stopped.");
  // The server aborted the request: its client disconnected, nothing runs, and it never reached its token limit
  // (the end of the 8k context).
  let running = NaN, inFlight = NaN, disconnects = "";
  for (let i = 0; i < 50; ++i) {
    const m = await metrics(srv.base);
    running = m.get("deepinfer_num_requests_running");
    inFlight = m.get("deepinfer_num_requests_in_flight");
    disconnects = m.text.match(/outcome="client_disconnected"} (\d+)/)[1];
    if (running === 0 && inFlight === 0 && disconnects !== disconnectsBefore) break;
    await new Promise(r => setTimeout(r, 100));
  }
  const stopTokens = await metric("deepinfer_generation_tokens_total") - tokensBefore;
  check(running === 0 && inFlight === 0 && Number(disconnects) === Number(disconnectsBefore) + 1,
        `Stop aborted the request on the server (running ${running}, in flight ${inFlight}, client disconnects ${disconnectsBefore} -> ${disconnects})`);
  const lengthAfter = await lengthFinish();
  check(stopTokens > 0 && stopTokens < 8192 && lengthAfter === lengthBefore,
        `the stopped request generated ${stopTokens} tokens and did not run to its limit (finish "length" ${lengthBefore} -> ${lengthAfter})`);
  await shot("04-stopped");

  // Regenerate: the stopped answer is replaced by a new one (not appended).
  await settings({"s-max": "40"});
  const assistantsBefore = await page.locator(".msg.assistant").count();
  await lastAssistant().getByRole("button", {name: "Regenerate"}).click();
  await idle();
  const regenerated = await lastAssistant().locator(".content").textContent();
  check(await page.locator(".msg.assistant").count() === assistantsBefore && regenerated.length > 0 && regenerated !== stopped &&
        /40 tokens/.test(await lastAssistant().locator(".note").textContent()),
        `Regenerate replaced the stopped answer (${stopped.length} -> ${regenerated.length} characters)`);
  await shot("05-regenerated");

  // Edit and resend the first message: what followed it goes, a new answer comes.
  await page.locator(".msg.user").first().getByRole("button", {name: "Edit"}).click();
  await page.locator(".msg.user textarea").fill("Hello again, edited.");
  await page.getByRole("button", {name: "Save & send"}).click();
  await idle();
  const roles = await page.locator("#messages .msg").evaluateAll(els => els.map(e => e.className));
  check(roles.join() === "msg user,msg assistant" && (await page.locator(".msg.user").textContent()).startsWith("Hello again, edited."),
        `Edit and resend: the conversation restarts from the edited message (${roles.join(" / ")})`);

  // Reasoning: a grammar through the page's extra request fields makes the random model write a <think> block.
  await page.click("#new");
  await settings({"s-max": "200", "s-extra": JSON.stringify({guided_grammar: 'root ::= "<think>\\n" "plan" [a-z ]{0,40} "\\n</think>\\n\\n" "so **ok** `x<y>`" [a-z ]{0,20}\n'})});
  await send("Think first, then answer.");
  await idle();
  const det = lastAssistant().locator("details.reasoning");
  const rtext = await det.locator(".rtext").textContent();
  const content = await lastAssistant().locator(".content").innerHTML();
  check(await det.count() === 1 && rtext.startsWith("plan") && !rtext.includes("think>") && !(await det.evaluate(d => d.open)),
        `a collapsed reasoning section holds the reasoning: "${rtext}"`);
  check(/^<p>so <strong>ok<\/strong> <code>x&lt;y&gt;<\/code>/.test(content) && !content.includes("think"),
        `the answer after it is rendered markdown: ${content}`);
  await det.locator("summary").click();
  check(await det.evaluate(d => d.open), "the reasoning section opens on click");
  await shot("06-reasoning");
  await settings({"s-extra": '{"ignore_eos": true}', "s-max": "40"});

  // The markdown renderer escapes everything and keeps only safe link schemes.
  const md = await page.evaluate(() => markdown("# T\n\n- a\n- b\n\n1. c\n\n<img src=x onerror=alert(1)> [bad](javascript:alert(1)) " +
                                                "[ok](https://example.org/?a=1&b=2) *it*\n\n```js\nif (a < b) {}\n```\n> q"));
  check(md.includes("<h1>T</h1>") && md.includes("<ul><li>a</li><li>b</li></ul>") && md.includes("<ol><li>c</li></ol>") &&
        md.includes("&lt;img src=x onerror=alert(1)&gt;") && !md.includes("<img") && !md.includes('href="javascript') &&
        md.includes('<a href="https://example.org/?a=1&amp;b=2"') && md.includes("<em>it</em>") &&
        md.includes('<code class="lang-js">if (a &lt; b) {}</code>') && md.includes("<blockquote><p>q</p></blockquote>"),
        `markdown: headings, lists, code fences, quotes, emphasis; HTML escaped, javascript: links dropped: ${md}`);

  // Context overflow: a prompt longer than the 8k context gets a readable message.
  await page.click("#new");
  await send("story ".repeat(9000));
  const overflow = await errorText();
  check(/no longer fits the model's context \(8192 tokens\)/.test(overflow), `context overflow shown readably: "${overflow.split("\n")[0]}"`);
  await shot("07-context-overflow");

  // Conversations are kept in the browser across a reload.
  const titles = await page.locator("#convs li").count();
  await page.reload();
  await page.waitForFunction(() => document.getElementById("model").textContent.includes("·"), null, {timeout: 5000});
  check(titles >= 3 && await page.locator("#convs li").count() === titles, `conversations kept across a reload (${titles})`);
  await page.locator("#convs li button.open", {hasText: "Think first"}).click();
  check(await page.locator(".msg.assistant details.reasoning").count() === 1, "a kept conversation reopens with its reasoning");

  // Phone width: nothing wider than the screen; the conversation list is behind the menu button.
  await page.setViewportSize({width: 390, height: 780});
  await page.waitForTimeout(300);  // the list slides away (a 0.15 s transition)
  const overflowX = await page.evaluate(() => document.documentElement.scrollWidth);
  const side = await page.locator("#side").boundingBox();
  check(overflowX <= 390 && await page.locator("#menu").isVisible() && side.x + side.width <= 0,
        `phone width: fits 390 px (scroll width ${overflowX}), list hidden behind the menu (x ${side.x}, width ${side.width})`);
  await shot("08-phone");
  await page.click("#menu");
  await page.waitForTimeout(250);
  check((await page.locator("#side").boundingBox()).x >= 0, "phone width: the menu opens the conversation list");
  await shot("09-phone-conversations");
  await page.click("#side-close");
  await page.waitForTimeout(250);
  check((await page.locator("#side").boundingBox()).x < 0, "phone width: the list closes again");
  await page.setViewportSize({width: 1100, height: 760});

  // The server goes away: sending says so in words (the shutdown leak check passes first).
  check(await srv.stop() === 0, "server shut down cleanly (no leaked requests or KV blocks)");
  await send("Are you still there?");
  const down = await errorText();
  check(/Cannot reach the deepinfer server/.test(down) && /still running/.test(down), `server stopped: "${down}"`);
  await shot("10-server-down");
  check(pageErrors.length === 0, `no script errors on the page ${JSON.stringify(pageErrors.slice(0, 3))}`);
} catch (e) {
  check(false, `browser flow: ${e.stack ?? e}`);
  await shot("99-failure").catch(() => {});
  if (srv.proc.exitCode === null) await srv.stop();
} finally {
  await browser.close();
  fs.rmSync(dir, {recursive: true, force: true});
}
console.log(`screenshots: ${fs.readdirSync(screens).join(", ")} in ${screens}; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
done("webui_chat_page");
