"""Offline checks of adapter output against the official provider SDKs.

Two checks, neither of which leaves the process:

- ``validate``: pydantic validation against the SDK's request TypedDict. pydantic validates
  ``Iterable`` fields lazily, so the result is drained (which runs the pending validation) and
  compared with the input: an unknown key is dropped by the TypedDict and shows as a difference.
- ``sent_*``: the SDK client itself builds and serializes the request; an ``httpx2``
  ``MockTransport`` answers it in-process, and the JSON body the SDK would have sent is returned.
  The base URL is loopback all the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anthropic
import httpx2
import openai
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel, TypeAdapter

__all__ = [
    "ANTHROPIC_PARAMS",
    "CHAT_PARAMS",
    "RESPONSES_PARAMS",
    "jsonable",
    "sent_anthropic",
    "sent_chat",
    "sent_responses",
    "validate",
]

ANTHROPIC_PARAMS: TypeAdapter[Any] = TypeAdapter(MessageCreateParamsNonStreaming)
CHAT_PARAMS: TypeAdapter[Any] = TypeAdapter(CompletionCreateParamsNonStreaming)
RESPONSES_PARAMS: TypeAdapter[Any] = TypeAdapter(ResponseCreateParamsNonStreaming)

_LOOPBACK = "http://127.0.0.1:9"


def _drain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        # Assistant content may validate as the SDK's response block models (they are in the
        # request union too); their set fields are what was sent.
        return _drain(value.model_dump(exclude_unset=True))
    if isinstance(value, Mapping):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | Iterator) or type(value).__name__ == "ValidatorIterator":
        return [_drain(v) for v in value]
    return value


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


def validate(adapter: TypeAdapter[Any], params: Any) -> None:
    """Raise ``pydantic.ValidationError`` unless ``params`` is a valid request, key for key."""
    validated = _drain(adapter.validate_python(params))
    assert validated == jsonable(params), "the SDK's request type drops or changes a field"


def _capture(
    answer: Mapping[str, Any],
) -> tuple[list[httpx2.Request], Callable[[httpx2.Request], httpx2.Response]]:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=dict(answer))

    return seen, handler


_MESSAGE = {
    "id": "msg_test",
    "type": "message",
    "role": "assistant",
    "model": "test",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def sent_anthropic(params: Mapping[str, Any]) -> Any:
    """The JSON body ``client.messages.create(**params)`` sends."""
    seen, handler = _capture(_MESSAGE)
    with (
        httpx2.Client(transport=httpx2.MockTransport(handler)) as http,
        anthropic.Anthropic(api_key="test", base_url=_LOOPBACK, http_client=http, max_retries=0) as client,
    ):
        client.messages.with_raw_response.create(**params)
    (request,) = seen
    assert (request.method, request.url.path) == ("POST", "/v1/messages")
    return json.loads(request.content)


def sent_chat(params: Mapping[str, Any]) -> Any:
    """The JSON body ``client.chat.completions.create(**params)`` sends."""
    seen, handler = _capture(
        {"id": "c", "object": "chat.completion", "created": 0, "model": "t", "choices": []}
    )
    with (
        httpx2.Client(transport=httpx2.MockTransport(handler)) as http,
        openai.OpenAI(api_key="test", base_url=f"{_LOOPBACK}/v1", http_client=http, max_retries=0) as client,
    ):
        client.chat.completions.with_raw_response.create(**params)
    (request,) = seen
    assert (request.method, request.url.path) == ("POST", "/v1/chat/completions")
    return json.loads(request.content)


def sent_responses(params: Mapping[str, Any]) -> Any:
    """The JSON body ``client.responses.create(**params)`` sends."""
    seen, handler = _capture({"id": "r", "object": "response", "created_at": 0, "model": "t", "output": []})
    with (
        httpx2.Client(transport=httpx2.MockTransport(handler)) as http,
        openai.OpenAI(api_key="test", base_url=f"{_LOOPBACK}/v1", http_client=http, max_retries=0) as client,
    ):
        client.responses.with_raw_response.create(**params)
    (request,) = seen
    assert (request.method, request.url.path) == ("POST", "/v1/responses")
    return json.loads(request.content)
