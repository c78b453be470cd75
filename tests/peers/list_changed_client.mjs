#!/usr/bin/env node
// A TypeScript SDK (1.x) client that checks the gateway's list_changed promise on the wire.
//
// It connects to `residency serve` (a stdio command it launches, or a streamable HTTP URL),
// lists the tools, calls `reexpand_tools` for one withheld tool and waits, bounded, for
// `notifications/tools/list_changed`. It prints one JSON verdict on stdout and exits 0 only
// when every check held.
//
// Usage:
//   node list_changed_client.mjs [options] --stdio COMMAND [ARG ...]
//   node list_changed_client.mjs [options] --url http://127.0.0.1:PORT/mcp
// Options (before --stdio, which takes the rest of the line):
//   --tool NAME        the withheld tool to re-expand (required)
//   --timeout MS       how long to wait for list_changed, and for each request (default 10000)
//   --connect-timeout MS  how long to wait for the connection (default: --timeout); over stdio
//                      it includes the gateway starting, and its upstreams
//   --session KEY      a Residency-Session header (HTTP) naming the gateway session
//   --env K=V          extra environment for the stdio command (repeatable)
//   --refuse-args JSON first call the tool with these arguments and expect a refusal (an
//                      isError result, e.g. its tombstone), before re-expanding it

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

function usage(message) {
  process.stderr.write(`list_changed_client: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    tool: null,
    timeout: 10000,
    connectTimeout: null,
    session: null,
    env: {},
    url: null,
    command: null,
    refuseArgs: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === "--tool") opts.tool = value();
    else if (arg === "--timeout") opts.timeout = Number(value());
    else if (arg === "--connect-timeout") opts.connectTimeout = Number(value());
    else if (arg === "--session") opts.session = value();
    else if (arg === "--refuse-args") {
      const text = value();
      try {
        opts.refuseArgs = JSON.parse(text);
      } catch {
        usage(`--refuse-args wants a JSON object, got ${text}`);
      }
    }
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
  if (!opts.tool) usage("--tool is required");
  if (!Number.isFinite(opts.timeout) || opts.timeout <= 0) usage("--timeout wants a positive number");
  if (opts.connectTimeout === null) opts.connectTimeout = opts.timeout;
  if (!Number.isFinite(opts.connectTimeout) || opts.connectTimeout <= 0) {
    usage("--connect-timeout wants a positive number");
  }
  return opts;
}

function makeTransport(opts) {
  if (opts.url !== null) {
    const headers = opts.session ? { "Residency-Session": opts.session } : {};
    return new StreamableHTTPClientTransport(new URL(opts.url), { requestInit: { headers } });
  }
  const [command, ...args] = opts.command;
  return new StdioClientTransport({
    command,
    args,
    env: { ...getDefaultEnvironment(), ...process.env, ...opts.env },
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

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const verdict = {
    ok: false,
    transport: opts.url !== null ? "http" : "stdio",
    tool: opts.tool,
    advertised_list_changed: null,
    listed_before: null,
    refused: null,
    refused_text: null,
    reexpand_is_error: null,
    schema_in_result: null,
    list_changed: false,
    list_changed_count: 0,
    listed_after: null,
    elapsed_ms: null,
    error: null,
  };
  const started = Date.now();
  const client = new Client({ name: "residency-list-changed-check", version: "1.0.0" });
  let notified;
  const arrived = new Promise((resolve) => {
    notified = resolve;
  });
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    verdict.list_changed_count += 1;
    notified();
  });
  const transport = makeTransport(opts);
  const stderrChunks = [];
  if (transport.stderr) transport.stderr.on("data", (chunk) => stderrChunks.push(String(chunk)));
  try {
    await withTimeout(
      client.connect(transport, { timeout: opts.connectTimeout }),
      opts.connectTimeout,
      "the connection",
    );
    verdict.advertised_list_changed = client.getServerCapabilities()?.tools?.listChanged === true;

    const before = await withTimeout(client.listTools(), opts.timeout, "tools/list");
    const namesBefore = before.tools.map((t) => t.name);
    verdict.listed_before = namesBefore.includes(opts.tool);
    if (!namesBefore.includes("reexpand_tools")) throw new Error("reexpand_tools is not listed");

    if (opts.refuseArgs !== null) {
      // A withheld or tombstoned tool called by name anyway: the gateway must refuse it.
      const refused = await withTimeout(
        client.callTool({ name: opts.tool, arguments: opts.refuseArgs }),
        opts.timeout,
        "the refused call",
      );
      verdict.refused = refused.isError === true;
      verdict.refused_text = textOf(refused);
    }

    // Anything that arrived before the re-expansion does not count.
    const countBefore = verdict.list_changed_count;
    const result = await withTimeout(
      client.callTool({ name: "reexpand_tools", arguments: { names: [opts.tool] } }),
      opts.timeout,
      "the reexpand_tools result",
    );
    verdict.reexpand_is_error = result.isError === true;
    const payload = JSON.stringify(result.structuredContent ?? null) + textOf(result);
    verdict.schema_in_result = payload.includes(opts.tool) && payload.includes("inputSchema");

    if (verdict.list_changed_count === countBefore) {
      await withTimeout(arrived, opts.timeout, "notifications/tools/list_changed");
    }
    verdict.list_changed = verdict.list_changed_count > countBefore;

    const after = await withTimeout(client.listTools(), opts.timeout, "tools/list after re-expansion");
    verdict.listed_after = after.tools.some((t) => t.name === opts.tool);

    verdict.ok =
      (opts.refuseArgs === null || verdict.refused) &&
      verdict.advertised_list_changed &&
      !verdict.listed_before &&
      !verdict.reexpand_is_error &&
      verdict.schema_in_result &&
      verdict.list_changed &&
      verdict.listed_after;
  } catch (err) {
    verdict.error = String(err?.message ?? err);
  } finally {
    verdict.elapsed_ms = Date.now() - started;
    if (!verdict.ok && stderrChunks.length) verdict.server_stderr_tail = stderrChunks.join("").slice(-2000);
    try {
      await withTimeout(client.close(), 5000, "close");
    } catch {
      // The verdict is already decided; a slow close must not hide it.
    }
  }
  process.stdout.write(JSON.stringify(verdict) + "\n");
  process.exit(verdict.ok ? 0 : 1);
}

main();
