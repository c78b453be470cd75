#!/usr/bin/env bash
# The MCP Inspector CLI against `residency serve`, over stdio and over streamable HTTP.
#
#   cd examples/clients && npm install && ./inspector.sh
#
# Each Inspector run is one MCP session. Over stdio the Inspector starts its own gateway; the
# server command goes in a config file because options such as --config on the Inspector's
# command line are read as the Inspector's own.
set -euo pipefail
cd "$(dirname "$0")"
inspector=(./node_modules/.bin/mcp-inspector --cli)
export HOME="${INSPECTOR_HOME:-$(mktemp -d)}"  # the Inspector keeps a catalog in ~/.mcp-inspector
export MCP_INSPECTOR_SECRET_STORE=memory

catalog="$(mktemp)"
trap 'rm -f "$catalog"; [ -n "${gateway:-}" ] && kill "$gateway" 2>/dev/null || true' EXIT
cat >"$catalog" <<JSON
{"mcpServers": {"residency": {"command": "residency", "args": ["serve"]}}}
JSON

echo "== stdio: the tools a new session sees (the pinned working set plus the meta-tools)"
"${inspector[@]}" --config "$catalog" --server residency --method tools/list --format json -q |
  python3 -c 'import json,sys; print([t["name"] for t in json.load(sys.stdin)["result"]["tools"]])'

echo "== stdio: find a withheld tool, then bring its full schema back"
"${inspector[@]}" --config "$catalog" --server residency --method tools/call \
  --tool-name search_tools --tool-arg query="change incident severity" --format json -q
"${inspector[@]}" --config "$catalog" --server residency --method tools/call \
  --tool-name reexpand_tools --tool-args-json '{"names": ["update_incident"]}' --format json -q

echo "== HTTP: one gateway, sessions named by the Residency-Session header"
port="${PORT:-8765}"
residency serve --transport http --port "$port" &
gateway=$!
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
"${inspector[@]}" "http://127.0.0.1:$port/mcp" --header "Residency-Session: demo" \
  --method tools/call --tool-name get_incident --tool-arg incident_id=INC-7 --format json -q
"${inspector[@]}" "http://127.0.0.1:$port/mcp" --header "Residency-Session: demo" \
  --method resources/read --uri residency://tools --format json -q
