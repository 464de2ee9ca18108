"""The report opened in headless Chromium (Debian's ``chromium``): a screenshot, the rendered DOM,
and a layout probe that measures what a person would see wrong.

The probe is a test-only copy of the page with a script appended (the report itself has none):
after layout it writes, into ``<pre id="probe">``, the cells whose text wraps although their
column is not a text column (a header may wrap between words, never inside one: "Platfor m"),
the tables too wide for their panel (read only by scrolling sideways), number columns whose header
or cells are not
right-aligned, whether the page scrolls sideways, and the text rows (long values under their
row) that reach past their panel; ``--dump-dom`` returns it with the DOM.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--disable-extensions",
    "--mute-audio",
]
WIDTH = 1400

PROBE = r"""<script>
window.addEventListener("load", () => {
  const out = {wrapped: [], numLeft: [], overflow: false, belowOut: [], sideways: [], cells: 0};
  const lines = el => {  // lines of text: the distinct tops of its text nodes' line boxes
    const tops = [], walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const r = document.createRange(); r.selectNodeContents(n);
      for (const x of r.getClientRects()) if (x.width > 0) tops.push(x.top);
    }
    tops.sort((a, b) => a - b);
    return tops.filter((t, i) => i === 0 || t - tops[i - 1] > 6).length;
  };
  const split = el => {  // a word broken across two lines ("Platfor m")
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(x => x.width > 0)
                                .map(x => Math.round(x.top)));
        if (tops.size > 1) return true;
      }
    }
    return false;
  };
  for (const cell of document.querySelectorAll("th, td")) {
    out.cells++;
    if (cell.closest("tr.below") || cell.classList.contains("text")) continue;
    // a header may wrap between its words; a value may not wrap at all
    if (cell.tagName === "TH" ? split(cell) : lines(cell) > 1) {
      out.wrapped.push(cell.textContent.trim().slice(0, 40));
    }
  }
  for (const wrap of document.querySelectorAll(".table-wrap")) {  // a table scrolled sideways
    const panel = wrap.closest("[data-item]");  // (a drill-down's records, opened on demand: no)
    if (!wrap.closest("details") && wrap.scrollWidth > wrap.clientWidth + 1) {
      out.sideways.push(panel ? panel.dataset.item : "?");
    }
  }
  const align = el => getComputedStyle(el).textAlign;
  const number = /^-?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?$|^-?[0-9]+\.[0-9]+$/;  // 1,234 or 0.5
  for (const table of document.querySelectorAll("table")) {  // header aligned as its numbers
    const heads = [...table.querySelectorAll("thead th")];
    const rows = [...table.querySelectorAll("tbody tr:not(.below)")].map(tr => [...tr.children]);
    heads.forEach((th, i) => {
      const cells = rows.map(r => r[i]).filter(Boolean);
      const right = cells.length && cells.every(td => align(td) === "right");
      const numbers = cells.filter(td => number.test(td.textContent.trim()));
      if ((right && align(th) !== "right") || numbers.some(td => align(td) !== "right")) {
        out.numLeft.push(th.textContent.trim());
      }
    });
  }
  out.overflow = document.documentElement.scrollWidth > window.innerWidth;
  for (const td of document.querySelectorAll("tr.below td")) {
    const wrap = td.closest(".table-wrap").getBoundingClientRect();
    const r = document.createRange(); r.selectNodeContents(td);
    const right = Math.max(...[...r.getClientRects()].map(x => x.right));
    if (right > wrap.right + 1) out.belowOut.push(td.textContent.trim().slice(0, 40));
  }
  const pre = document.createElement("pre"); pre.id = "probe";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""


@dataclass(slots=True)
class Rendered:
    png: Path
    dom: str
    probe: dict


def executable() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "Debian's chromium is not installed (scripts/test.sh installs it)"
    return exe


def open_page(page: Path, out: Path, height: int = 2400) -> Rendered:
    """A screenshot of ``page`` to ``out``, its rendered DOM, and the layout probe's findings."""
    base = [
        executable(),
        *FLAGS,
        f"--user-data-dir={out.parent / 'chromium-profile'}",
        f"--window-size={WIDTH},{height}",
    ]
    shot = subprocess.run(
        [*base, f"--screenshot={out}", page.as_uri()], capture_output=True, timeout=120, check=False
    )
    assert shot.returncode == 0 and out.stat().st_size > 10_000, shot.stderr[-2000:]
    dom = _dump(base, page)
    probed = page.with_name(page.stem + ".probe.html")
    probed.write_text(page.read_text("utf-8").replace("</body>", PROBE + "</body>"), "utf-8")
    found = _dump([*base, "--virtual-time-budget=5000"], probed)
    text = found.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0]
    return Rendered(
        out,
        dom,
        json.loads(
            text.replace("&quot;", '"')
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
        ),
    )


def _dump(base: list[str], page: Path) -> str:
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def colours(png: Path) -> int:
    """How many distinct colours the screenshot has (a blank page has one or two)."""
    from PIL import Image  # matplotlib's dependency (the report extra)

    with Image.open(png) as im:
        return len(im.convert("RGB").getcolors(maxcolors=1 << 20) or [])
