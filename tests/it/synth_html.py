#!/usr/bin/env python3
"""tests/it/synth_html.py - the synth HTML report in headless Chromium (standard library only).

    python3 tests/it/synth_html.py REPORT.html ACCEPTED SHOT.png

Fails on console messages, a reference to the network, a missing table (filters, depth,
runtime, operators), a summary that does not say ACCEPTED tasks were accepted, depth bars that
do not add up to ACCEPTED, or a blank screenshot. Exit 77 (skip) with the reason when Chromium
is missing or cannot start here (headless.py).
"""
import re
import sys

from headless import Skip, open_page


def main() -> int:
    page, accepted, shot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        with open_page(page) as chrome:
            fails = check(chrome, accepted, shot)
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    if fails:
        print("FAIL: " + "; ".join(fails))
        return 1
    print(f"ok the synth HTML report renders in Chromium ({accepted} accepted)")
    return 0


def check(chrome, accepted: int, shot: str) -> list[str]:
    dom, fails = chrome.dom, []
    if any(":CONSOLE" in line for line in chrome.stderr.splitlines()):
        fails.append("console messages")
    for table in ("filters", "depth", "runtime", "ops"):
        if not re.search(rf'<table id="{table}"', dom):
            fails.append(f"table {table} missing")
    if not re.search(rf'<p id="summary">\d+ candidates, {accepted} accepted', dom):
        fails.append(f"the summary does not say {accepted} accepted")
    depth = re.search(r'<table id="depth">(.*?)</table>', dom, re.S)
    counts = [int(n) for n in re.findall(r'<td class="n">(\d+)</td>', depth.group(1))] \
        if depth else []
    if sum(counts) != accepted:
        fails.append(f"depth rows add up to {sum(counts)}, not {accepted}")
    fails += chrome.common_problems(shot, 1000, 1200)
    return fails


if __name__ == "__main__":
    sys.exit(main())
