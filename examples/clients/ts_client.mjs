#!/usr/bin/env node
// A TypeScript SDK client walking the gateway's re-expansion path, over stdio or HTTP.
//
//   cd examples/clients && npm install
//   node ts_client.mjs                              # starts `residency serve` over stdio
//   node ts_client.mjs http://127.0.0.1:8765/mcp    # a running `residency serve --transport http`
//
// The gateway withholds schemas it has no room for. The client finds one with search_tools,
// asks for it with reexpand_tools (the full schema comes back in the result), and is told the
// tool list changed, after which the tool is listed and callable.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const url = process.argv[2];
const transport = url
  ? new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { "Residency-Session": "ts-example" } } })
  : new StdioClientTransport({ command: "residency", args: ["serve"] });

const client = new Client({ name: "residency-example", version: "1.0.0" });
let changed;
const listChanged = new Promise((resolve) => (changed = resolve));
client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed());

await client.connect(transport);
const names = async () => (await client.listTools()).tools.map((t) => t.name);
console.log("listed:", await names());

const found = await client.callTool({ name: "search_tools", arguments: { query: "change incident severity" } });
console.log("search_tools:", found.content[0].text);

const expanded = await client.callTool({ name: "reexpand_tools", arguments: { names: ["update_incident"] } });
console.log("reexpand_tools returned the schema of:", expanded.structuredContent.tools.map((t) => t.name));

const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error("no list_changed in 5 s")), 5000));
await Promise.race([listChanged, timeout]);
console.log("tools/list_changed arrived; listed now:", await names());

const done = await client.callTool({
  name: "update_incident",
  arguments: { incident_id: "INC-7", severity: "SEV-1", assignee: { id: "u-42" }, notify: true },
});
console.log("update_incident:", done.content[0].text);
await client.close();
