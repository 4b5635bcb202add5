#!/usr/bin/env python3
"""Regenerate the tables of docs/formats.md from python/tiers/registry.py:
the document kinds, the native tools and the libtiers error codes.

    scripts/gen-docs.py          # rewrite the generated parts in place
    scripts/gen-docs.py --check  # exit 1 (and say which) when they differ

Each table sits between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->``; everything else in the file is kept.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from tiers import registry  # noqa: E402

FORMATS = ROOT / "docs" / "formats.md"


def kinds_table() -> str:
    rows = ["| schema | what it holds | written by | shown by | page |", "|---|---|---|---|---|"]
    for k in registry.KINDS.values():
        page = f"[{k.page}]({k.page})" if k.page else "below" if k.kind == "survey" else "-"
        rows.append(f"| `{k.schema}` | {k.title} | `{k.written_by}` | {k.rendered_by} | {page} |")
    return "\n".join(rows)


def tools_table() -> str:
    rows = ["| program | what it does | prints | under mpirun |", "|---|---|---|---|"]
    for t in registry.TOOLS.values():
        prints = f"`tiers.{t.prints}/1`" if t.prints else "-"
        rows.append(f"| `{t.name}` | {t.purpose} | {prints} | {'yes' if t.mpi else 'no'} |")
    return "\n".join(rows)


def errors_table() -> str:
    header = ROOT / "native" / "include" / "tiers" / "error.h"
    rows = ["| code | name | meaning |", "|---|---|---|"]
    for e in registry.error_codes(header):
        rows.append(f"| {e['code']} | `{e['name']}` | {e['meaning']} |")
    return "\n".join(rows)


TABLES = {"kinds": kinds_table, "tools": tools_table, "errors": errors_table}


def render(text: str) -> str:
    """Return ``text`` with every generated block replaced by its table."""
    for name, make in TABLES.items():
        pat = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end generated: {name} -->)",
                         re.S)
        if not pat.search(text):
            raise SystemExit(f"gen-docs: no '<!-- generated: {name} -->' block in {FORMATS}")
        text = pat.sub(lambda m: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only say whether the file is current")
    args = ap.parse_args()
    old = FORMATS.read_text(encoding="utf-8")
    new = render(old)
    if args.check:
        if new != old:
            print(f"gen-docs: {FORMATS.relative_to(ROOT)} is out of date: run scripts/gen-docs.py",
                  file=sys.stderr)
            return 1
        return 0
    if new != old:
        FORMATS.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
