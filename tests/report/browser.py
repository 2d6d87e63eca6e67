"""Headless Chromium for the report tests: render a page, read its DOM and console, screenshot it.

Debian's `chromium` (installed by tests/report/ensure_chromium.sh) driven from its command line:
`--dump-dom` prints the DOM after scripts ran, `--enable-logging=stderr` prints every console
message and uncaught exception as an `INFO:CONSOLE` line, `--screenshot` writes a PNG. No
selenium (no new dependency, nothing to keep in step with the browser version). The network is
cut off with a host-resolver rule that fails every lookup, so a report that needs the network to
draw fails here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--enable-logging=stderr", "--v=0"]
# Virtual time lets the page's timers and load handlers run without waiting in real time.
VIRTUAL_TIME_MS = 1000
WIDTH_PX = 1280


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]  # console messages and uncaught exceptions, in order

    def attr(self, name: str) -> str | None:
        m = re.search(rf'<body[^>]*\b{name}="([^"]*)"', self.dom)
        return m.group(1) if m else None


def _run(chromium: str, extra: list[str], url: str, timeout_s: float = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="trainplan-chromium-") as profile:
        return subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}",
             f"--virtual-time-budget={VIRTUAL_TIME_MS}", *extra, url],
            capture_output=True, text=True, timeout=timeout_s, check=False)


def render(chromium: str, page: Path, width_px: int = WIDTH_PX) -> Rendered:
    # the same width as the screenshot, so that the page height it reports is the one shot
    r = _run(chromium, [f"--window-size={width_px},1000", "--dump-dom"], page.resolve().as_uri())
    console = [line.split("] ", 1)[-1] for line in r.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(dom=r.stdout, console=console)


def screenshot(chromium: str, page: Path, png: Path, height_px: int, width_px: int = WIDTH_PX) -> None:
    png.parent.mkdir(parents=True, exist_ok=True)
    r = _run(chromium, [f"--window-size={width_px},{height_px}", f"--screenshot={png.resolve()}"],
             page.resolve().as_uri())
    assert png.is_file() and png.stat().st_size > 0, f"no screenshot written:\n{r.stderr[-2000:]}"


def png_size(png: Path) -> tuple[int, int]:
    """(width, height) from the PNG header (IHDR is the first chunk)."""
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def ink(png: Path) -> tuple[float, int]:
    """(fraction of pixels that are not near-white, number of distinct colours) of a screenshot:
    a blank or text-only page has little ink and few colours; drawn plots have both."""
    from PIL import Image  # pillow comes with the torch extra (tensorboard); CI installs it

    with Image.open(png) as im:
        small = im.convert("RGB").resize((im.width // 4, im.height // 4))
    counts = small.getcolors(maxcolors=small.width * small.height)
    inked = sum(n for n, (r, g, b) in counts if min(r, g, b) < 235)
    return inked / (small.width * small.height), len(counts)
