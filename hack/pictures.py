#!/usr/bin/env python3
"""The pictures of the docs site, drawn as SVG into docs/src/pictures/ (no network, no packages).

  hack/pictures.py write   draw them all
  hack/pictures.py check   fail when a picture differs from what this script draws (make check)

The timelines are drawn from the steps below, each named as the pages describe them; the rollout
from the samples hack/record-rollout.py recorded (docs/src/pictures/data/rollout-kwok.csv).
"""

import csv
import html
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


PICTURES = {
    "install-window.svg": install_window,
    "migration.svg": migration,
    "hot-upgrade.svg": hot_upgrade,
    "cert-rotation.svg": cert_rotation,
    "ownership.svg": ownership,
    "rollout.svg": rollout,
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
