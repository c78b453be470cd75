#!/usr/bin/env node
// A TypeScript SDK client that runs a scripted task against `residency serve` in ONE session.
//
// The steps come from the test (a JSON plan); this script only performs them with the real SDK
// and records what came back, so the test asserts on the wire results. It prints one JSON
// report on stdout and exits 0 when it connected and ran the plan (a step's `isError` result,
// or a step that threw, is recorded in the report for the test to judge), 1 when it could not
// connect, 2 on bad usage.
//
// Usage:
//   node scripted_task.mjs [options] --stdio COMMAND [ARG ...]
//   node scripted_task.mjs [options] --url http://127.0.0.1:PORT/mcp
// Options (before --stdio, which takes the rest of the line):
//   --sdk 1|2          @modelcontextprotocol/sdk 1.x or @modelcontextprotocol/client 2.x (default 2)
//   --era ERA          legacy (the initialize handshake), auto (probe server/discover, fall
//                      back to initialize) or modern (pin 2026-07-28); the 1.x SDK only has legacy
//   --plan JSON        the steps: a JSON array, or @FILE to read it from a file (required)
//   --timeout MS       bound on the connection and on every request (default 30000)
//   --connect-timeout MS  bound on the connection instead (default: --timeout); over stdio it
//                      includes the gateway starting, and its upstreams
//   --notify-timeout MS  bound on an await_list_changed step (default 10000)
//   --session KEY      a Residency-Session header (HTTP) naming the gateway session
//   --env K=V          extra environment for the stdio command (repeatable)
//
// Plan steps (each may carry a "label", echoed in the report):
//   {"op": "list"}                                   tools/list
//   {"op": "call", "name": N, "arguments": {...}}    tools/call
//   {"op": "read", "uri": U}                         resources/read (e.g. residency://events)
//   {"op": "listen"}                                 2026-07-28: open subscriptions/listen for
//                                                    toolsListChanged (skipped in the handshake era,
//                                                    where list_changed arrives unsolicited)
//   {"op": "await_list_changed", "since": I}         wait (bounded) for a tools list_changed that
//                                                    arrived after step I began (default: the
//                                                    previous step); "timeout": MS bounds this
//                                                    step's wait instead of --notify-timeout (a
//                                                    short one, to show that none comes)

function usage(message) {
  process.stderr.write(`scripted_task: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    sdk: "2",
    era: "legacy",
    plan: null,
    timeout: 30000,
    connectTimeout: null,
    notifyTimeout: 10000,
    session: null,
    env: {},
    url: null,
    command: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === "--sdk") opts.sdk = value();
    else if (arg === "--era") opts.era = value();
    else if (arg === "--plan") opts.plan = value();
    else if (arg === "--timeout") opts.timeout = Number(value());
    else if (arg === "--connect-timeout") opts.connectTimeout = Number(value());
    else if (arg === "--notify-timeout") opts.notifyTimeout = Number(value());
    else if (arg === "--session") opts.session = value();
    else if (arg === "--env") {
      const pair = value();
      const eq = pair.indexOf("=");
      if (eq <= 0) usage(`--env wants K=V, got ${pair}`);
      opts.env[pair.slice(0, eq)] = pair.slice(eq + 1);
    } else if (arg === "--url") opts.url = value();
    else if (arg === "--stdio") {
      opts.command = argv.slice(i + 1);
      break;
    } else usage(`unknown argument ${arg}`);
  }
  if ((opts.url === null) === (opts.command === null)) usage("give exactly one of --url or --stdio");
  if (opts.command !== null && opts.command.length === 0) usage("--stdio needs a command");
  if (!["1", "2"].includes(opts.sdk)) usage(`--sdk wants 1 or 2, got ${opts.sdk}`);
  if (!["legacy", "auto", "modern"].includes(opts.era)) usage(`--era wants legacy, auto or modern`);
  if (opts.sdk === "1" && opts.era !== "legacy") usage("the 1.x SDK only speaks the handshake era");
  if (opts.connectTimeout === null) opts.connectTimeout = opts.timeout;
  for (const [name, ms] of [
    ["--timeout", opts.timeout],
    ["--connect-timeout", opts.connectTimeout],
    ["--notify-timeout", opts.notifyTimeout],
  ]) {
    if (!Number.isFinite(ms) || ms <= 0) usage(`${name} wants a positive number`);
  }
  if (opts.plan === null) usage("--plan is required");
  return opts;
}

async function readPlan(text) {
  if (text.startsWith("@")) {
    const { readFile } = await import("node:fs/promises");
    text = await readFile(text.slice(1), "utf8");
  }
  let plan;
  try {
    plan = JSON.parse(text);
  } catch {
    usage("--plan wants a JSON array of steps");
  }
  if (!Array.isArray(plan)) usage("--plan wants a JSON array of steps");
  for (const step of plan) {
    if (!["list", "call", "read", "listen", "await_list_changed"].includes(step?.op)) {
      usage(`unknown step ${JSON.stringify(step)}`);
    }
    if (step.timeout !== undefined && !(Number.isFinite(step.timeout) && step.timeout > 0)) {
      usage(`a step's timeout wants a positive number of ms, got ${JSON.stringify(step)}`);
    }
  }
  return plan;
}

// A package's version. Their exports maps hide package.json, so read it beside the entry point.
async function packageVersion(name, entry) {
  const { createRequire } = await import("node:module");
  const { readFile } = await import("node:fs/promises");
  const { dirname, join } = await import("node:path");
  let dir = dirname(createRequire(import.meta.url).resolve(entry));
  for (let hops = 0; hops < 6; hops++, dir = dirname(dir)) {
    try {
      const meta = JSON.parse(await readFile(join(dir, "package.json"), "utf8"));
      if (meta.name === name) return meta.version;
    } catch {
      // no package.json here: go up
    }
  }
  return null;
}

// The two SDK generations behind one small surface.
async function loadSdk(sdk) {
  if (sdk === "1") {
    const name = "@modelcontextprotocol/sdk";
    const { Client } = await import(`${name}/client/index.js`);
    const stdio = await import(`${name}/client/stdio.js`);
    const { StreamableHTTPClientTransport } = await import(`${name}/client/streamableHttp.js`);
    const { ToolListChangedNotificationSchema } = await import(`${name}/types.js`);
    return {
      name,
      version: await packageVersion(name, `${name}/client/index.js`),
      Client,
      StdioClientTransport: stdio.StdioClientTransport,
      getDefaultEnvironment: stdio.getDefaultEnvironment,
      StreamableHTTPClientTransport,
      onToolsListChanged: (c, handler) => c.setNotificationHandler(ToolListChangedNotificationSchema, handler),
    };
  }
  const name = "@modelcontextprotocol/client";
  const client = await import(name);
  const stdio = await import(`${name}/stdio`);
  return {
    name,
    version: await packageVersion(name, name),
    Client: client.Client,
    StdioClientTransport: stdio.StdioClientTransport,
    getDefaultEnvironment: stdio.getDefaultEnvironment,
    StreamableHTTPClientTransport: client.StreamableHTTPClientTransport,
    // 2.x registers handlers by method name; on 2026-07-28 they also receive listen-stream events.
    onToolsListChanged: (c, handler) => c.setNotificationHandler("notifications/tools/list_changed", handler),
  };
}

function makeTransport(sdk, opts) {
  if (opts.url !== null) {
    const headers = opts.session ? { "Residency-Session": opts.session } : {};
    return new sdk.StreamableHTTPClientTransport(new URL(opts.url), { requestInit: { headers } });
  }
  const [command, ...args] = opts.command;
  return new sdk.StdioClientTransport({
    command,
    args,
    env: { ...sdk.getDefaultEnvironment(), ...process.env, ...opts.env },
    stderr: "pipe",
  });
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function textOf(result) {
  return (result.content ?? [])
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n");
}

function thrown(err) {
  return { name: err?.name ?? null, code: err?.code ?? null, message: String(err?.message ?? err) };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const plan = await readPlan(opts.plan);
  const sdk = await loadSdk(opts.sdk);
  const report = {
    ok: false,
    sdk: { name: sdk.name, version: sdk.version },
    era_requested: opts.era,
    transport: opts.url !== null ? "http" : "stdio",
    protocol_version: null,
    protocol_era: null,
    advertised_list_changed: null,
    steps: [],
    notifications: [],
    elapsed_ms: null,
    error: null,
  };
  const started = Date.now();

  let negotiation;
  if (opts.era === "auto") negotiation = { mode: "auto" };
  else if (opts.era === "modern") negotiation = { mode: { pin: "2026-07-28" } };
  const clientOptions = negotiation ? { versionNegotiation: negotiation } : {};
  const client = new sdk.Client({ name: "residency-scripted-task", version: "1.0.0" }, clientOptions);

  // Every tools list_changed, tagged with the step that was running when it arrived.
  let current = -1;
  const arrivals = [];
  const waiters = new Set();
  sdk.onToolsListChanged(client, (notification) => {
    arrivals.push(current);
    // On 2026-07-28 the event names the subscriptions/listen stream it came on, in _meta.
    const meta = notification?.params?._meta ?? null;
    report.notifications.push({ method: "notifications/tools/list_changed", step: current, meta });
    for (const wake of waiters) wake();
  });

  const transport = makeTransport(sdk, opts);
  // The 1.x SDK keeps the negotiated version to itself; it hands it to the transport.
  const setProtocolVersion = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (version) => {
    report.protocol_version = version;
    setProtocolVersion?.(version);
  };
  const stderrChunks = [];
  if (transport.stderr) transport.stderr.on("data", (chunk) => stderrChunks.push(String(chunk)));
  const subscriptions = [];
  try {
    await withTimeout(
      client.connect(transport, { timeout: opts.connectTimeout }),
      opts.connectTimeout,
      "the connection",
    );
    if (typeof client.getNegotiatedProtocolVersion === "function") {
      report.protocol_version = client.getNegotiatedProtocolVersion() ?? report.protocol_version;
    }
    report.protocol_era =
      typeof client.getProtocolEra === "function"
        ? client.getProtocolEra() ?? null
        : report.protocol_version === null
          ? null
          : "legacy";
    report.advertised_list_changed = client.getServerCapabilities()?.tools?.listChanged === true;

    const requestOptions = { timeout: opts.timeout };
    for (const [index, step] of plan.entries()) {
      current = index;
      const entry = { index, op: step.op, label: step.label ?? null };
      report.steps.push(entry);
      const begun = Date.now();
      try {
        if (step.op === "list") {
          const listed = await withTimeout(client.listTools(undefined, requestOptions), opts.timeout, "tools/list");
          entry.names = listed.tools.map((t) => t.name);
          entry.tools = listed.tools;
          entry.ttlMs = listed.ttlMs ?? null;
          entry.cacheScope = listed.cacheScope ?? null;
        } else if (step.op === "call") {
          entry.name = step.name;
          const params = { name: step.name, arguments: step.arguments ?? {} };
          // 1.x: callTool(params, resultSchema, options); 2.x: callTool(params, options).
          const call =
            opts.sdk === "1" ? client.callTool(params, undefined, requestOptions) : client.callTool(params, requestOptions);
          const result = await withTimeout(call, opts.timeout, `tools/call ${step.name}`);
          entry.isError = result.isError === true;
          entry.text = textOf(result);
          entry.structuredContent = result.structuredContent ?? null;
          entry.meta = result._meta ?? null;
        } else if (step.op === "read") {
          entry.uri = step.uri;
          const read = await withTimeout(
            client.readResource({ uri: step.uri }, requestOptions),
            opts.timeout,
            `resources/read ${step.uri}`,
          );
          entry.contents = read.contents;
        } else if (step.op === "listen") {
          if (report.protocol_era !== "modern") {
            entry.skipped = "handshake era: list_changed arrives unsolicited";
          } else {
            const subscription = await withTimeout(
              client.listen({ toolsListChanged: true }, requestOptions),
              opts.timeout,
              "subscriptions/listen acknowledgement",
            );
            subscriptions.push(subscription);
            entry.honoredFilter = subscription.honoredFilter;
          }
        } else if (step.op === "await_list_changed") {
          const since = step.since ?? index - 1;
          const bound = step.timeout ?? opts.notifyTimeout;
          entry.since = since;
          const seen = () => arrivals.some((at) => at >= since);
          if (!seen()) {
            let wake;
            const arrived = new Promise((resolve) => {
              wake = resolve;
              waiters.add(wake);
            });
            try {
              await withTimeout(arrived, bound, "tools list_changed");
            } catch {
              // Not arriving is a result the test asserts on, not a failure of the run.
            } finally {
              waiters.delete(wake);
            }
          }
          entry.arrived = seen();
        }
      } catch (err) {
        entry.thrown = thrown(err);
      }
      entry.elapsed_ms = Date.now() - begun;
      entry.list_changed_count = arrivals.length;
    }
    report.ok = true;
  } catch (err) {
    report.error = String(err?.message ?? err);
  } finally {
    current = -2;
    report.elapsed_ms = Date.now() - started;
    if (stderrChunks.length) report.server_stderr_tail = stderrChunks.join("").slice(-20000);
    try {
      for (const subscription of subscriptions) await withTimeout(subscription.close(), 5000, "listen close");
      await withTimeout(client.close(), 5000, "close");
    } catch {
      // The report is already decided; a slow close must not hide it.
    }
  }
  process.stdout.write(JSON.stringify(report) + "\n");
  process.exit(report.ok ? 0 : 1);
}

main();
