"""What the docs site generates from the code and the benchmark results when it is built.

A page holds ``<!-- gen: NAME ARG... -->`` where generated Markdown goes (``render``); the mkdocs
hook (``docs_gen/hook.py``) applies it to every page, and the tests apply it to check the pages
without building the site. Every code block a generator writes is marked ``generated`` for the
code-block rule of ``docs_gen.blocks``.
"""

from __future__ import annotations

from docs_gen.render import GENERATORS, render

__all__ = ("GENERATORS", "render")
