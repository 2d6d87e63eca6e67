"""Screenshots of HTML reports for docs/ (not a test; run by hand after changing a report).

    .venv/bin/python tests/report/screenshots.py docs/report/plan.png plan.html [...PNG HTML]

Each page is rendered in headless Chromium at 1280 px wide and as tall as the page says it is
(`data-page-height`). Fails if a plot did not draw or the console has a message.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from browser import find_chromium, render, screenshot


def main(argv: list[str]) -> int:
    chromium = find_chromium()
    if chromium is None:
        print("chromium is not installed: run tests/report/ensure_chromium.sh", file=sys.stderr)
        return 2
    for png, page in zip(argv[::2], argv[1::2]):
        r = render(chromium, Path(page))
        expected, drawn = r.attr("data-plots-expected"), r.attr("data-plots-rendered")
        if r.console or expected != drawn:
            print(f"{page}: {drawn}/{expected} plots drawn; console: {r.console}", file=sys.stderr)
            return 1
        screenshot(chromium, Path(page), Path(png), int(r.attr("data-page-height") or 2000))
        print(f"{png}: {drawn} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
