"""The ``residency.telemetry`` section: traces and metrics sent to an OpenTelemetry collector.

Off unless the section is present: a config without it runs no OpenTelemetry code at all (the
gateway imports ``_tracing``, and with it the OpenTelemetry SDK and exporters, only when the
section is there). With it, the gateway needs the ``otel`` extra (``pip install
'residency[otel]'``); a missing extra is a ``ConfigError`` at startup that says so.

Where a key is left out, the standard ``OTEL_*`` environment variables apply, as the
OpenTelemetry SDK reads them (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*``); a key in the file wins over
its variable. ``OTEL_SDK_DISABLED=true`` turns the section off. The variables alone never turn
telemetry on: an unrelated ``OTEL_*`` in a shared environment must not make a gateway export,
or fail for want of the extra.

This module holds the settings only (pydantic, no OpenTelemetry import): see ``_tracing``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = ["OTLPSettings", "TelemetrySettings"]


class OTLPSettings(BaseModel):
    """Where the OTLP exporters send (``residency.telemetry.otlp``).

    Attributes:
        endpoint: the collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` (for
            ``http/protobuf`` the paths ``/v1/traces`` and ``/v1/metrics`` are appended); None:
            that variable, else the SDK's default (``http://localhost:4318``, gRPC
            ``http://localhost:4317``).
        protocol: ``http/protobuf`` (the default: no gRPC needed) or ``grpc`` (needs
            ``opentelemetry-exporter-otlp-proto-grpc``).
        headers: sent with every export (an ``Authorization`` or API key header); secrets, never
            shown, scrubbed like ``mcpServers`` headers; ``${NAME}`` reads an environment
            variable. Empty: ``OTEL_EXPORTER_OTLP_HEADERS``.
        timeout: seconds one export may take.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = Field(default=None, pattern=r"^https?://")
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    headers: dict[str, SecretStr] = {}
    timeout: float = Field(default=10.0, gt=0, le=600)


class TelemetrySettings(BaseModel):
    """OpenTelemetry traces and metrics (``residency.telemetry``; see the module docstring).

    Attributes:
        otlp: the exporters' destination.
        service_name: the ``service.name`` resource attribute; None: ``OTEL_SERVICE_NAME``,
            else ``residency``.
        traces: send spans (a span per MCP request, admission decision and upstream call).
        metrics: send the gateway's metrics (the ``/metrics`` counters, gauges and histogram).
        metric_interval: seconds between two metric exports (one more is sent at shutdown).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    otlp: OTLPSettings = OTLPSettings()
    service_name: str | None = Field(default=None, min_length=1)
    traces: bool = True
    metrics: bool = True
    metric_interval: float = Field(default=60.0, ge=0.05, le=86_400)

    @field_validator("otlp")
    @classmethod
    def _no_bare_secrets(cls, value: OTLPSettings) -> OTLPSettings:
        if any(not name.strip() for name in value.headers):
            raise ValueError("a header name is empty")
        return value
