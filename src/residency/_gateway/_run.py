"""``residency serve`` without the argument parsing: options, then stdio or HTTP until stopped."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from residency._errors import ConfigError
from residency._gateway._config import GatewayConfig, ResidencySettings, Secrets, load_config, parse_config
from residency._gateway._demo import IncidentDesk
from residency._gateway._http import bind, serve_http
from residency._gateway._server import Gateway

__all__ = ["DEMO_CONFIG", "ServeOptions", "serve"]

DEMO_CONFIG = """{
  "mcpServers": {},
  "residency": {"budget": {"schema_tokens": 1200, "argument_tokens": 20000}, "minify": "compact"}
}"""
"""The demo desk's policy: a schema budget tight enough that, after a few read-only calls, a
mutation tool called earlier is demoted and tombstoned (the seed-000 scenario)."""


@dataclass
class ServeOptions:
    """What ``residency serve`` runs."""

    config: GatewayConfig
    transport: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765
    session: str | None = None
    token: str | None = None
    timeout: float | None = None
    demo: bool = False
    secrets: Secrets = field(default_factory=Secrets)

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str]) -> ServeOptions:
        """Options from the command line and environment.

        Raises:
            ConfigError: the config file is missing or malformed.
        """
        demo = args.config is None
        config = parse_config(DEMO_CONFIG, source="<demo>") if demo else load_config(args.config)
        if args.store:
            try:
                settings = ResidencySettings.model_validate(
                    {**config.residency.model_dump(), "store": args.store}
                )
            except ValidationError as exc:
                raise ConfigError(
                    f"--store: {exc.errors()[0]['msg'].removeprefix('Value error, ')}", where="--store"
                ) from None
            config = config.model_copy(update={"residency": settings})
        token = args.token or environ.get("RESIDENCY_TOKEN") or None
        if token is None and config.residency.token is not None:
            token = config.residency.token.get_secret_value()
        session = args.session or environ.get("RESIDENCY_SESSION") or None
        if session is None and args.transport == "stdio":
            session = "stdio"
        secrets = config.secrets()
        if token:
            secrets.add(token)
        return cls(
            config=config,
            transport=args.transport,
            host=args.host,
            port=args.port,
            session=session,
            token=token,
            timeout=args.timeout,
            demo=demo,
            secrets=secrets,
        )


def serve(options: ServeOptions) -> None:
    """Run the gateway until stdin closes (stdio) or the process is interrupted (HTTP)."""
    anyio.run(_serve, options)


async def _serve(options: ServeOptions) -> None:
    upstreams: dict[str, Server[Any]] = {}
    if options.demo:
        upstreams["desk"] = IncidentDesk().server
    gateway = Gateway(
        options.config, upstreams=upstreams, default_session=options.session, timeout=options.timeout
    )
    async with gateway:
        if options.transport == "stdio":
            async with stdio_server() as (read, write):
                await gateway.server.run(read, write, gateway.server.create_initialization_options())
            return
        sock = bind(options.host, options.port)

        def started(url: str) -> None:
            print(f"residency: serving MCP at {url}", file=sys.stderr, flush=True)

        await serve_http(gateway, sock, host=options.host, token=options.token, started=started)
