"""What each key of a gateway config file means, in the user's words.

Names, types, defaults and bounds come from the config models (``docs_gen.reference``); only the
meaning is written here. The reference page fails to build when the models hold a key with no
meaning here, or when a meaning names a key the models do not hold.
"""

from __future__ import annotations

__all__ = ("MEANINGS",)

MEANINGS: dict[str, dict[str, str]] = {
    "top": {
        "mcpServers": "the upstream servers, by name. The name, reduced to letters, digits, `_` and "
        "`-`, prefixes a tool's name when two upstreams offer the same name (`name__tool`); no two "
        "names may reduce alike",
        "residency": "the gateway's policy for every downstream session (the table below)",
    },
    "stdio": {
        "type": "the transport; it must agree with `command`",
        "command": "the program to run. Hosts start the gateway with a short `PATH`: prefer an absolute path",
        "args": "its arguments",
        "env": "environment variables for the subprocess, on top of the few it inherits from the "
        "gateway (`HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM`, `USER`); anything else it needs, such "
        "as an API key, goes here. Secret: never shown",
        "cwd": "the subprocess's working directory (`null`: the gateway's)",
        "disabled": "keep the entry but do not start it",
        "timeout": "seconds one call to this upstream may take; wins over `call_timeout` and "
        "`--timeout` (`null`: `residency.call_timeout`)",
    },
    "http": {
        "type": 'the transport; it must agree with `url` (`"sse"` is not supported)',
        "url": "the upstream's streamable HTTP endpoint (`http://` or `https://`)",
        "headers": "HTTP headers sent with every request (e.g. `Authorization`). Secret: never shown",
        "era": "the protocol era spoken to the upstream. `auto`: the 2026-07-28 era (no handshake, "
        "JSON bodies) when it answers `server/discover` and its first `tools/list` page has at most "
        "100 tools and no cursor, else the handshake era; `modern`: 2026-07-28 whenever offered; "
        "`legacy`: always the handshake era. With per-caller `credentials` (`token_exchange`, "
        "`passthrough`): always 2026-07-28, and `legacy` is refused",
        "max_message_bytes": "the largest server-sent event accepted from the upstream (one "
        "`tools/list` page is one event); a bigger one fails its start with an error naming this key",
        "credentials": "how the gateway authenticates to the upstream with OAuth, one `mode` "
        "([Upstream credentials](../how-to/upstream-credentials.md)); `null`: `headers` only",
        "credentials.mode": "`client_credentials`: the gateway's own token (client-credentials grant); "
        "`token_exchange`: each call carries a token exchanged for its caller's (RFC 8693; OAuth "
        "front only); `passthrough`: each call carries the caller's own token (discouraged)",
        "credentials.issuer": "the authorization server whose metadata names the token endpoint",
        "credentials.token_endpoint": "the token endpoint itself (wins over the issuer's metadata)",
        "credentials.client_id": "the gateway's client at the authorization server",
        "credentials.client_secret": "its secret; `${NAME}` reads the environment variable `NAME`. "
        "Secret: never shown",
        "credentials.auth_method": "how the client authenticates at the token endpoint: HTTP Basic, "
        "or the secret in the form",
        "credentials.scopes": "scopes asked for (none: the authorization server's default)",
        "credentials.audience": "the `audience` parameter of the token request",
        "credentials.resource": "the `resource` parameter (RFC 8707); with neither it nor `audience`, "
        "the upstream's `url`",
        "credentials.refresh_margin": "seconds before a token expires at which it is renewed (at most "
        "half its lifetime)",
        "credentials.timeout": "seconds a token request may take",
        "credentials.cache_size": "`token_exchange`: exchanged tokens kept, one per caller token, "
        "each until it expires",
        "disabled": "keep the entry but do not start it",
        "timeout": "seconds one call to this upstream may take; wins over `call_timeout` and "
        "`--timeout` (`null`: `residency.call_timeout`)",
    },
    "residency": {
        "budget.schema_tokens": "the most tokens of tool schemas a session shows per turn (minified, "
        "counted as the model is sent them)",
        "budget.argument_tokens": "the argument budget, used only for a host that reports which "
        'earlier call arguments it dropped (`_meta["residency/evicted_calls"]`); otherwise '
        "arguments are assumed to stay in the transcript",
        "budget.idle_turns": "a tool unused for more than this many turns leaves even when the budget "
        "has room; `null` demotes tools only under budget pressure",
        "budget.planner": "`stable` adds what the agent needs (a re-expanded tool; a phase's tools, "
        "together, when it is entered) and removes tools only when the listed ones pass `high_water` "
        "times the budget, then in one step down to `low_water` times it, so the host's prompt cache "
        "survives; `greedy` keeps the list to the budget on every call (the list changes often)",
        "budget.high_water": "stable planner: nothing leaves the list (or the argument budget) until it "
        "exceeds the budget times this",
        "budget.low_water": "stable planner: a cut goes down to the budget times this",
        "pinned": "tools that always stay resident, whatever the budget",
        "phases": "phase name → tools favoured while the phase is active "
        "([Tuning the budget](../how-to/budget.md#phases))",
        "minify": "how resident tools are shown: `full-text` keeps every description, `compact` keeps "
        "informative prose, `minimal` drops descriptions inside schemas, `none` shows tools as the "
        "upstream sent them. Every level keeps every validation constraint",
        "store": "where sessions live: `memory://`, `sqlite:///relative.db`, `sqlite:////absolute.db` "
        "or `postgresql://...`. With SQLite or PostgreSQL a session survives a restart. A relative "
        "path is resolved in the directory the host starts the gateway in: use an absolute one. "
        "`--store` overrides it",
        "chains": "what a call that would complete an archived fatal tool chain gets: refused, or "
        "forwarded and logged",
        "delivery": "how a withheld tool reaches the model: `reference`, the list stays fixed and "
        "schemas arrive in `search_tools`/`reexpand_tools` results; `list`, it joins the session's "
        "tool list; `auto`, `call_tool` listed from the start, by reference once the client cannot "
        "see a changed list ([Delivery](../explanation/cache-economics.md))",
        "call_timeout": "seconds an upstream call may take before the agent is told it timed out; "
        "`--timeout` overrides it",
        "startup_timeout": "seconds one upstream may take to start and list its tools",
        "ready_wait": "seconds the gateway waits for starting upstreams before it serves; one that is "
        "ready later joins, and clients are told the list changed",
        "search_wait": "seconds, at most, the gateway then waits for its catalog's search vectors, "
        "within what is left of `ready_wait`; BM25 answers searches until they are ready",
        "relist_interval": "a call re-lists its upstream before it is forwarded when the last listing "
        "is older than this many seconds; a change made without `tools/list_changed` is noticed within "
        "it (0: every call)",
        "token": "the bearer token the HTTP transport requires; `--token` and then `RESIDENCY_TOKEN` "
        "override it. Prefer the environment variable to a token in a file. Set `token` or `auth`, "
        "not both",
        "allowed_hosts": "names clients may reach the HTTP gateway by besides the bound address (the "
        "`Host` check answers others 421); bound to `0.0.0.0` or `::`, loopback and the machine's own "
        "names and addresses are allowed already. `--allowed-host NAME` adds more",
        "http": "limits of the HTTP transport (the `http.` keys below). Each per-client cap must not "
        "exceed its total; behind a load balancer raise the `_per_client` caps to the totals",
        "http.header_timeout": "seconds a connection may take to send a request's complete headers, "
        "after it opened or after the first byte of a later request, before it is closed",
        "http.idle_timeout": "seconds a connection may stay without a request after a response",
        "http.body_timeout": "seconds a request's body may take to arrive after its headers; later "
        "is answered 408",
        "http.max_body_bytes": "the largest request body; a larger one is answered 413 without being "
        "read further, chunked or not. At most `http.body_budget_per_client_bytes`",
        "http.body_budget_bytes": "bytes of request bodies being received at once, over all clients; "
        "a body that would pass it is answered 503 with `Retry-After: 1`",
        "http.body_budget_per_client_bytes": "the same for one client address",
        "http.max_connections": "open connections over all clients; a new one past it is closed at "
        "once. Kept under what the file-descriptor limit allows",
        "http.max_connections_per_client": "open connections from one client address",
        "http.max_requests": "requests in flight over all clients (an open SSE stream is one); a new "
        "one past it is answered 503 with `Retry-After: 1`",
        "http.max_requests_per_client": "requests in flight from one client address",
        "auth": "the HTTP front as an OAuth 2.1 resource server: every request carries an access "
        "token the authorization server (`issuer`) issued for this gateway (`resource`), checked in "
        "the place of the static `token` (set one or the other, not both). OAuth counts as "
        "authentication for binding beyond loopback. `null`: off",
        "auth.issuer": "the authorization server, exactly as its tokens' `iss` and its metadata name "
        "it (`https://`, or `http://` on this machine)",
        "auth.resource": "this gateway's resource URI, as clients reach its MCP endpoint (e.g. "
        "`https://mcp.example.com/mcp`); a token's `aud` must hold it. `audience` is read as the "
        "same key",
        "auth.jwks_uri": "where the issuer publishes its signing keys; `null`: from the issuer's "
        "metadata (`/.well-known/oauth-authorization-server`, else `/.well-known/openid-configuration`)",
        "auth.scopes": "scopes every token must carry (a token without one is answered 403 "
        "`insufficient_scope`)",
        "auth.algorithms": "the signature algorithms accepted: public-key ones only (no `none`, no `HS256`)",
        "auth.leeway": "seconds of clock difference allowed on `exp`, `nbf` and `iat`",
        "auth.jwks_cooldown": "seconds between two fetches of the keys caused by a token whose key "
        "id is unknown: a rotated key is picked up at once, a flood of made-up key ids costs the "
        "issuer one request per cooldown",
        "auth.jwks_max_age": "seconds after which the keys are fetched again anyway, so a key the "
        "issuer withdrew stops being accepted",
        "auth.timeout": "seconds a request to the issuer (metadata, keys) may take",
        "auth.resource_name": "a human-readable name in the protected-resource metadata "
        "(`/.well-known/oauth-protected-resource`)",
        "auth.introspection": "ask the issuer about opaque (non-JWT) tokens (RFC 7662); `null`: "
        "they are refused",
        "auth.introspection.endpoint": "the issuer's introspection endpoint",
        "auth.introspection.client_id": "the gateway's own client at the issuer",
        "auth.introspection.client_secret": "its secret, sent with HTTP Basic authentication. "
        "`${NAME}` is not expanded here: keep the config file out of reach. Secret: never shown",
        "auth.introspection.cache_seconds": "how long an active answer is reused (never past the "
        "token's `exp`)",
        "auth.introspection.timeout": "seconds the introspection request may take",
        "auth.groups_claim": "the token claim that holds the caller's groups, for `policy`: a list of "
        "strings or a space-separated string; a dotted name reads a nested object "
        "(`realm_access.roles`)",
        "read_only": "tools to list as read-only (`readOnlyHint: true`, `destructiveHint: false`) "
        "whatever their upstream says",
        "mutating": "tools to list as mutations (`readOnlyHint: false`); tools with no annotations "
        "already count as mutations. A tool cannot be in both lists",
        "spans": "large upstream results: offloaded to the store, shown as a preview and a link "
        "([Spans](../how-to/spans.md))",
        "spans.offload_tokens": "a successful text result over this many tokens is written to the "
        "store first; the client gets a preview, its size and a `residency://spans/{id}` link. "
        "`null`: off",
        "spans.preview_chars": "how many characters of an offloaded result the client is shown",
        "spans.tags": 'tool → tags for its results, e.g. `"describe_table": ["constraint"]` (a '
        "precondition span: kept by pointer, never dropped); a tool with a rule has every successful "
        "text result recorded as a span",
        "revoke_command": "the revocation hook: a program and its arguments, run once per credential "
        "reference of a chain archived through the gateway, the reference in place of each `{ref}` "
        "(appended when no argument holds one); no shell; exit status 0 means revoked",
        "revoke_timeout": "seconds the revocation hook may take; longer counts as a failed revocation",
        "max_subscriptions": "resource subscriptions one client connection may hold, and resource URIs "
        "one `subscriptions/listen` filter may name; past it a subscription is refused "
        "(`subscription_limit`)",
        "rate_limit": "per-identity rate limits (the `rate_limit.` keys below): each OAuth principal, "
        "each static token, and every unauthenticated caller together (stdio included) has buckets "
        "of its own. A request past a limit gets the JSON-RPC error `-32029` (`rate_limited`) with "
        "`retry_after` seconds in its data; others are served. `null`: no limits",
        "rate_limit.requests_per_minute": "MCP requests one identity may make per minute, sustained "
        "(`initialize`, `ping` and `server/discover` are free)",
        "rate_limit.burst": "requests one identity may make at once before the rate applies "
        "(`null`: a tenth of a minute's worth, at least 1)",
        "rate_limit.calls_per_minute": "upstream calls (`tools/call` of an upstream tool, or "
        "`call_tool`) one identity may make per minute, on top of the request limit; lists, "
        "searches and re-expansions are not calls. `null`: calls count as requests only",
        "rate_limit.calls_burst": "upstream calls at once (`null`: a tenth of a minute's worth, at "
        "least 1); needs `calls_per_minute`",
        "rate_limit.max_identities": "identities whose buckets are held at once; a full (idle) bucket "
        "is dropped anyway, and past this the least recently used is",
        "audit": "the audit log: one JSON line per decision (`listed`, `searched`, `forwarded`, "
        "`refused`, `limited`, ...) with time, subject, session, tool, outcome and error "
        "code, never argument values. `null`: off, at no cost",
        "audit.path": "the file lines are appended to (created if missing; `-`: stderr). A file that "
        "cannot be opened fails the start",
        "audit.arguments": "`none`: nothing of a call's arguments; `names`: their names, sorted "
        "(values are never written)",
        "telemetry": "OpenTelemetry traces and metrics sent over OTLP (needs the `otel` extra; see "
        "the telemetry how-to). Present: on, keys left out read the standard `OTEL_*` variables; "
        "`null`: off, and no OpenTelemetry SDK code is loaded",
        "telemetry.otlp": "where the exporters send",
        "telemetry.otlp.endpoint": "the collector's base URL (`/v1/traces` and `/v1/metrics` are "
        "appended for `http/protobuf`); `null`: `OTEL_EXPORTER_OTLP_ENDPOINT`, else "
        "`http://localhost:4318` (gRPC: `4317`)",
        "telemetry.otlp.protocol": "`http/protobuf` (no gRPC needed) or `grpc` (the `otel-grpc` extra)",
        "telemetry.otlp.headers": "headers sent with every export (an API key); `${NAME}` reads an "
        "environment variable. Secret: never shown. Empty: `OTEL_EXPORTER_OTLP_HEADERS`",
        "telemetry.otlp.timeout": "seconds one export may take",
        "telemetry.service_name": "the `service.name` of everything sent; `null`: `OTEL_SERVICE_NAME`, "
        "else `residency`",
        "telemetry.traces": "send spans: one per MCP request, admission decision and upstream call",
        "telemetry.metrics": "send the `/metrics` counters, gauges and histogram as OTLP metrics",
        "telemetry.metric_interval": "seconds between two metric exports (one more is sent when the "
        "gateway stops)",
        "policy": "which tools each caller may see and call, by its access token's subject, groups "
        "and scopes (see the team deployment guide for the rule order). A denied tool is absent for "
        "that caller from every list, search, resource and error. `null`: every tool for everyone",
        "policy.rules": "the rules, in any order: each applies to the callers its `subjects`, `groups` "
        "and `scopes` name (a rule naming none applies to every caller, those without an OAuth "
        "identity too) and allows and denies tools; a deny wins, and a tool no applying rule allows "
        "is denied",
        "policy.rules.subjects": "token subjects (`sub`) the rule is for",
        "policy.rules.groups": "groups the rule is for (the token's `auth.groups_claim`)",
        "policy.rules.scopes": "scopes the rule is for (the token's `scope`)",
        "policy.rules.allow": "tool patterns `server/tool` the rule allows: shell-style globs, e.g. "
        "`github/*` or `*/get_*`, on the configured server name and the tool's name at that server; "
        "`*` alone is every tool",
        "policy.rules.deny": "tool patterns the rule denies; a deny of any applying rule wins over "
        "every allow",
    },
}
