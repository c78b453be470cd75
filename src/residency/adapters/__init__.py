"""Request parameters for hosts that call a provider's API themselves (embedded use).

Each module turns a ``Session`` (and, where the provider needs it, a ``TurnPlan``) into the
parameters of one API request, keeping the tool block identical on every turn while the
catalog is unchanged, so the provider's prompt cache keeps its prefix:

- ``residency.adapters.anthropic``: withheld tools are deferred (``defer_loading``) behind a
  tool search; re-expansions are answered with ``tool_reference`` blocks.
- ``residency.adapters.openai``: every tool stays in ``tools``; ``tool_choice``
  ``allowed_tools`` restricts calls to the resident ones (Chat Completions and Responses).

Pure functions with no network and no runtime dependency on the providers' packages; their
return types are those packages' request TypedDicts (``pip install residency[adapters]``).
"""

from __future__ import annotations

from residency.adapters import anthropic, openai

__all__ = ("anthropic", "openai")
