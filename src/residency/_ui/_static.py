"""The dashboard's script and stylesheet, served at ``/ui/static/`` (no build step, no inline code).

The script does one thing: every ``POLL_MS`` it asks ``/ui/stamp`` whether what the page shows
has changed in the store, and reloads the page if it has (the stores signal no per-session
change, so the page asks; the question costs one journal read). A filter form submits as a
plain GET, so every view is a URL.
"""

from __future__ import annotations

__all__ = ["APP_CSS", "APP_JS", "POLL_MS"]

POLL_MS = 2000

APP_JS = f"""\
"use strict";
(function () {{
  const main = document.querySelector("main[data-stamp]");
  if (!main || !main.dataset.stamp) return;
  const here = location.pathname + location.search;
  let busy = false;
  async function poll() {{
    if (busy || document.hidden) return;
    busy = true;
    try {{
      const r = await fetch("/ui/stamp?path=" + encodeURIComponent(here), {{
        credentials: "same-origin", cache: "no-store"
      }});
      if (r.ok) {{
        const stamp = (await r.text()).trim();
        if (stamp && stamp !== main.dataset.stamp) location.reload();
      }}
    }} catch (e) {{
      /* the server is restarting or unreachable: try again at the next tick */
    }} finally {{
      busy = false;
    }}
  }}
  setInterval(poll, {POLL_MS});
}})();
"""

APP_CSS = """\
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2328; background: #fff; }
header { display: flex; gap: 1.5em; align-items: baseline; padding: .6em 1.2em; background: #f6f8fa;
  border-bottom: 1px solid #d0d7de; }
header nav a { margin-right: 1em; }
header .where { color: #57606a; margin-left: auto; font-family: monospace; }
main { padding: 1em 1.2em; max-width: 1200px; }
table { border-collapse: collapse; margin: .5em 0 1.2em; }
th, td { border: 1px solid #d0d7de; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
code { font-family: ui-monospace, monospace; background: #f6f8fa; padding: 0 .2em; }
.summary { color: #57606a; }
.filters label { margin-right: 1em; }
.turn { border-left: 3px solid #d0d7de; padding-left: .8em; margin-bottom: 1em; }
.turn h3 { margin: .2em 0; font-size: 1em; }
.events { list-style: none; padding: 0; margin: .2em 0; }
.events .kind { display: inline-block; min-width: 8em; font-weight: 600; }
.leave .kind { color: #9a6700; }
.refused .kind { color: #cf222e; }
.back .kind { color: #1a7f37; }
.resident { color: #57606a; }
.status-connected { color: #1a7f37; }
.status-failed { color: #cf222e; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
.plot { border: 1px solid #d0d7de; }
.pager a { margin-right: 1em; }
"""
