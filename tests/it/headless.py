"""tests/it/headless.py - headless Chromium for the HTML report checks (standard library only).

bench_html.py and synth_html.py load a report from file:// in a throw-away profile, read the
rendered DOM and take a screenshot that must not be blank. What they share is here:

    try:
        with open_page("report.html") as page:
            page.dom, page.stderr          # the first --dump-dom of the page
            page.run("--dump-dom", page.url + "#open-all")
            proc, png = page.screenshot("shot.png", 1280, 1600)   # png: (w, h, distinct) or None
    except Skip as e:
        print(f"SKIP: {e}")                # exit 77: Chromium is missing or cannot start here
"""
import contextlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib


class Skip(Exception):
    """Chromium is not installed or cannot start here; the message says which."""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def run(binary: str, profile: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--enable-logging=stderr", "--v=0",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def png_nonblank(path: str) -> tuple[int, int, int]:
    """(width, height, distinct byte values of the pixel data): blank pages have very few."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    pixels = zlib.decompress(idat)
    return w, h, len(set(pixels[: 4 * w * min(h, 900)]))


class Page:
    """One page in one Chromium profile; dom and stderr are its first --dump-dom."""

    def __init__(self, binary: str, profile: str, url: str, first: subprocess.CompletedProcess):
        self.binary, self.profile, self.url = binary, profile, url
        self.dom, self.stderr = first.stdout, first.stderr

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return run(self.binary, self.profile, *args)

    def screenshot(self, shot: str, width: int, height: int):
        """(the Chromium run, png_nonblank(shot) or None when no screenshot was written)."""
        s = self.run(f"--screenshot={shot}", f"--window-size={width},{height}",
                     "--hide-scrollbars", self.url)
        if s.returncode != 0 or not os.path.exists(shot):
            return s, None
        return s, png_nonblank(shot)

    def common_problems(self, shot: str, width: int, height: int) -> list[str]:
        """What every report page must not do: reference the network, or render blank (a
        width x height screenshot at shot with fewer than 16 distinct values)."""
        fails = []
        if re.search(r'(src|href)="(https?:)?//', self.dom):
            fails.append("the page references the network")
        s, png = self.screenshot(shot, width, height)
        if png is None:
            fails.append(f"screenshot failed (exit {s.returncode}): {s.stderr[-300:]}")
        else:
            w, h, distinct = png
            if (w, h) != (width, height) or distinct < 16:
                fails.append(f"screenshot {w}x{h} with {distinct} distinct values: blank?")
        return fails


@contextlib.contextmanager
def open_page(path: str):
    """The page at path, dumped once; Skip when Chromium is missing or cannot render it."""
    binary = chromium()
    if not binary:
        raise Skip("chromium is not installed (scripts/setup.sh installs Debian's chromium)")
    url = "file://" + os.path.abspath(path)
    with tempfile.TemporaryDirectory() as profile:
        p = run(binary, profile, "--dump-dom", url)
        if p.returncode != 0 or "<html" not in p.stdout:
            raise Skip(f"chromium cannot run here (exit {p.returncode}): {p.stderr[-400:]}")
        yield Page(binary, profile, url, p)
