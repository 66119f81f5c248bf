#!/usr/bin/env python3
"""Draws docs/performance.svg from the tables TPMBenchmarks leaves in a data directory.

    Scripts/plot-benchmarks.py DATA_DIRECTORY docs/performance.svg [caption]

Reads gets-by-item-count.tsv (the store suite) and cold-paths-rm.tsv (the access suite: each
cold path behind a resource manager, as on /dev/tpmrm0, real machines' default); a panel
whose table is missing is drawn empty with a note, so a partial run still renders. Plain SVG, no
plotting library: the script runs wherever python3 does (Scripts/benchmarks.sh calls it).
"""

import csv
import math
import sys
from html import escape

WIDTH, PANEL_HEIGHT, MARGIN = 900, 360, 70
COLORS = ["#4c72b0", "#dd8452", "#c44e52", "#55a868"]


def read_table(path):
    try:
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle, delimiter="\t"))
    except FileNotFoundError:
        return None
    return rows[0], rows[1:]


def text(x, y, content, size=12, anchor="start", weight="normal", rotate=None):
    transform = f' transform="rotate({rotate} {x} {y})"' if rotate is not None else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-weight="{weight}" font-family="sans-serif"{transform}>{escape(content)}</text>'
    )


def log_ticks(low, high):
    """Powers of ten and their 2x and 5x between low and high."""
    ticks = []
    exponent = math.floor(math.log10(low))
    while 10**exponent <= high * 10:
        for factor in (1, 2, 5):
            value = factor * 10**exponent
            if low <= value <= high:
                ticks.append(value)
        exponent += 1
    return ticks


def label(value, unit):
    return f"{value:g} {unit}"


def gets_panel(table, top):
    parts = [text(MARGIN, top + 24, "Item get (32 B) against the number of items in the service", 15, weight="bold")]
    left, right = MARGIN + 10, WIDTH - MARGIN
    plot_top, plot_bottom = top + 50, top + PANEL_HEIGHT - 50
    if table is None:
        parts.append(text(WIDTH / 2, (plot_top + plot_bottom) / 2, "no data: run the store suite", 13, "middle"))
        return parts
    header, rows = table
    points = [(int(r[0]), float(r[1]), float(r[2])) for r in rows]
    xs = [p[0] for p in points]
    x_low, x_high = min(xs) / 2, max(xs) * 2
    y_high = max(p[2] for p in points) * 1.25

    def x_at(value):
        return left + (math.log10(value) - math.log10(x_low)) / (math.log10(x_high) - math.log10(x_low)) * (right - left)

    def y_at(value):
        return plot_bottom - value / y_high * (plot_bottom - plot_top)

    parts.append(f'<line x1="{left}" y1="{plot_bottom}" x2="{right}" y2="{plot_bottom}" stroke="#333"/>')
    parts.append(f'<line x1="{left}" y1="{plot_top}" x2="{left}" y2="{plot_bottom}" stroke="#333"/>')
    step = 10 ** math.floor(math.log10(y_high / 2))
    tick = 0.0
    while tick <= y_high:
        y = y_at(tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(text(left - 6, y + 4, label(tick, "µs"), 11, "end"))
        tick += step
    for value in xs:
        parts.append(text(x_at(value), plot_bottom + 18, f"{value:,}", 11, "middle"))
    parts.append(text((left + right) / 2, plot_bottom + 38, "items in the service (log scale)", 12, "middle"))
    for column, (name, color) in enumerate((("median", COLORS[0]), ("90th percentile", COLORS[1]))):
        coordinates = [(x_at(p[0]), y_at(p[1 + column])) for p in points]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coordinates)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for (x, y), point in zip(coordinates, points):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')
            parts.append(text(x + 6, y - 6, f"{point[1 + column]:.1f} µs", 11))
        parts.append(f'<rect x="{right - 150}" y="{plot_top + column * 18}" width="12" height="12" fill="{color}"/>')
        parts.append(text(right - 132, plot_top + 10 + column * 18, name, 12))
    return parts


def cold_paths_panel(table, top, height):
    parts = [text(MARGIN, top + 24, "Cold paths behind a resource manager under three TPM profiles (milliseconds, log scale)", 15, weight="bold")]
    if table is None:
        parts.append(text(WIDTH / 2, top + height / 2, "no data: run the access suite", 13, "middle"))
        return parts
    header, rows = table
    profiles = header[2:]
    label_width = 300
    left, right = MARGIN + label_width, WIDTH - MARGIN
    plot_top = top + 60
    bar, gap = 12, 14
    values = [float(v) for row in rows for v in row[2:]]
    low, high = max(min(values) / 2, 0.1), max(values) * 2

    def x_at(value):
        return left + (math.log10(max(value, low)) - math.log10(low)) / (math.log10(high) - math.log10(low)) * (right - left)

    group = bar * len(profiles) + gap
    bottom = plot_top + group * len(rows)
    for tick in log_ticks(low, high):
        if str(tick)[0] not in "15":
            continue
        x = x_at(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{plot_top - 6}" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>')
        parts.append(text(x, bottom + 16, label(tick, "ms"), 11, "middle"))
    for index, row in enumerate(rows):
        y = plot_top + index * group
        parts.append(text(left - 8, y + bar * len(profiles) / 2 + 4, f"{row[0]} ({row[1]} commands)", 12, "end"))
        for column, value in enumerate(row[2:]):
            width = x_at(float(value)) - left
            color = COLORS[column % len(COLORS)]
            parts.append(
                f'<rect x="{left}" y="{y + column * bar}" width="{max(width, 1):.1f}" height="{bar - 2}" fill="{color}"/>'
            )
            parts.append(text(left + width + 4, y + column * bar + bar - 3, f"{float(value):.0f} ms", 10))
    for column, name in enumerate(profiles):
        x = left + column * 170
        parts.append(f'<rect x="{x}" y="{top + 36}" width="12" height="12" fill="{COLORS[column % len(COLORS)]}"/>')
        parts.append(text(x + 18, top + 46, name, 12))
    return parts


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: plot-benchmarks.py DATA_DIRECTORY OUTPUT.svg [caption]")
    directory, output = sys.argv[1], sys.argv[2]
    caption = sys.argv[3] if len(sys.argv) > 3 else ""
    gets = read_table(f"{directory}/gets-by-item-count.tsv")
    cold = read_table(f"{directory}/cold-paths-rm.tsv")
    cold_rows = len(cold[1]) if cold else 3
    cold_height = 100 + cold_rows * (12 * (len(cold[0]) - 2 if cold else 3) + 14)
    height = PANEL_HEIGHT + cold_height + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    parts += gets_panel(gets, 0)
    parts += cold_paths_panel(cold, PANEL_HEIGHT, cold_height)
    if caption:
        parts.append(text(MARGIN, height - 14, caption, 11))
    parts.append("</svg>")
    with open(output, "w") as handle:
        handle.write("\n".join(parts) + "\n")
    print(f"plot: wrote {output}")


if __name__ == "__main__":
    main()
