"""Learning from use: queries that led to a successful call, as one more ranking signal.

A *label* says that a session searched ``query`` and then called ``tool`` successfully, the
tool among that search's hits or found by a later search of the same need (a rephrasing: see
``residency._runtime._learning``). Labels are kept in the store per archive scope, so every
replica and every later session of the scope learns from them.

How a query is scored against them (:meth:`LearnedLabels.scores`): each label adds
``weight x similarity`` to its tool, where

- ``similarity`` is how close the query is to the label's query: the larger of the share of
  their terms in common (Jaccard, over ``query_terms``) above ``JACCARD_FLOOR`` and, where the
  index has a semantic model, the cosine of their embeddings above ``COSINE_FLOOR``, each
  scaled to [0, 1]; so a label
  helps queries that say the same need in other words, and not unrelated ones;
- ``weight`` halves every ``HALF_LIFE_DAYS``: old habits fade;

and the sums are capped twice, so that no session can capture the ranking: what one session's
labels add to a tool is at most ``PER_SESSION``, and a tool's score reaches its maximum, 1, only
with ``SATURATION`` sessions' worth. Only a tool's ``PER_TOOL`` most recent labels count. The
score is added to the fused ranking with weight ``WEIGHT`` (BM25's is 1, the semantic
ranking's 2.5, each scaled to [0, 1]).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from residency._search._text import embedding_query, query_terms

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from residency._search._semantic import Embedder, Vectors

__all__ = [
    "COSINE_FLOOR",
    "HALF_LIFE_DAYS",
    "PER_SESSION",
    "PER_TOOL",
    "SATURATION",
    "WEIGHT",
    "LearnedLabels",
    "SearchLabel",
]

HALF_LIFE_DAYS = 30.0
"""A label's weight halves every this many days."""
PER_TOOL = 64
"""Labels that count per tool: its most recent."""
PER_SESSION = 1.0
"""What one session's labels may add to one tool's score, at most."""
SATURATION = 2.0
"""Sessions' worth of labels at which a tool's score reaches 1."""
WEIGHT = 1.0
"""The learned score's weight in the fused ranking. Gates tried against the small loss on
queries whose tools have no label (labels of same-domain queries that needed another tool,
similarity 0.3 to 0.45): a floor relative to the query's similarity to all labels, IDF-weighted
term overlap, and similarities squared or cubed with this weight raised to 2 or 3. Chosen on
the public set's tune half, none kept its gain and removed the loss on the held-out half.
Counting a label by the model's cosine alone where there is a model (no term overlap, floors
0.6 to 0.7), compared by learning from one part of each tune half and ranking the other: it
removed the project set's two losses but cut the public set's gain on queries with history from
+0.039 to +0.011 MRR and kept its loss, so it was not kept. Compared the same way (learning
from one part of each set's tune half, ranking the other), none of these kept a gain without a
loss either: a gate on the nearest label's cosine (0.7 to 0.9: no loss, gain at most +0.016);
floors, weights and saturation over a grid (gain up to +0.078, loss 0.005 to 0.016); a label
counted only where terms and cosine both agree; a nearest-neighbour vote (softmax over the
labels' cosines); and a label that lifts its tool only above the tools it was chosen over
(+0.013). On the project set a held-out query and the label of its tool are seldom closer (cosine
0.3 to 0.5) than labels of other tools are, so labels move little there."""
COSINE_FLOOR = 0.6
"""Embedding similarity at or below this counts as none (unrelated queries score 0.1-0.4)."""
JACCARD_FLOOR = 0.2
"""Terms in common at or below this share count as none."""

_DAY = 86_400.0
_EMBED_PER_QUERY = 8  # label queries embedded per scored query; the rest count by terms until then


@dataclass(frozen=True, slots=True)
class SearchLabel:
    """A query that led, in session ``session``, to a successful call of ``tool`` at ``at``
    (seconds since the epoch)."""

    query: str
    tool: str
    session: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "tool": self.tool, "session": self.session, "at": self.at}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SearchLabel:
        """Raises ``KeyError``, ``TypeError`` or ``ValueError`` on a malformed record."""
        query, tool, session = data["query"], data["tool"], data["session"]
        if not all(isinstance(v, str) for v in (query, tool, session)):
            raise TypeError("a search label's query, tool and session are strings")
        return cls(query, tool, session, float(data["at"]))


class LearnedLabels:
    """The labels of one scope, ready to score queries (immutable labels, lazy vectors).

    Args:
        labels: the scope's labels, in any order; only each tool's ``PER_TOOL`` most recent
            are kept.
        now: the time weights are computed at (seconds since the epoch).
    """

    def __init__(self, labels: Iterable[SearchLabel], *, now: float) -> None:
        by_tool: dict[str, list[SearchLabel]] = {}
        for label in sorted(labels, key=lambda lab: lab.at, reverse=True):
            kept = by_tool.setdefault(label.tool, [])
            if len(kept) < PER_TOOL:
                kept.append(label)
        self.labels: tuple[SearchLabel, ...] = tuple(lab for kept in by_tool.values() for lab in kept)
        self._terms = [frozenset(query_terms(lab.query)) for lab in self.labels]
        self._weights = [0.5 ** (max(0.0, now - lab.at) / (HALF_LIFE_DAYS * _DAY)) for lab in self.labels]
        self._vectors: dict[str, list[Vectors | None]] = {}  # model -> a vector per label, or None yet
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.labels)

    def tools(self) -> dict[str, int]:
        """Labels kept per tool."""
        out: dict[str, int] = {}
        for label in self.labels:
            out[label.tool] = out.get(label.tool, 0) + 1
        return out

    def _label_vectors(self, embedder: Embedder) -> list[Vectors | None]:
        """The labels' query vectors for ``embedder``, embedding at most a few more per call (a
        query pays for a bounded number; the others count by their terms until embedded)."""
        with self._lock:
            vectors = self._vectors.setdefault(embedder.name, [None] * len(self.labels))
            missing = [i for i, v in enumerate(vectors) if v is None][:_EMBED_PER_QUERY]
        if missing:
            fresh = embedder.embed([embedding_query(self.labels[i].query) for i in missing])
            with self._lock:
                for i, row in zip(missing, fresh, strict=True):
                    vectors[i] = row
        return vectors

    def similarities(
        self, query: str, query_vector: Callable[[], tuple[Embedder, Vectors]] | None
    ) -> list[float]:
        """How close ``query`` is to each label's query, from 0 to 1 (see the module docstring).

        ``query_vector``: the query's embedding and its model, where the index has one.
        """
        terms = frozenset(query_terms(query))
        out = [
            _above(len(terms & t) / len(terms | t), JACCARD_FLOOR) if terms and t else 0.0
            for t in self._terms
        ]
        if query_vector is not None and self.labels:
            embedder, vector = query_vector()
            for i, row in enumerate(self._label_vectors(embedder)):
                if row is not None:
                    cosine = float(row @ vector)
                    out[i] = max(out[i], _above(cosine, COSINE_FLOOR))
        return out

    def scores(
        self,
        query: str,
        positions: Mapping[str, int],
        size: int,
        query_vector: Callable[[], tuple[Embedder, Vectors]] | None = None,
    ) -> npt.NDArray[np.float64] | None:
        """Each tool's learned score for ``query`` (0 to 1), by position in an index of ``size``
        tools whose positions are ``positions``; None when no label is near the query."""
        import numpy as np

        if not self.labels:
            return None
        sims = self.similarities(query, query_vector)
        per_session: dict[tuple[str, str], float] = {}
        for label, weight, sim in zip(self.labels, self._weights, sims, strict=True):
            if sim > 0 and label.tool in positions:
                key = (label.tool, label.session)
                per_session[key] = min(PER_SESSION, per_session.get(key, 0.0) + weight * sim)
        if not per_session:
            return None
        out = np.zeros(size, dtype=np.float64)
        for (tool, _), value in per_session.items():
            out[positions[tool]] += value
        result: npt.NDArray[np.float64] = np.minimum(1.0, out / SATURATION)
        return result


def _above(value: float, floor: float) -> float:
    """``value`` above ``floor``, scaled so that 1 stays 1 (0 at or below the floor)."""
    return max(0.0, (value - floor) / (1.0 - floor))


def labels_from_records(records: Sequence[Mapping[str, Any]]) -> list[SearchLabel]:
    """Labels from stored records, skipping none: a malformed one raises ``ValueError``."""
    out = []
    for record in records:
        try:
            out.append(SearchLabel.from_json(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed search label {dict(record)!r}: {exc}") from None
    return out
