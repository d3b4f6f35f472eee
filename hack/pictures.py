#!/usr/bin/env python3
"""The pictures of the docs site, drawn as SVG into docs/src/pictures/ (no network, no packages).

  hack/pictures.py write   draw them all
  hack/pictures.py check   fail when a picture differs from what this script draws (make check)

The timelines are drawn from the steps below, each named as the pages describe them; the rollout
from the samples hack/record-rollout.py recorded (docs/src/pictures/data/rollout-kwok.csv); the
dashboard from the chart's Grafana JSON (charts/sidecarset-operator/dashboards/) and what
hack/record-dashboard.py recorded of its queries (docs/src/pictures/data/dashboard.json).
"""

import csv
import datetime
import html
import json
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "docs/src/pictures")

COLORS = {
    "ours": "#2f6fbf", "kruise": "#c0641c", "warn": "#c23b3b", "ok": "#2e8b57",
    "idle": "#9aa5b1", "note": "#6b4fa0",
}
FONT = "font-family='system-ui, -apple-system, Segoe UI, sans-serif'"


def esc(s):
    return html.escape(s, quote=True)


def svg(width, height, body, title):
    return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' "
            f"width='{width}' height='{height}' role='img' aria-label='{esc(title)}' {FONT}>\n"
            f"<title>{esc(title)}</title>\n"
            f"<rect width='{width}' height='{height}' fill='#ffffff'/>\n{body}</svg>\n")


def timeline(title, steps, lanes, width=900):
    """steps: the labels of the time axis, one column each; lanes: (name, [(from, to, label,
    color)]) with from/to as column indexes (to exclusive)."""
    left, top, lane_h, col_w = 190, 56, 38, (width - 210) / len(steps)
    height = top + lane_h * len(lanes) + 30 + 16 * max(len(s.split("\n")) for s in steps)
    out = [f"<text x='12' y='26' font-size='17' font-weight='600'>{esc(title)}</text>"]
    for i in range(len(steps) + 1):
        x = left + i * col_w
        out.append(f"<line x1='{x:.0f}' y1='{top - 8}' x2='{x:.0f}' y2='{top + lane_h * len(lanes)}' "
                   f"stroke='#d8dee4' stroke-dasharray='3 3'/>")
    for j, (name, segs) in enumerate(lanes):
        y = top + j * lane_h
        out.append(f"<text x='{left - 10}' y='{y + 23}' font-size='13' text-anchor='end'>{esc(name)}</text>")
        for a, b, label, color in segs:
            x = left + a * col_w + 3
            w = (b - a) * col_w - 6
            out.append(f"<rect x='{x:.0f}' y='{y + 6}' width='{w:.0f}' height='{lane_h - 12}' rx='5' "
                       f"fill='{COLORS[color]}' fill-opacity='0.88'/>")
            out.append(f"<text x='{x + w / 2:.0f}' y='{y + 24}' font-size='12' fill='#fff' "
                       f"text-anchor='middle'>{esc(label)}</text>")
    y0 = top + lane_h * len(lanes) + 20
    for i, s in enumerate(steps):
        x = left + (i + 0.5) * col_w
        for k, line in enumerate(s.split("\n")):
            out.append(f"<text x='{x:.0f}' y='{y0 + 15 * k}' font-size='11.5' fill='#444' "
                       f"text-anchor='middle'>{esc(line)}</text>")
    return svg(width, int(height), "\n".join(out) + "\n", title)


def install_window():
    steps = ["helm install:\nCRD, RBAC, Service,\nwebhook configs", "pods start,\ncertificate made",
             "caBundle written,\n/readyz ok", "pods admitted\nwith sidecars", "a replica down\n(upgrade, drain)"]
    lanes = [
        ("webhook configs", [(0, 2, "registered, caBundle empty", "idle"), (2, 5, "caBundle trusts the served certificate", "ok")]),
        ("operator replicas", [(0, 1, "none", "idle"), (1, 2, "starting", "note"), (2, 4, "2 ready", "ours"), (4, 5, "1 ready (PDB)", "ours")]),
        ("selected pod, Fail", [(0, 2, "refused, retried by its controller", "warn"), (2, 5, "created with its sidecars", "ok")]),
        ("selected pod, Ignore", [(0, 2, "created WITHOUT sidecars", "warn"), (2, 5, "created with its sidecars", "ok")]),
        ("unselected pod", [(0, 5, "never sent to the webhook (match conditions)", "idle")]),
    ]
    return timeline("The install window and the failure policy", steps, lanes)


def migration():
    steps = ["before", "plan\n(dry run)", "step 1 --apply:\nbackup", "helm install\ncoexistence\n=true",
             "step 2 --apply:\nOpenKruise\nremoved", "helm upgrade\ncoexistence\n=false"]
    lanes = [
        ("OpenKruise", [(0, 4, "injects, reconciles, converts", "kruise")]),
        ("sidecarset-operator", [(3, 4, "webhook, fail open", "idle"), (4, 6, "injects, reconciles, converts", "ours")]),
        ("SidecarSets, pods", [(0, 6, "kept as they are: no re-creation, same hashes and revisions", "ok")]),
        ("backup file", [(2, 6, "every SidecarSet, revision, Helm record", "note")]),
        ("rolling back", [(0, 3, "nothing to undo", "idle"), (3, 6, "install OpenKruise, uninstall ours, restore", "note")]),
    ]
    return timeline("Migrating from OpenKruise over time", steps, lanes, width=1000)


def hot_upgrade():
    steps = ["injected", "new image\ninto the idle one", "new one runs,\nhands over", "pod ready:\nold one reset", "next upgrade"]
    lanes = [
        ("proxy-1", [(0, 2, "v1, working", "ours"), (2, 3, "v1, handing over", "note"), (3, 4, "empty image", "idle"), (4, 5, "v3, working", "ours")]),
        ("proxy-2", [(0, 1, "empty image", "idle"), (1, 2, "v2, starting", "note"), (2, 4, "v2, working", "ours"), (4, 5, "handing over", "note")]),
        ("pod counts against", [(1, 4, "maxUnavailable until ready and reset", "warn")]),
    ]
    return timeline("HotUpgrade: the hand-over between the two containers", steps, lanes)


def cert_rotation():
    steps = ["CA 1 serving", "CA 2 made:\nbundle = CA 1 + CA 2", "every bundle\nhas CA 2", "leaf of CA 2\nserved", "overlap over:\nbundle = CA 2"]
    lanes = [
        ("caBundle", [(0, 1, "CA 1", "ours"), (1, 4, "CA 1 + CA 2", "note"), (4, 5, "CA 2", "ours")]),
        ("served leaf", [(0, 3, "signed by CA 1", "ours"), (3, 5, "signed by CA 2", "ours")]),
        ("admissions", [(0, 5, "none fails: the bundle always trusts the served leaf", "ok")]),
    ]
    return timeline("Certificate rotation (self mode): a CA overlap, no failed admission", steps, lanes)


def ownership():
    rows = [
        ("CRD (crds/)", "Helm installs it once; you apply upgrades", "OLM, with the bundle"),
        ("Deployment, RBAC, Service", "Helm", "OLM (from the CSV)"),
        ("webhook configurations", "Helm (no caBundle rendered)", "OLM (random name suffix)"),
        ("caBundle", "the operator, or cert-manager", "OLM"),
        ("serving certificate", "the operator's Secret, or cert-manager", "OLM's Secret, watched by the operator"),
        ("pod match condition", "the operator", "the operator (written back within a minute)"),
        ("CRD conversion settings", "the operator", "OLM"),
        ("SidecarSets, pods", "you; the operator writes status", "you; the operator writes status"),
    ]
    width, top, row_h = 900, 70, 30
    cols = [(12, "object"), (260, "with Helm"), (590, "with OLM")]
    out = ["<text x='12' y='26' font-size='17' font-weight='600'>Who owns what: Helm or OLM</text>"]
    for x, h in cols:
        out.append(f"<text x='{x}' y='{top - 14}' font-size='13' font-weight='600'>{esc(h)}</text>")
    for i, row in enumerate(rows):
        y = top + i * row_h
        if i % 2 == 0:
            out.append(f"<rect x='6' y='{y - 2}' width='{width - 12}' height='{row_h}' fill='#f2f5f8'/>")
        for (x, _), cell in zip(cols, row):
            color = COLORS["ours"] if "operator" in cell else ("#222" if x == 12 else "#444")
            out.append(f"<text x='{x}' y='{y + 18}' font-size='12.5' fill='{color}'>{esc(cell)}</text>")
    return svg(width, top + row_h * len(rows) + 14, "\n".join(out) + "\n", "Who owns what: Helm or OLM")


def rollout():
    path = os.path.join(OUT, "data/rollout-kwok.csv")
    with open(path) as f:
        lines = f.read().splitlines()
    source = lines[0].lstrip("# ")
    rows = [(float(r["seconds"]), int(r["updated"]), int(r["ready"]), int(r["total"]))
            for r in csv.DictReader(l for l in lines if not l.startswith("#"))]
    width, height, left, top, right, bottom = 900, 410, 70, 50, 30, 90
    tmax = max(r[0] for r in rows)
    total = max(r[3] for r in rows)
    px = lambda t: left + (width - left - right) * t / tmax
    py = lambda n: top + (height - top - bottom) * (1 - n / total)
    title = f"A rollout of {total} pods, recorded (maxUnavailable 10 %)"
    out = [f"<text x='12' y='26' font-size='17' font-weight='600'>{esc(title)}</text>"]
    for k in range(0, 5):
        n = total * k / 4
        out.append(f"<line x1='{left}' y1='{py(n):.1f}' x2='{width - right}' y2='{py(n):.1f}' stroke='#e3e8ee'/>")
        out.append(f"<text x='{left - 8}' y='{py(n) + 4:.1f}' font-size='11' text-anchor='end'>{n:.0f}</text>")
    step = 5 if tmax <= 60 else 10 if tmax <= 150 else 30
    t = 0
    while t <= tmax:
        out.append(f"<text x='{px(t):.1f}' y='{height - bottom + 18}' font-size='11' text-anchor='middle'>{t}</text>")
        t += step
    out.append(f"<text x='{(left + width - right) / 2}' y='{height - bottom + 38}' font-size='12' "
               f"text-anchor='middle'>seconds after the SidecarSet's image changed</text>")
    out.append(f"<text x='18' y='{(top + height - bottom) / 2}' font-size='12' text-anchor='middle' "
               f"transform='rotate(-90 18 {(top + height - bottom) / 2})'>pods</text>")
    for idx, name, color in ((1, "updated (new image in the spec)", COLORS["note"]),
                             (2, "updated and Ready", COLORS["ok"])):
        pts = " ".join(f"{px(r[0]):.1f},{py(r[idx]):.1f}" for r in rows)
        out.append(f"<polyline points='{pts}' fill='none' stroke='{color}' stroke-width='2.5'/>")
    for k, (name, color) in enumerate((("updated (new image in the spec)", COLORS["note"]),
                                       ("updated and Ready", COLORS["ok"]))):
        out.append(f"<rect x='{left + 10}' y='{top + 8 + 18 * k}' width='14' height='4' fill='{color}'/>")
        out.append(f"<text x='{left + 30}' y='{top + 14 + 18 * k}' font-size='12'>{esc(name)}</text>")
    words, caption = source.split(" "), [""]
    for w in words:  # the data's source, wrapped at 130 characters
        if len(caption[-1]) + len(w) > 130:
            caption.append("")
        caption[-1] += ("" if not caption[-1] else " ") + w
    for k, line in enumerate(caption[-2:] if len(caption) > 2 else caption):
        out.append(f"<text x='12' y='{height - 26 + 14 * k}' font-size='10.5' fill='#666'>{esc(line)}</text>")
    return svg(width, height, "\n".join(out) + "\n", title)


# The dashboard: the chart's Grafana JSON laid out as Grafana lays it out (24 columns, rows of
# gridPos units), each panel drawn from what hack/record-dashboard.py recorded of its targets.
DASHBOARD = os.path.join(REPO, "charts/sidecarset-operator/dashboards/sidecarset-operator.json")
# Grafana's classic palette, in the order it gives series their colours
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0",
           "#37872d", "#fade2a", "#447ebc", "#c15c17", "#890f02", "#0a437c", "#6d1f62", "#584477"]
GRAFANA_COLORS = {"green": "#56a64b", "red": "#e02f44", "orange": "#ff9830", "yellow": "#f2cc0c",
                  "blue": "#3274d9", "text": "#24292e"}
# A panel without thresholds gets Grafana's defaults: green, red from 80.
DEFAULT_THRESHOLDS = [{"color": "green", "value": None}, {"color": "red", "value": 80}]


def fmt_number(v, decimals=None):
    if decimals is None:
        a = abs(v)
        decimals = 0 if a >= 100 or v == int(v) else 1 if a >= 10 else 2 if a >= 1 else 3
    return f"{v:.{decimals}f}"


def fmt_unit(v, unit, decimals=None):
    """A value as Grafana writes it in this unit (short, s, reqps, ops)."""
    if v is None:
        return "-"
    if unit == "s":
        a = abs(v)
        if a == 0:
            return "0 s"
        for limit, div, name in ((1e-3, 1e-6, "µs"), (1, 1e-3, "ms"), (60, 1, "s"), (3600, 60, "min"),
                                 (86400, 3600, "hour"), (604800, 86400, "day"), (31536000, 604800, "week")):
            if a < limit:
                return f"{fmt_number(v / div, decimals)} {name}"
        return f"{fmt_number(v / 31536000, decimals)} year"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    for div, name in ((1e9, " Bil"), (1e6, " Mil"), (1e3, " K")):
        if abs(v) >= div:
            return f"{fmt_number(v / div, decimals)}{name}{suffix}"
    return f"{fmt_number(v, decimals)}{suffix}"


def nice_ticks(lo, hi, n=4):
    """About n ticks at 1, 2 or 5 times a power of ten covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = [first + k * step for k in range(int(math.ceil((hi - first) / step + 1e-9)) + 1)]
    return ticks, step


def reduce(values, calc):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    if calc == "lastNotNull":
        return vals[-1]
    if calc in ("max", "min"):
        return max(vals) if calc == "max" else min(vals)
    if calc == "mean":
        return sum(vals) / len(vals)
    sys.exit(f"hack/pictures.py cannot reduce a stat panel by {calc!r}: add it to reduce()")


def threshold_color(v, panel):
    d = panel.get("fieldConfig", {}).get("defaults", {})
    if d.get("color", {}).get("mode") == "fixed":
        return GRAFANA_COLORS.get(d["color"].get("fixedColor"), d["color"].get("fixedColor"))
    color = None
    for s in d.get("thresholds", {}).get("steps", DEFAULT_THRESHOLDS):
        if s["value"] is None or (v is not None and v >= s["value"]):
            color = s["color"]
    return GRAFANA_COLORS.get(color, color)


def panel_frame(x, y, w, h, title):
    return [f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' rx='3' fill='#ffffff' stroke='#d8dbe0'/>",
            f"<text x='{x + 8:.1f}' y='{y + 17:.1f}' font-size='12.5' font-weight='600' fill='#24292e'>{esc(title)}</text>"]


def draw_stat(panel, rec, x, y, w, h):
    out = panel_frame(x, y, w, h, panel["title"])
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    calc = panel.get("options", {}).get("reduceOptions", {}).get("calcs", ["lastNotNull"])[0]
    values = [(s["legend"], reduce(s["values"], calc)) for t in rec["targets"] for s in t["series"]]
    if not values:
        out.append(f"<text x='{x + w / 2:.1f}' y='{y + h / 2 + 8:.1f}' font-size='14' fill='#8e8e8e' "
                   f"text-anchor='middle'>No data</text>")
        return out
    cw = w / len(values)
    size = min(30, (h - 30) * 0.55, cw / 5)
    for i, (name, v) in enumerate(values):
        cx = x + cw * (i + 0.5)
        if len(values) > 1:
            out.append(f"<text x='{cx:.1f}' y='{y + h / 2 - size / 2:.1f}' font-size='11' fill='#555' "
                       f"text-anchor='middle'>{esc(name)}</text>")
        out.append(f"<text x='{cx:.1f}' y='{y + h / 2 + size * 0.6 + (6 if len(values) > 1 else 4):.1f}' "
                   f"font-size='{size:.0f}' font-weight='600' fill='{threshold_color(v, panel)}' "
                   f"text-anchor='middle'>{esc(fmt_unit(v, unit))}</text>")
    return out


def legend_rows(names, width):
    rows, cur = [[]], 0
    for i, n in enumerate(names):
        wn = 24 + 6.2 * len(n)
        if cur + wn > width and rows[-1]:
            rows.append([])
            cur = 0
        rows[-1].append((i, n, cur))
        cur += wn
    return rows


def field_config(panel, ref_id):
    """(unit, axis) of a target's series: the panel's defaults, then its overrides by refId."""
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    axis = "left"
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o["matcher"]["id"] != "byFrameRefID":
            sys.exit(f"hack/pictures.py cannot match overrides by {o['matcher']['id']} ({panel['title']!r}): add it")
        if o["matcher"]["options"] == ref_id:
            for prop in o["properties"]:
                if prop["id"] == "unit":
                    unit = prop["value"]
                elif prop["id"] == "custom.axisPlacement":
                    axis = prop["value"]
    return unit, axis


def draw_axis(out, series, unit, side, box):
    """Grid lines (left axis only) and tick labels of one y axis; returns its value -> y."""
    left, top, right, bottom = box
    vals = [v for s in series for v in s["values"] if v is not None]
    ticks, tstep = nice_ticks(min(0, min(vals)), max(vals))
    lo, hi = ticks[0], ticks[-1]
    py = lambda v: bottom - (bottom - top) * (v - lo) / (hi - lo)
    decimals = max(0, -int(math.floor(math.log10(tstep)))) if unit != "s" else None
    for t in ticks:
        if side == "left":
            out.append(f"<line x1='{left:.1f}' y1='{py(t):.1f}' x2='{right:.1f}' y2='{py(t):.1f}' stroke='#eceef1'/>")
        tx, anchor = (left - 5, "end") if side == "left" else (right + 5, "start")
        out.append(f"<text x='{tx:.1f}' y='{py(t) + 3.5:.1f}' font-size='9.5' fill='#666' "
                   f"text-anchor='{anchor}'>{esc(fmt_unit(t, unit, decimals))}</text>")
    return py


def draw_time_axis(out, meta, n, px, box):
    """Clock labels under the plot and the scenario's steps as dashed numbered lines."""
    left, top, right, bottom = box
    start, step = meta["start"], meta["step_seconds"]
    every = next(e for e in (10, 15, 30, 60, 120, 300, 600, 1800, 3600) if (right - left) * e / (n * step) >= 75)
    for k in range(n + 1):
        t = start + k * step
        if t % every == 0:
            clock = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S")
            out.append(f"<text x='{px(k):.1f}' y='{bottom + 13:.1f}' font-size='9.5' fill='#666' "
                       f"text-anchor='middle'>{clock}</text>")
    for i, s in enumerate(meta["scenario"], 1):
        k = s["at"] / step
        if 0 <= k <= n:
            out.append(f"<line x1='{px(k):.1f}' y1='{top:.1f}' x2='{px(k):.1f}' y2='{bottom:.1f}' "
                       f"stroke='#7c6fc1' stroke-opacity='0.45' stroke-dasharray='2 3'/>")
            out.append(f"<text x='{px(k) + 2:.1f}' y='{top + 8:.1f}' font-size='8.5' fill='#7c6fc1'>{i}</text>")


def draw_line(out, values, px, py, color):
    """One series: a polyline per run of values without a gap (a dot for a lone value)."""
    segs, cur = [], []
    for k, v in enumerate(values):
        if v is None:
            segs.append(cur)
            cur = []
        else:
            cur.append(f"{px(k):.1f},{py(v):.1f}")
    segs.append(cur)
    for seg in segs:
        if len(seg) == 1:
            cx, cy = seg[0].split(",")
            out.append(f"<circle cx='{cx}' cy='{cy}' r='1.5' fill='{color}'/>")
        elif seg:
            out.append(f"<polyline points='{' '.join(seg)}' fill='none' stroke='{color}' stroke-width='1.5'/>")


def draw_timeseries(panel, rec, meta, x, y, w, h):
    out = panel_frame(x, y, w, h, panel["title"])
    series = [dict(s, axis=field_config(panel, t["refId"])) for t in rec["targets"] for s in t["series"]]
    n = (meta["end"] - meta["start"]) // meta["step_seconds"]
    rows = legend_rows([s["legend"] for s in series], w - 16)
    shown = rows[:3]
    right_axis = [s for s in series if s["axis"][1] == "right" and any(v is not None for v in s["values"])]
    box = (x + 62, y + 28, x + w - (62 if right_axis else 12), y + h - 22 - 15 * len(shown))
    left, top, right, bottom = box
    if not any(v is not None for s in series for v in s["values"]):
        out.append(f"<text x='{x + w / 2:.1f}' y='{y + h / 2 + 5:.1f}' font-size='14' fill='#8e8e8e' "
                   f"text-anchor='middle'>No data</text>")
        return out
    px = lambda k: left + (right - left) * k / n
    axes = {}
    for side in ("left", "right"):
        on = [s for s in series if s["axis"][1] == side and any(v is not None for v in s["values"])]
        if on:
            axes[side] = draw_axis(out, on, on[0]["axis"][0], side, box)
    draw_time_axis(out, meta, n, px, box)
    for i, s in enumerate(series):
        if s["axis"][1] in axes:
            draw_line(out, s["values"], px, axes[s["axis"][1]], PALETTE[i % len(PALETTE)])
    for r, row in enumerate(shown):
        ly = bottom + 28 + 15 * r
        for i, name, dx in row:
            more = sum(len(rr) for rr in rows[len(shown):])
            label = f"{name} (+{more} more)" if more and r == len(shown) - 1 and i == row[-1][0] else name
            out.append(f"<rect x='{x + 10 + dx:.1f}' y='{ly - 4:.1f}' width='14' height='3' fill='{PALETTE[i % len(PALETTE)]}'/>")
            out.append(f"<text x='{x + 28 + dx:.1f}' y='{ly:.1f}' font-size='10.5' fill='#333'>{esc(label)}</text>")
    return out

def wrap(text, width):
    lines = [""]
    for word in text.split(" "):
        if lines[-1] and len(lines[-1]) + len(word) + 1 > width:
            lines.append("")
        lines[-1] += ("" if not lines[-1] else " ") + word
    return lines


def dashboard():
    with open(DASHBOARD) as f:
        board = json.load(f)
    with open(os.path.join(OUT, "data/dashboard.json")) as f:
        data = json.load(f)
    meta, recorded = data["recorded"], {p["id"]: p for p in data["panels"]}
    width, margin, unit_h, top = 1200, 10, 30, 64
    col_w = (width - 2 * margin) / 24
    clock = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%H:%M:%S")
    out = [f"<rect width='{width}' height='100%' fill='#f4f5f5'/>",
           f"<text x='{margin}' y='26' font-size='17' font-weight='600'>{esc(board['title'])}</text>",
           f"<text x='{margin}' y='48' font-size='11.5' fill='#444'>Namespace: All {esc(meta['variables']['$namespace'])} · "
           f"{esc(meta['date'])} {clock(meta['start'])} to {clock(meta['end'])} UTC · "
           f"$__rate_interval {esc(meta['variables']['$__rate_interval'])}</text>"]
    bottom_y = 0
    for p in board["panels"]:
        g = p["gridPos"]
        x, y = margin + g["x"] * col_w, top + g["y"] * unit_h
        w, h = g["w"] * col_w - 8, g["h"] * unit_h - 8
        bottom_y = max(bottom_y, y + h)
        if p["type"] == "row":
            out.append(f"<text x='{x + 2:.1f}' y='{y + 19:.1f}' font-size='14' font-weight='600' fill='#24292e'>"
                       f"{esc(p['title'])}</text>")
        elif p["id"] not in recorded:
            sys.exit(f"panel {p['title']!r} of the dashboard was not recorded: run hack/record-dashboard.py")
        elif p["type"] == "stat":
            out += draw_stat(p, recorded[p["id"]], x, y, w, h)
        elif p["type"] == "timeseries":
            out += draw_timeseries(p, recorded[p["id"]], meta, x, y, w, h)
        else:
            sys.exit(f"hack/pictures.py cannot draw a {p['type']} panel ({p['title']!r}): add it")
    y = bottom_y + 24
    out.append(f"<text x='{margin}' y='{y}' font-size='12' font-weight='600'>What happened (the dashed lines)</text>")
    steps = meta["scenario"]
    half = len(steps) if max(len(s["what"]) for s in steps) > 80 else (len(steps) + 1) // 2
    for i, s in enumerate(steps):
        cx, cy = margin + (i // half) * (width / 2), y + 17 + 15 * (i % half)
        out.append(f"<text x='{cx}' y='{cy}' font-size='11' fill='#333'><tspan fill='#7c6fc1' font-weight='600'>"
                   f"{i + 1}</tspan> {clock(meta['start'] + s['at'])} {esc(s['what'])}</text>")
    y += 17 + 15 * half + 8
    source = (f"Recorded by {meta['by']} on {meta['date']} (commit {meta['commit']}): {meta['cluster']}, the operator as "
              f"{meta['operator']}; {meta['prometheus']} scraping it every {meta['scrape_interval_seconds']} s, "
              f"the targets evaluated by query_range every {meta['step_seconds']} s. Redraw: hack/pictures.py write.")
    for k, line in enumerate(wrap(source, 190)):
        out.append(f"<text x='{margin}' y='{y + 14 * k}' font-size='10.5' fill='#666'>{esc(line)}</text>")
    height = int(y + 14 * len(wrap(source, 190)) + 8)
    return svg(width, height, "\n".join(out) + "\n", f"The dashboard ({board['title']}), recorded")


PICTURES = {
    "install-window.svg": install_window,
    "migration.svg": migration,
    "hot-upgrade.svg": hot_upgrade,
    "cert-rotation.svg": cert_rotation,
    "ownership.svg": ownership,
    "rollout.svg": rollout,
    "dashboard.svg": dashboard,
}


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "write"
    stale = []
    for name, draw in PICTURES.items():
        path = os.path.join(OUT, name)
        text = draw()
        if mode == "write":
            os.makedirs(OUT, exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {os.path.relpath(path, REPO)}")
        elif mode == "check":
            if not os.path.exists(path) or open(path).read() != text:
                stale.append(os.path.relpath(path, REPO))
        else:
            sys.exit("usage: hack/pictures.py [write|check]")
    if stale:
        sys.exit(f"stale pictures (run hack/pictures.py write): {', '.join(stale)}")


if __name__ == "__main__":
    main()
