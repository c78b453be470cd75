"""The dashboard's script and stylesheet, served at ``/ui/static/`` (no build step, no inline code).

The script keeps a page current. It asks ``/ui/stamp`` whether what the page shows has changed
in the store and reloads the page if it has (the question costs one journal read). When should
it ask? Where the store sends change notices (a page marked ``data-live="events"``, see
``_live``), when ``/ui/events`` says something the page shows changed, and each time the stream
(re)opens; elsewhere, or when the stream is refused, every ``POLL_MS``. A hidden tab holds no
stream (browsers open few connections to one server) and asks once it is shown again. A filter
form submits as a plain GET, so every view is a URL.
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
  const prefix = "/ui/session/";
  const mine = location.pathname.startsWith(prefix)
    ? decodeURIComponent(location.pathname.slice(prefix.length)) : null;
  const chains = location.pathname === "/ui/chains";
  let busy = false, again = false, stale = false, timer = null;
  async function check() {{
    if (document.hidden) {{ stale = true; return; }}
    if (busy) {{ again = true; return; }}
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
      /* the server is restarting or unreachable: try again at the next tick or event */
    }} finally {{
      busy = false;
      if (again) {{ again = false; check(); }}
    }}
  }}
  function poll() {{
    if (timer === null) timer = setInterval(function () {{ if (!document.hidden) check(); }}, {POLL_MS});
  }}
  const live = main.dataset.live === "events" && !!window.EventSource;
  let events = null;
  function subscribe() {{
    const source = new EventSource("/ui/events");
    events = source;
    source.addEventListener("open", check);
    source.addEventListener("change", function (e) {{
      let c;
      try {{ c = JSON.parse(e.data); }} catch (err) {{ return; }}
      const any = c.sessions === null;
      const shown = mine !== null ? any || c.sessions.includes(mine)
        : chains ? any || c.archive : any || c.sessions.length > 0;
      if (shown) check();
    }});
    source.addEventListener("error", function () {{
      /* refused (busy, stopping): ask on a timer instead */
      if (source.readyState === EventSource.CLOSED && events === source) {{ events = null; poll(); }}
    }});
  }}
  /* A hidden tab holds no stream (a browser opens few connections to one server); shown
     again, it subscribes anew, and the new stream's opening asks once. */
  document.addEventListener("visibilitychange", function () {{
    if (document.hidden) {{
      if (events) {{ events.close(); events = null; }}
    }} else if (live && timer === null && events === null) {{
      stale = false;
      subscribe();
    }} else if (stale) {{
      stale = false;
      check();
    }}
  }});
  if (!live) poll();
  else if (!document.hidden) subscribe();
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
