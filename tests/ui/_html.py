"""Reading the dashboard's HTML back in tests: a minimal tree from the standard library's parser."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"input", "meta", "link", "br", "img"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for c in self.children:
            if isinstance(c, Node):
                if (tag is None or c.tag == tag) and all(
                    v in c.attrs.get(k.rstrip("_"), "").split() or c.attrs.get(k.rstrip("_")) == v
                    for k, v in attrs.items()
                ):
                    found.append(c)
                found += c.all(tag, **attrs)
        return found

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        [node] = self.all(tag, **attrs)
        return node

    def rows(self) -> list[list[str]]:
        """A table's body rows as cell texts."""
        return [[td.text() for td in tr.all("td")] for tr in self.one("tbody").all("tr")]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(markup: str) -> Node:
    """The document's tree; raises if an element is closed out of order (malformed markup)."""
    builder = _Builder()
    builder.feed(markup)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root
