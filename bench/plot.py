#!/usr/bin/env python3
"""Draws bench/run.sh's figures as SVG from the raw JSON of a run.

    python3 bench/plot.py RAW_DIR OUT_DIR           writes OUT_DIR/*.svg
    python3 bench/plot.py --check RAW_DIR OUT_DIR   fails if a figure in OUT_DIR differs
                                                    from what RAW_DIR gives (CI runs it on
                                                    the saved run that docs/performance.md
                                                    shows)

RAW_DIR is the `raw/` directory bench/run.sh writes beside its report: one rnic-perf JSON
report per table (`--save`), and `scaling.jsonl`. The figures:

- bandwidth-by-size.svg: RDMA WRITE bandwidth by message size, with the memcpy baseline
  measured in the same run (two functions of one rnicd);
- message-rate-by-size.svg: the same run's messages per second by size;
- rate-by-qps.svg: 64-byte RDMA WRITE message rate by number of QPs;
- scaling-by-pairs.svg: 64 KiB RDMA WRITE bandwidth of N pairs at once, one rnicd against
  N rnicd, with N memcpy threads.

Plain SVG 1.1, generic font families only, written deterministically (numbers rounded), so
that a figure can be compared byte for byte.
"""

import json
import math
import sys
from html import escape
from pathlib import Path

WIDTH, HEIGHT = 640, 380
LEFT, RIGHT, TOP, BOTTOM = 80, 170, 40, 60
COLORS = ["#1f5fa8", "#c2461b", "#2a8a3e", "#7a3e9d"]
FAMILY = 'font-family="sans-serif"'
SANS = f'{FAMILY} font-size="12"'


def size_label(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def number(v):
    return f"{v:.0f}" if v >= 10 or v == 0 else f"{v:.2g}"


def chart(title, xlabel, ylabel, series, log_x=True, log_y=False, xticks=None, xfmt=str):
    """A line chart: `series` is [(name, [(x, y), ...], dashed)]; returns the SVG text."""
    xs = [x for _, pts, _ in series for x, _ in pts]
    ys = [y for _, pts, _ in series for _, y in pts if y > 0]
    fx = (lambda v: math.log2(v)) if log_x else (lambda v: v)
    fy = (lambda v: math.log10(v)) if log_y else (lambda v: v)
    x0, x1 = fx(min(xs)), fx(max(xs))
    if log_y:
        y0, y1 = math.floor(fy(min(ys))), math.ceil(fy(max(ys)))
    else:
        y0, y1 = 0.0, max(ys) * 1.1
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(v):
        return LEFT + (fx(v) - x0) / ((x1 - x0) or 1) * pw

    def py(v):
        return TOP + ph - (fy(v) - y0) / ((y1 - y0) or 1) * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{WIDTH / 2:.0f}" y="22" {FAMILY} font-size="14" text-anchor="middle" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333333"/>',
    ]
    for x in xticks or sorted(set(xs)):
        X = px(x)
        out.append(f'<line x1="{X:.1f}" y1="{TOP}" x2="{X:.1f}" y2="{TOP + ph}" stroke="#e4e4e4"/>')
        out.append(
            f'<text x="{X:.1f}" y="{TOP + ph + 16}" {SANS} text-anchor="middle">'
            f"{escape(xfmt(x))}</text>"
        )
    if log_y:
        yt = [10.0**e for e in range(int(y0), int(y1) + 1)]
    else:
        step = 10 ** math.floor(math.log10(y1 / 5)) if y1 > 0 else 1
        for m in (1, 2, 5, 10):
            if y1 / (step * m) <= 6:
                step *= m
                break
        yt = [i * step for i in range(int(y1 / step) + 1)]
    for y in yt:
        Y = py(y) if y > 0 or not log_y else TOP + ph
        out.append(f'<line x1="{LEFT}" y1="{Y:.1f}" x2="{LEFT + pw}" y2="{Y:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{LEFT - 6}" y="{Y + 4:.1f}" {SANS} text-anchor="end">{number(y)}</text>')
    out.append(
        f'<text x="{LEFT + pw / 2:.0f}" y="{HEIGHT - 18}" {SANS} text-anchor="middle">'
        f"{escape(xlabel)}</text>"
    )
    out.append(
        f'<text x="18" y="{TOP + ph / 2:.0f}" {SANS} text-anchor="middle" '
        f'transform="rotate(-90 18 {TOP + ph / 2:.0f})">{escape(ylabel)}</text>'
    )
    for i, (name, pts, dashed) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts if y > 0)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in pts:
            if y > 0:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{color}"/>')
        ly = TOP + 14 + 20 * i
        lx = LEFT + pw + 12
        out.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 22}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 28}" y="{ly}" {SANS}>{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def every_third(rows):
    """Sizes 2, 16, 128, 1 KiB, ...: ticks that leave room for their labels."""
    return [r["bytes"] for r in rows if int(math.log2(r["bytes"])) % 3 == 1]


def load(raw, stem):
    """The report bench/run.sh saved under `stem` (its table's title, every character
    other than a letter or digit made `_`); runs before 2026-11-28 added one more `_`."""
    for name in (f"{stem}.json", f"{stem}_.json"):
        path = raw / name
        if path.exists():
            return json.loads(path.read_text())
    return None


def figures(raw):
    """The figures RAW_DIR has the data for: {file name: SVG text}."""
    out = {}
    sweep = load(raw, "RDMA_WRITE_bandwidth__all_sizes")
    if sweep:
        rows = [r for r in sweep["results"] if r.get("bandwidth")]
        bw = [(r["bytes"], r["bandwidth"]["avg_mib_s"]) for r in rows]
        memcpy = [(r["bytes"], (r.get("baseline") or {}).get("memcpy_mib_s") or 0) for r in rows]
        out["bandwidth-by-size.svg"] = chart(
            "RDMA WRITE bandwidth by message size (one rnicd)",
            "message size",
            "MiB/s (log scale)",
            [("RDMA WRITE", bw, False), ("memcpy", memcpy, True)],
            log_y=True,
            xticks=every_third(rows),
            xfmt=size_label,
        )
        rate = [(r["bytes"], r["bandwidth"]["msg_rate_mpps"]) for r in rows]
        out["message-rate-by-size.svg"] = chart(
            "RDMA WRITE message rate by message size (one rnicd)",
            "message size",
            "million messages/s",
            [("RDMA WRITE", rate, False)],
            xticks=every_third(rows),
            xfmt=size_label,
        )
    qps = []
    for q in (1, 16, 64, 256):
        r = load(raw, f"64_byte_RDMA_WRITE_message_rate__{q}_QPs")
        if r:
            qps.append((q, r["results"][0]["bandwidth"]["msg_rate_mpps"]))
    if len(qps) > 1:
        out["rate-by-qps.svg"] = chart(
            "64-byte RDMA WRITE message rate by QPs (one rnicd)",
            "QPs",
            "million messages/s",
            [("RDMA WRITE", qps, False)],
        )
    scaling = raw / "scaling.jsonl"
    if scaling.exists():
        rows = [json.loads(line) for line in scaling.read_text().splitlines() if line.strip()]
        big = [r for r in rows if r["size"] == 65536]

        def line(setup, key):
            pts = sorted((r["pairs"], r[key] or 0) for r in big if r["setup"] == setup)
            return [(n, v / 1024) for n, v in pts]

        out["scaling-by-pairs.svg"] = chart(
            "64 KiB RDMA WRITE, N pairs at once",
            "pairs",
            "GiB/s, all pairs",
            [
                ("one rnicd", line("one", "mib_s"), False),
                ("N rnicd", line("sep", "mib_s"), False),
                ("N memcpy", line("one", "memcpy_mib_s"), True),
            ],
        )
    return out


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    raw, out = Path(args[0]), Path(args[1])
    drawn = figures(raw)
    if not drawn:
        print(f"plot.py: no rnic-perf results in {raw}", file=sys.stderr)
        return 1
    stale = []
    for name, svg in sorted(drawn.items()):
        path = out / name
        if check:
            if not path.exists() or path.read_text() != svg:
                stale.append(str(path))
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(svg)
            print(f"plot.py: wrote {path}")
    if stale:
        print(
            "plot.py: these figures differ from what the saved results give; run "
            f"`python3 bench/plot.py {raw} {out}` and commit: " + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
