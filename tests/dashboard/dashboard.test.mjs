// Headless Chromium test of the SLM dashboard, driven by playwright-core.
// Starts the `dashboard_demo` example (in-process services on a temp data
// root), checks every page and saves screenshots. Prints "N passed, M failed".
//
// Env: DASHBOARD_DEMO_BIN (required: the built example binary),
//      CHROMIUM (default /usr/bin/chromium), SCREENSHOT_DIR.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const BIN = process.env.DASHBOARD_DEMO_BIN;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const SHOTS = process.env.SCREENSHOT_DIR || "target/dashboard-screenshots";
const ADAPTERS = [
  "CrewAI", "LangChain", "LangGraph", "Semantic Kernel", "LlamaIndex",
  "Microsoft Agent Framework", "AutoGen", "Google ADK", "OpenAI Agents",
];

let passed = 0, failed = 0;
function assert(cond, msg) { if (!cond) throw new Error(msg); }

async function test(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   - ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL - ${name}\n       ${String(e && e.stack || e).split("\n").slice(0, 4).join("\n       ")}`);
  }
}

function startServer() {
  // An empty PATH directory: `bounded-loops-mcp` is certainly absent.
  const emptyPath = mkdtempSync(join(tmpdir(), "dash-path-"));
  const child = spawn(BIN, ["0"], {
    env: { ...process.env, SLM_DASHBOARD_DEMO_PATH: emptyPath, SLM_LOOP_KILL: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start:\n" + err)), 60000);
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve({ child, base: m[1] }); }
    });
    child.on("exit", (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${err}`)); });
  });
}

async function main() {
  assert(BIN, "DASHBOARD_DEMO_BIN is not set");
  mkdirSync(SHOTS, { recursive: true });
  const { child, base } = await startServer();
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  const page = await context.newPage();
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !/favicon/.test(m.text()) && !/404/.test(m.text())) {
      problems.push(`console: ${m.text()}`);
    }
  });
  const shot = (name) => page.screenshot({ path: join(SHOTS, name), fullPage: true });

  try {
    await test("home lists the demo runs, newest first, linking to run pages", async () => {
      const res = await page.goto(base + "/");
      assert(res.status() === 200, `status ${res.status()}`);
      const csp = res.headers()["content-security-policy"] || "";
      assert(csp.includes("script-src 'self'") && !csp.includes("unsafe-inline"), `CSP: ${csp}`);
      const rows = await page.$$eval("#runs tbody tr", (trs) => trs.map((tr) => ({
        name: tr.querySelector(".name").textContent,
        status: tr.querySelector(".badge").textContent,
        href: tr.querySelector("a").getAttribute("href"),
        laps: tr.querySelector(".num").textContent,
      })));
      const demos = rows.filter((r) => r.name === "convergence-demo");
      assert(demos.length === 3, `demo rows: ${JSON.stringify(rows)}`);
      assert(demos.filter((r) => r.status === "DONE").length === 2, "two DONE demo runs");
      assert(demos.filter((r) => r.status === "HALT").length === 1, "one HALT demo run");
      assert(demos.every((r) => r.href.startsWith("/runs/convergence-demo-")), "links");
      assert(rows.some((r) => r.name === "slow-build"), "slow run listed");
      await shot("home.png");
    });

    await test("a run page shows every lap, each with the agent claim 'claimed, not trusted'", async () => {
      const api = await (await page.request.get(base + "/api/runs?limit=20")).json();
      const run = api.runs.find((r) => r.name === "convergence-demo" && r.status === "DONE");
      await page.goto(base + "/");
      await page.click(`a[href="/runs/${run.run_id}"]`);
      await page.waitForSelector("#laps");
      const detail = await (await page.request.get(base + "/api/runs/" + run.run_id)).json();
      const rows = await page.$$eval("#laps tbody tr", (trs) => trs.map((tr) => tr.textContent));
      assert(rows.length === detail.laps.length && rows.length === run.laps, `rows ${rows.length} vs ${detail.laps.length}`);
      assert(rows.every((t) => t.includes("claimed, not trusted")), "claim label on every lap");
      detail.laps.forEach((l, i) => assert(rows[i].includes(l.detail) && rows[i].includes(l.decision), `lap ${i}`));
      assert((await page.textContent("#run-status")).trim() === "DONE", "status DONE");
      assert(await page.isHidden("#live"), "finished run is not live");
      await shot("run.png");
    });

    await test("a run in progress updates live until its gate passes", async () => {
      await page.goto(base + "/runs/slow-run-0001");
      const first = await page.$$eval("#laps tbody tr", (t) => t.length);
      assert(await page.isVisible("#live"), "live indicator shown while running");
      assert((await page.textContent("#run-status")).trim() === "RUNNING", "RUNNING at first");
      await page.waitForFunction((n) => document.querySelectorAll("#laps tbody tr").length > n, first, { timeout: 10000 });
      await shot("run-live.png");
      await page.waitForFunction(() => document.querySelector("#run-status").textContent.trim() === "DONE", null, { timeout: 25000 });
      const rows = await page.$$eval("#laps tbody tr", (trs) => trs.map((tr) => tr.textContent));
      assert(rows.length === 12, `12 laps, got ${rows.length}`);
      assert(rows.every((t) => t.includes("claimed, not trusted")), "claim label on live rows");
      assert(rows[11].includes("says done"), "claim rendered");
      assert(await page.isHidden("#live"), "live indicator hidden when done");
      await shot("run-live-done.png");
    });

    await test("hostile loop names and details are escaped; no script runs", async () => {
      for (const path of ["/", "/runs/evil-run-0001"]) {
        await page.goto(base + path);
        await page.waitForTimeout(300);
        const pwned = await page.evaluate(() => window.__pwned);
        assert(pwned === undefined, `window.__pwned = ${pwned} on ${path}`);
        const text = await page.textContent("main");
        assert(text.includes("<script>window.__pwned=1</script>"), `literal name shown on ${path}`);
        assert((await page.$$("main img, main script")).length === 0, `no injected elements on ${path}`);
        assert((await page.$$("script")).length === 1, `only the app script on ${path}`);
      }
      const detail = await page.textContent("#laps tbody tr td.detail");
      assert(detail.includes('<img src=x onerror="window.__pwned=1">'), "detail shown as text");
      await shot("hostile.png");
    });

    await test("Integrations > Bounded Loops: four parts, nine adapters, not installed", async () => {
      const res = await page.goto(base + "/integrations/bounded-loops");
      assert(res.status() === 200, `status ${res.status()}`);
      const ids = await page.$$eval("main section", (s) => s.map((x) => x.id));
      assert(JSON.stringify(ids) === JSON.stringify(["bridge-status", "how-it-works", "run-it", "adapters"]), `sections ${ids}`);
      const heads = await page.$$eval("main section h2", (h) => h.map((x) => x.textContent));
      assert(JSON.stringify(heads) === JSON.stringify(["Bridge status", "How it works", "Run it", "Framework adapters"]), `headings ${heads}`);
      assert((await page.textContent("#bridge-state")).trim() === "not installed", "not installed badge");
      const bridge = await page.textContent("#bridge-status");
      assert(bridge.includes("Bounded Loop observations: 0"), "observation count");
      assert(bridge.includes("eligible_for_learning = false"), "eligible_for_learning = false");
      assert(!/\blive\b/i.test(bridge.replace("never claims the bridge is live", "")), "never claims live");
      const chips = await page.$$eval("#adapters li.adapter", (l) => l.map((x) => x.textContent));
      assert(JSON.stringify(chips) === JSON.stringify(ADAPTERS), `adapters ${chips}`);
      assert((await page.textContent("#adapters li.other")).includes("any MCP-compatible agent"), "MCP chip");
      const how = await page.textContent("#how-it-works");
      for (const s of ["DONE", "HALT", "PAUSE", "KILLED", "ERROR"]) assert(how.includes(s), s);
      assert(how.includes("Any safety bound") && how.includes("Recall alone never completes a loop"), "meanings");
      const runIt = await page.textContent("#run-it");
      assert(runIt.includes("slm loop demo") && runIt.includes("slm loop show <run_id>"), "CLI");
      assert(runIt.includes('gate_contract={"job_id": "<registered job id>"}'), "MCP call");
      const api = await (await page.request.get(base + "/api/integrations/bounded-loops")).json();
      assert(api.state === "not installed" && api.installed === false && api.contract_verified_live === false, JSON.stringify(api));
      await shot("bounded-loops.png");
    });

    await test("checks page lists the registered job and its latest receipt", async () => {
      await page.goto(base + "/checks");
      const rows = await page.$$eval("#checks tbody tr", (trs) => trs.map((tr) => tr.textContent));
      assert(rows.length === 1, `rows ${rows.length}`);
      assert(rows[0].includes("operator-checker") && rows[0].includes("PASS"), rows[0]);
      await shot("checks.png");
    });

    await test("read-only: mutations are refused with 405", async () => {
      for (const path of ["/", "/api/runs", "/api/runs/slow-run-0001", "/api/checks", "/api/integrations/bounded-loops"]) {
        for (const method of ["POST", "PUT", "DELETE"]) {
          const r = await page.request.fetch(base + path, { method });
          assert(r.status() === 405, `${method} ${path}: ${r.status()}`);
        }
      }
    });

    await test("no script errors or CSP violations on any page", async () => {
      assert(problems.length === 0, problems.join("\n"));
    });
  } finally {
    await browser.close();
    child.kill("SIGTERM");
  }
}

main()
  .catch((e) => { failed++; console.log(`FAIL - setup\n       ${e && e.stack || e}`); })
  .finally(() => { console.log(`${passed} passed, ${failed} failed`); process.exit(failed ? 1 : 0); });
