"""The gateway's configuration file: the standard ``mcpServers`` shape plus a ``residency`` section.

The ``mcpServers`` part is the file Claude Desktop, Cursor and VS Code read: stdio entries have
``command``/``args``/``env``, HTTP entries have ``url``/``headers``. Keys other clients add
(``autoApprove``, ``alwaysAllow``, ...) are accepted and ignored there. The ``residency`` section
is ours and strict: an unknown or mistyped key is an error that names the file, the key, the line
and what is expected (with the key it was likely meant to be). Every problem of a file is
reported at once, in one ``ConfigError``.

Values in ``env`` and ``headers`` are secrets: they are held as ``SecretStr`` (so no ``repr`` or
log line shows them) and ``Secrets.redact`` scrubs them from any text the gateway sends out.
So is an HTTP entry's ``credentials.client_secret`` (``_credentials_config``). ``${NAME}`` in
those values is replaced by the gateway's own environment variable ``NAME``;
``${env:NAME}`` (how Cursor and VS Code write it) is the same, so entries copied from their
files keep working. VS Code's ``${input:ID}`` has no prompt here and is an error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from residency._core._minify import DEFAULT_LEVEL, MINIFY_ALIASES, MINIFY_LEVELS
from residency._core._planner import HIGH_WATER, LOW_WATER, Budget, Planner
from residency._errors import ConfigError
from residency._gateway._aggregate import check_server_names
from residency._gateway._audit import AuditSettings
from residency._gateway._config_problems import Problems, line_of, near, validate
from residency._gateway._credentials_config import CredentialsSettings
from residency._gateway._http_limits import HTTPSettings
from residency._gateway._oauth_config import OAuthSettings
from residency._gateway._otel_config import TelemetrySettings
from residency._gateway._policy_config import PolicySettings
from residency._gateway._rate_limit import RateLimitSettings
from residency._gateway._revoke import REF_PLACEHOLDER, command_revoker

__all__ = [
    "RESPONSES_ENV",
    "MINIFY_ALIASES",
    "MINIFY_LEVELS",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_READY_WAIT",
    "DEFAULT_STARTUP_TIMEOUT",
    "GatewayConfig",
    "HTTPServer",
    "ResidencySettings",
    "Secrets",
    "StdioServer",
    "command_revoker",
    "line_of",
    "load_config",
    "parse_config",
]

DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds an upstream call may take before the agent is told it timed out."""

DEFAULT_STARTUP_TIMEOUT = 30.0
"""Seconds one upstream may take to start and list its tools."""

DEFAULT_READY_WAIT = 5.0
"""Seconds the gateway waits for starting upstreams before it serves."""

VSCODE_HINT = 'this looks like a VS Code config: put the servers under "mcpServers"'
INPUTS_HINT = (
    'VS Code "inputs" are not read here: write ${NAME} in an "env" or "headers" value to use '
    "the environment variable NAME"
)

_ENV_REF = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_INPUT_REF = re.compile(r"\$\{input:[^}]*\}")


RESPONSES_ENV = "RESIDENCY_HTTP_RESPONSES"
"""How the HTTP front answers: ``json``, one JSON body per request; ``sse`` (the default), an
SSE stream (see ``residency._gateway._http``)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetSettings(_Strict):
    """Token budgets (``residency.budget``)."""

    schema_tokens: int = Field(default=6000, ge=0)
    argument_tokens: int = Field(default=20000, ge=0)
    idle_turns: int | None = Field(default=None, ge=0)
    """A tool not used for more than this many turns leaves even when the budget has room;
    None (the default) demotes tools only under budget pressure."""
    planner: Planner = "stable"
    """``stable`` (the default) changes a session's tool list only to add what the agent needs
    (a re-expansion, a phase entered) or, past ``high_water`` times the budget, to cut it in one
    step to ``low_water`` times the budget; ``greedy`` keeps it to the budget on every call."""
    high_water: float = Field(default=HIGH_WATER, ge=1.0)
    low_water: float = Field(default=LOW_WATER, ge=0.0, le=1.0)

    def budget(self) -> Budget:
        return Budget(
            schema_tokens=self.schema_tokens,
            argument_tokens=self.argument_tokens,
            idle_turns=self.idle_turns,
            planner=self.planner,
            high_water=self.high_water,
            low_water=self.low_water,
        )


class SpanSettings(_Strict):
    """Large upstream results (``residency.spans``).

    Attributes:
        offload_tokens: a successful text result over this many tokens is written to the
            content store first; the client gets a preview, its size and a
            ``residency://spans/{id}`` link, and reads the whole by range. None: off.
        preview_chars: how much of an offloaded result the client sees at once.
        tags: tool name -> span tags for its results (e.g. ``describe_table`` ->
            ``["constraint"]``: a precondition span, kept by pointer and never dropped). A
            tool with a rule has every successful text result recorded as a span, however
            small (offloaded or not).
    """

    offload_tokens: int | None = Field(default=None, ge=1)
    preview_chars: int = Field(default=1000, ge=0, le=100_000)
    tags: dict[str, tuple[str, ...]] = {}

    @property
    def recorded(self) -> bool:
        """Whether some results become spans (offloading on, or a tag rule): ``read_span`` is
        listed then."""
        return self.offload_tokens is not None or bool(self.tags)


class ResidencySettings(_Strict):
    """The ``residency`` section: policy for every downstream session.

    Attributes:
        budget: schema and argument token budgets per turn.
        pinned: tool names (as the gateway lists them) that always stay resident.
        phases: phase name -> tool names favoured while that phase is active.
        minify: how resident tools are shown: one of the core's levels (``minify_tool``'s
            ``LEVELS``: ``full-text``, every description kept; ``compact``, the default, as for
            ``minify_tool`` and ``Session``; ``minimal``; each keeps every validation
            constraint), or ``none`` (as the upstream sent them).
            ``lossless``, an older spelling of ``full-text``, is still read as ``full-text``.
        store: where sessions live (``memory://``, ``sqlite:///path.db`` or ``postgresql://...``).
        chains: what a call that would complete an archived fatal chain gets: refused, or
            forwarded with a warning.
        delivery: how a withheld tool reaches the model (see ``_delivery``): ``list`` (it joins
            the session's tool list: a list change), ``reference`` (the list stays fixed, the
            pinned tools and the meta-tools with ``call_tool``; schemas arrive in
            ``search_tools`` and ``reexpand_tools`` results and the model calls through
            ``call_tool``), or ``auto`` (``call_tool`` listed from the first list; by list while
            the client can see a changed list, by reference for good once it cannot).
        call_timeout: seconds an upstream call may take.
        startup_timeout: seconds one upstream may take to start and list its tools.
        ready_wait: seconds the gateway waits for starting upstreams before it serves; an
            upstream that is ready later joins, and clients are told the list changed.
        search_wait: seconds, at most, the gateway then waits for its catalog's search vectors,
            within what is left of ``ready_wait`` (BM25 answers searches until they are ready).
        relist_interval: seconds after which a call re-lists its upstream before forwarding;
            a change made without ``tools/list_changed`` is noticed within it (0: every call).
        token: bearer token required by the HTTP transport (``--token`` overrides it).
        auth: the HTTP transport as an OAuth 2.1 resource server instead: the authorization
            server, this gateway's resource URI, scopes, algorithms (see ``OAuthSettings``).
            Set ``token`` or ``auth``, not both.
        allowed_hosts: more host names (or addresses) the HTTP transport's ``Host`` check allows
            besides the bound address, e.g. the DNS name clients use (``--allowed-host`` adds).
        http: limits of the HTTP transport: timeouts, connection, request and body caps (see
            ``HTTPSettings``).
        spans: offloading of large upstream results (see ``SpanSettings``).
        revoke_command: the revocation hook: a program and its arguments, run once per
            credential reference of an archived chain, with the reference in place of each
            ``{ref}`` or, when no argument holds one, appended (see ``_revoke``); empty: none.
        revoke_timeout: seconds the revocation hook may take.
        max_subscriptions: resource subscriptions one client connection may hold
            (``resources/subscribe``), and resource URIs one ``subscriptions/listen`` filter may
            name; past it a subscription is refused (``_reads``).
        read_only / mutating: override what the tools' annotations say.
        rate_limit: per-identity request and upstream-call limits (see ``_rate_limit``); None:
            none.
        audit: the audit log, one JSON line per decision (see ``_audit``); None: off.
        telemetry: OpenTelemetry traces and metrics sent over OTLP (see ``_otel_config``);
            None (the default): none, and no OpenTelemetry code runs.
        policy: which tools each caller may see and call, by its token's subject, groups and
            scopes (see ``_policy``); None: every tool for everyone.
    """

    budget: BudgetSettings = BudgetSettings()
    pinned: tuple[str, ...] = ()
    phases: dict[str, tuple[str, ...]] = {}
    minify: Literal["none", "full-text", "compact", "minimal"] = DEFAULT_LEVEL
    store: str = "memory://"
    chains: Literal["refuse", "warn"] = "refuse"
    delivery: Literal["list", "reference", "auto"] = "reference"
    call_timeout: float = Field(default=DEFAULT_CALL_TIMEOUT, gt=0)
    startup_timeout: float = Field(default=DEFAULT_STARTUP_TIMEOUT, gt=0)
    ready_wait: float = Field(default=DEFAULT_READY_WAIT, ge=0)
    search_wait: float = Field(default=DEFAULT_READY_WAIT, ge=0)
    relist_interval: float = Field(default=30.0, ge=0)
    token: SecretStr | None = None
    auth: OAuthSettings | None = None
    allowed_hosts: tuple[str, ...] = ()
    http: HTTPSettings = HTTPSettings()
    read_only: tuple[str, ...] = ()
    mutating: tuple[str, ...] = ()
    spans: SpanSettings = SpanSettings()
    revoke_command: tuple[str, ...] = ()
    revoke_timeout: float = Field(default=10.0, gt=0, le=600)
    max_subscriptions: int = Field(default=256, ge=1, le=100_000)
    rate_limit: RateLimitSettings | None = None
    audit: AuditSettings | None = None
    telemetry: TelemetrySettings | None = None
    policy: PolicySettings | None = None

    @model_validator(mode="after")
    def _one_way_in(self) -> ResidencySettings:
        if self.token is not None and self.auth is not None:
            raise ValueError(
                "set token (one shared bearer token) or auth (OAuth access tokens), not both: "
                "each is a whole way of authenticating callers"
            )
        return self

    def revoker(self, redact: Callable[[str], str] | None = None) -> Callable[[str], bool] | None:
        """The configured revocation hook as a ``Session`` callback, or None.

        Args:
            redact: scrubs secrets from a failed run's output before it is logged; None: that
                output is not logged.
        """
        if not self.revoke_command:
            return None
        return command_revoker(self.revoke_command, self.revoke_timeout, redact=redact)

    @field_validator("revoke_command")
    @classmethod
    def _hook_program(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if value and not value[0].strip():
            raise ValueError("expected the program first (a non-empty string), then its arguments")
        if value and REF_PLACEHOLDER in value[0]:
            raise ValueError(f"the program cannot be {REF_PLACEHOLDER}: put it among the arguments")
        if any("\0" in arg for arg in value):
            raise ValueError("an argument holds a NUL character")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            bad = host_name_problem(name)
            if bad is not None:
                raise ValueError(bad)
        return value

    @field_validator("minify", mode="before")
    @classmethod
    def _minify_alias(cls, value: object) -> object:
        return MINIFY_ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("mutating")
    @classmethod
    def _not_both(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        both = sorted(set(value) & set(info.data.get("read_only", ())))
        if both:
            raise ValueError(f"a tool cannot be both read-only and mutating; also in read_only: {both}")
        return value

    @field_validator("store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        if value in ("memory:", "memory://") or (value.startswith("sqlite:///") and value != "sqlite:///"):
            return value
        if value.startswith(("postgresql://", "postgres://")) and value.partition("://")[2]:
            return value
        raise ValueError(
            "expected 'memory://', 'sqlite:///path/to/file.db' (four slashes for an absolute path) "
            "or 'postgresql://user@host/database'"
        )


_HOST_NAME = re.compile(r"[A-Za-z0-9.-]{1,253}|[0-9A-Fa-f:.]{2,45}")


def host_name_problem(name: str) -> str | None:
    """Why ``name`` is not a host name or address the ``Host`` check can allow, or None."""
    if _HOST_NAME.fullmatch(name.strip("[]")) is None:
        return (
            f"{name!r} is not a host name or address: give the name alone (letters, digits, dots "
            "and hyphens, or an IP address), with no scheme, port, path or wildcard"
        )
    return None


class _ServerBase(BaseModel):
    # Other clients put their own keys in mcpServers entries; they are not ours to refuse.
    model_config = ConfigDict(extra="ignore", frozen=True)

    disabled: bool = False
    timeout: float | None = Field(default=None, gt=0)


class StdioServer(_ServerBase):
    """An upstream launched as a subprocess speaking MCP over stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, SecretStr] = {}
    cwd: str | None = None


class HTTPServer(_ServerBase):
    """An upstream reached over streamable HTTP.

    Attributes:
        era: ``auto`` (the cheaper era for this upstream: 2026-07-28 when it answers
            ``server/discover`` and its catalog is small, else the handshake era), ``modern``
            (2026-07-28 whenever it is offered) or ``legacy`` (always the handshake era); see
            ``_http_upstream``.
        max_message_bytes: the largest SSE event accepted from it (a ``tools/list`` page is one).
        credentials: how the gateway authenticates to it with OAuth (``_credentials_config``);
            None: only ``headers``.
    """

    type: Literal["http", "streamable-http", "streamableHttp"] = "http"
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, SecretStr] = {}
    era: Literal["auto", "modern", "legacy"] = "auto"
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    credentials: CredentialsSettings | None = None

    @model_validator(mode="after")
    def _one_authorization(self) -> HTTPServer:
        mode = self.credentials.mode if self.credentials is not None else None
        if mode in ("client_credentials", "token_exchange") and any(
            k.lower() == "authorization" for k in self.headers
        ):
            raise ValueError(f"credentials ({mode}) set the Authorization header: remove it from headers")
        if mode in ("token_exchange", "passthrough") and self.era == "legacy":
            raise ValueError(
                f"credentials ({mode}) send a token per call, which needs the 2026-07-28 era (no "
                f'session bound to one caller): set era to "auto" or "modern"'
            )
        return self


class GatewayConfig(_Strict):
    """A whole configuration file. ``source`` names the file in error messages."""

    servers: dict[str, StdioServer | HTTPServer] = Field(default={}, alias="mcpServers")
    residency: ResidencySettings = ResidencySettings()
    source: str = "<config>"

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("servers")
    @classmethod
    def _own_namespaces(
        cls, value: dict[str, StdioServer | HTTPServer]
    ) -> dict[str, StdioServer | HTTPServer]:
        # Each server lists its tools under a prefix of its own (``_aggregate``): two that
        # reduce to one prefix could each claim the other's names.
        try:
            check_server_names(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def enabled_servers(self) -> dict[str, StdioServer | HTTPServer]:
        return {k: v for k, v in self.servers.items() if not v.disabled}

    def secrets(self) -> Secrets:
        values: list[str] = []
        for server in self.servers.values():
            found = server.env if isinstance(server, StdioServer) else server.headers
            values.extend(v.get_secret_value() for v in found.values())
            credentials = server.credentials if isinstance(server, HTTPServer) else None
            if credentials is not None and credentials.client_secret is not None:
                values.append(credentials.client_secret.get_secret_value())
        if self.residency.token is not None:
            values.append(self.residency.token.get_secret_value())
        auth = self.residency.auth
        if auth is not None and auth.introspection is not None:
            values.append(auth.introspection.client_secret.get_secret_value())
        if self.residency.telemetry is not None:
            values.extend(v.get_secret_value() for v in self.residency.telemetry.otlp.headers.values())
        return Secrets(values)


class Secrets:
    """Secret values that must never leave the gateway in text it writes.

    Which values are secrets. Scrubbing a value everywhere it appears garbles ordinary text
    when the value is an ordinary word (an env value ``hang`` would hide the tool ``hang``), so:

    * a value of at least ``MIN_SECRET_CHARS`` (8) characters is always a secret;
    * a value of 4 to 7 characters is a secret only when it is not a word, an identifier, a
      number or a path: it mixes letters and digits (``pa55``), or holds a character other than
      letters, digits and ``-_./:`` (``x$k!``). So ``hang``, ``true``, ``8080``, ``us-east``
      and ``/tmp`` stay readable;
    * a value under 4 characters is never one.

    A header value of the form ``<scheme> <credential>`` (``Bearer abc...``, ``Basic ...``)
    also adds its credential alone, under the same rules, since an upstream may quote just that.
    """

    MIN_SECRET_CHARS = 8

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        self._json_forms: list[str] = []
        self._generation = 0
        self.add(*values)

    @property
    def generation(self) -> int:
        """Changes whenever the set of values does: text redacted before is stale after."""
        return self._generation

    @classmethod
    def is_secret(cls, value: str) -> bool:
        """Whether ``value`` is scrubbed (see the class docstring)."""
        if len(value) >= cls.MIN_SECRET_CHARS:
            return True
        if len(value) < 4:
            return False
        has_letter = any(c.isalpha() for c in value)
        has_digit = any(c.isdigit() for c in value)
        odd = any(not c.isalnum() and c not in "-_./:" for c in value)
        return (has_letter and has_digit) or odd

    def add(self, *values: str) -> None:
        """Add secret values (those that are not secrets by the rules above are ignored)."""
        found = set(self._values)
        for value in values:
            found.update(v for v in (value, *_credential(value)) if self.is_secret(v))
        # Longest first, so a secret containing another is scrubbed whole.
        self._values = sorted(found, key=len, reverse=True)
        self._generation += 1
        # How each value appears inside JSON text (quotes, backslashes, controls escaped).
        self._json_forms = [json.dumps(v, ensure_ascii=False)[1:-1] for v in self._values]

    def discard(self, *values: str) -> None:
        """Stop scrubbing ``values`` (a token that expired and is held no more)."""
        gone = set(values)
        kept = [v for v in self._values if v not in gone]
        if len(kept) != len(self._values):
            self._values = kept
            self._generation += 1
            self._json_forms = [json.dumps(v, ensure_ascii=False)[1:-1] for v in kept]

    def __bool__(self) -> bool:
        return bool(self._values)

    def redact(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***``."""
        for value in self._values:
            if value in text:
                text = text.replace(value, "***")
        return text

    def found_in_json(self, text: str) -> bool:
        """Whether some secret appears in JSON ``text`` (a cheap test before a deeper scrub)."""
        return any(form in text for form in self._json_forms)


def _credential(value: str) -> tuple[str, ...]:
    scheme, _, credential = value.strip().partition(" ")
    if credential and scheme.isalpha():
        return (credential.strip(),)
    return ()


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and validate a configuration file.

    Raises:
        ConfigError: the file is missing, not JSON, or has a wrong key or value; the message
            names the file, the key (``where``), the line and what is expected. No secret value
            appears in it.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{file}: cannot read the configuration file ({exc.strerror})", where=str(file)
        ) from None
    return parse_config(text, source=str(file))


def parse_config(
    text: str, *, source: str = "<config>", environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Validate configuration text (see ``load_config``).

    Every problem of the file is found in one pass: the ``ConfigError`` lists them all
    (``problems``), each with its key, line and, for a near-miss key or value, a suggestion.

    Raises:
        ConfigError: the text is not a JSON object, or has wrong keys or values.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source}: line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg})",
            where=f"line {exc.lineno}",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object with 'mcpServers'", where="$")
    found = Problems(source, text)
    # VS Code's mcp.json is {"servers": {...}, "inputs": [...]}: the usual copy-paste mistake.
    hinted = []
    if "servers" in data and "mcpServers" not in data:
        found.add(("servers",), VSCODE_HINT)
        hinted.append("servers")
    if "inputs" in data:
        found.add(("inputs",), INPUTS_HINT)
        hinted.append("inputs")
    env = os.environ if environ is None else environ
    data = _expand({k: v for k, v in data.items() if k not in hinted}, env, found)
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        found.add(("mcpServers",), "expected an object of server entries")
        servers = {}
    picked: dict[str, StdioServer | HTTPServer] = {}
    for name, entry in servers.items():
        loc = ("mcpServers", name)
        if not isinstance(entry, dict) or ("url" not in entry and "command" not in entry):
            # A near-miss key ("comand", "URL") is named with what it was meant to be.
            meant = [(k, near(str(k), ["command", "url"])) for k in entry] if isinstance(entry, dict) else []
            key, suggestion = next(((k, m) for k, m in meant if m is not None), (None, None))
            if key is not None:
                found.add((*loc, str(key)), "unknown key", suggestion)
            else:
                found.add(loc, "expected an object with 'command' (stdio) or 'url' (HTTP)")
            continue
        server: StdioServer | HTTPServer | None
        if "url" in entry:
            server = validate(HTTPServer, entry, found, loc)
        else:
            server = validate(StdioServer, entry, found, loc)
        if server is not None:
            picked[name] = server
    config = validate(GatewayConfig, {**data, "mcpServers": picked, "source": source}, found, ())
    if found or config is None:
        raise found.error()
    return config


def _expand(data: dict[str, Any], env: Mapping[str, str], found: Problems) -> dict[str, Any]:
    data = _expand_telemetry(data, env, found)
    servers = data.get("mcpServers")
    if not isinstance(servers, dict):
        return data
    out: dict[str, Any] = {}
    for name, entry in servers.items():
        if isinstance(entry, dict):
            entry = dict(entry)
            for field in ("env", "headers"):
                values = entry.get(field)
                if isinstance(values, dict):
                    entry[field] = {
                        k: _expand_value(v, env, found, ("mcpServers", name, field, k))
                        for k, v in values.items()
                    }
            credentials = entry.get("credentials")
            if isinstance(credentials, dict) and "client_secret" in credentials:
                loc = ("mcpServers", name, "credentials", "client_secret")
                secret = _expand_value(credentials["client_secret"], env, found, loc)
                entry["credentials"] = {**credentials, "client_secret": secret}
        out[name] = entry
    return {**data, "mcpServers": out}


def _expand_telemetry(data: dict[str, Any], env: Mapping[str, str], found: Problems) -> dict[str, Any]:
    """``${NAME}`` in ``residency.telemetry.otlp.headers`` values, as in ``mcpServers`` headers."""
    residency = data.get("residency")
    telemetry = residency.get("telemetry") if isinstance(residency, dict) else None
    otlp = telemetry.get("otlp") if isinstance(telemetry, dict) else None
    headers = otlp.get("headers") if isinstance(otlp, dict) else None
    if not (isinstance(residency, dict) and isinstance(telemetry, dict) and isinstance(otlp, dict)):
        return data
    if not isinstance(headers, dict):
        return data
    loc = ("residency", "telemetry", "otlp", "headers")
    expanded = {k: _expand_value(v, env, found, (*loc, k)) for k, v in headers.items()}
    otlp = {**otlp, "headers": expanded}
    return {**data, "residency": {**residency, "telemetry": {**telemetry, "otlp": otlp}}}


def _expand_value(value: Any, env: Mapping[str, str], found: Problems, loc: tuple[str, ...]) -> Any:
    """``value`` with ``${NAME}`` replaced; a reference that cannot be is added to ``found``."""
    if not isinstance(value, str):
        return value
    if _INPUT_REF.search(value):
        found.add(loc, "VS Code ${input:...} is not read here: write ${NAME}")
        return value
    missing = sorted({m.group(1) for m in _ENV_REF.finditer(value) if m.group(1) not in env})
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        found.add(loc, f"environment variable{'s' * (len(missing) > 1)} {', '.join(missing)} {verb} not set")
        return value
    return _ENV_REF.sub(lambda match: env[match.group(1)], value)
