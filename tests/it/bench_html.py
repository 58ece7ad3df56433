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
import re
import sys

from headless import Skip, open_page


def main() -> int:
    page, ntasks, shot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        with open_page(page) as chrome:
            fails = check(chrome, ntasks, shot)
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    for f in fails:
        print("FAIL", f)
    if not fails:
        print("ok the report renders in Chromium: metrics, 3 charts, "
              f"{ntasks} task rows, no console messages; screenshot {shot}")
    return 1 if fails else 0


def check(chrome, ntasks: int, shot: str) -> list[str]:
    fails = []
    console = [l for l in chrome.stderr.splitlines() if ":CONSOLE" in l]
    if console:
        fails.append("console messages: " + " | ".join(console[:5]))
    dom = chrome.dom
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
    p2 = chrome.run("--dump-dom", chrome.url + "#open-all")
    opened = len(re.findall(r'<pre class="report"', p2.stdout))
    if opened != ntasks:
        fails.append(f"{opened} evaluator reports shown with every row open, expected {ntasks}")
    if any(":CONSOLE" in l for l in p2.stderr.splitlines()):
        fails.append("console messages with every row open")
    fails += chrome.common_problems(shot, 1280, 1600)
    return fails


if __name__ == "__main__":
    sys.exit(main())
