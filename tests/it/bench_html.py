#!/usr/bin/env python3
"""tests/it/bench_html.py - the bench HTML report in headless Chromium (standard library only).

    python3 tests/it/bench_html.py REPORT.html TASKS SHOT.png

Loads the page from file:// (no network is needed or allowed by the page), with Chromium's
console logged; fails on any console message (errors, uncaught exceptions), unless the
rendered DOM holds the metrics table, the three SVG charts with their marks, and TASKS rows in
the task table built by the page's script, and (with #open-all) each task's evaluator report;
then takes a screenshot and checks it is a PNG that
is not blank. Exit 77 (skip) with the reason when Chromium is not installed or cannot start here.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib


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


def main() -> int:
    page, ntasks, shot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    binary = chromium()
    if not binary:
        print("SKIP: chromium is not installed (scripts/setup.sh installs Debian's chromium)")
        return 77
    url = "file://" + os.path.abspath(page)
    with tempfile.TemporaryDirectory() as profile:
        p = run(binary, profile, "--dump-dom", url)
        if p.returncode != 0 or "<html" not in p.stdout:
            print(f"SKIP: chromium cannot run here (exit {p.returncode}): {p.stderr[-400:]}")
            return 77
        fails = []
        console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
        if console:
            fails.append("console messages: " + " | ".join(console[:5]))
        dom = p.stdout
        m = re.search(r'<body[^>]*data-rendered="(\d+)"', dom)
        if not m or int(m.group(1)) != ntasks:
            fails.append(f"the task table script did not render {ntasks} rows "
                         f"(data-rendered={m.group(1) if m else None})")
        rows = len(re.findall(r'<tr class="t"', dom))
        if rows != ntasks:
            fails.append(f"{rows} task rows in the DOM, expected {ntasks}")
        for chart, mark in (("chart-speedup", "<rect"), ("chart-fastp", "<polyline"),
                            ("chart-rewards", "<rect")):
            seg = re.search(rf'<svg[^>]*id="{chart}".*?</svg>', dom, re.S)
            if not seg or mark not in seg.group(0):
                fails.append(f"chart {chart} missing or without {mark}")
        if 'id="metrics"' not in dom or "CUDA Agent (paper" not in dom:
            fails.append("metrics table or the paper's rows missing")
        p2 = run(binary, profile, "--dump-dom", url + "#open-all")
        opened = len(re.findall(r'<pre class="report"', p2.stdout))
        if opened != ntasks:
            fails.append(f"{opened} evaluator reports shown with every row open, expected {ntasks}")
        if any(":CONSOLE" in l for l in p2.stderr.splitlines()):
            fails.append("console messages with every row open")
        if re.search(r'(src|href)="(https?:)?//', dom):
            fails.append("the page references the network")
        s = run(binary, profile, f"--screenshot={shot}", "--window-size=1280,1600",
                "--hide-scrollbars", url)
        if s.returncode != 0 or not os.path.exists(shot):
            fails.append(f"screenshot failed (exit {s.returncode}): {s.stderr[-300:]}")
        else:
            w, h, distinct = png_nonblank(shot)
            if (w, h) != (1280, 1600) or distinct < 16:
                fails.append(f"screenshot {w}x{h} with {distinct} distinct values: blank?")
    for f in fails:
        print("FAIL", f)
    if not fails:
        print("ok the report renders in Chromium: metrics, 3 charts, "
              f"{ntasks} task rows, no console messages; screenshot {shot}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
