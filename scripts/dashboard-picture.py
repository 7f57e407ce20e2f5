#!/usr/bin/env python3
"""Draws the Grafana dashboard's panels from a Prometheus, with gnuplot: a picture for the
docs where Grafana cannot run (scripts/dashboard-picture.sh runs it after a real run).

Each panel is drawn where its gridPos puts it, from the results of its own queries over
Prometheus' HTTP API (query_range), with Grafana's $__rate_interval and $__interval
replaced as Grafana would for this range, the legend formats applied, and the thresholds
of alert panels drawn as dashed red lines. A stat panel shows its last value. The look is
gnuplot's, not Grafana's; the series are the dashboard's.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile
import urllib.parse
import urllib.request

UNIT_SUFFIX = {"s": " s", "bytes": " B", "ops": "/s", "short": "", "none": ""}


def query_range(prom, expr, start, end, step):
    qs = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom}/api/v1/query_range?{qs}", timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise SystemExit(f"query failed: {expr}: {body}")
    return body["data"]["result"]


def legend(fmt, metric):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt) or "value"


def panels_of(dashboard):
    rows, panels = [], []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            rows.append(p)
            panels.extend(p.get("panels", []))
        else:
            panels.append(p)
    return rows, panels


def gp_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def human(v, unit):
    if unit == "bytes":
        for u in ["B", "KiB", "MiB", "GiB"]:
            if abs(v) < 1024:
                return f"{v:.0f} {u}"
            v /= 1024
    if unit == "s" and v >= 120:
        return f"{v / 60:.1f} min"
    if v == int(v):
        return f"{int(v)}{UNIT_SUFFIX.get(unit, '')}"
    return f"{v:.2f}{UNIT_SUFFIX.get(unit, '')}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--start", type=int, required=True)
    ap.add_argument("--end", type=int, required=True)
    ap.add_argument("--step", type=int, default=15)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    with open(a.dashboard) as f:
        dashboard = json.load(f)
    rows, panels = panels_of(dashboard)
    grid_h = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in rows + panels)
    unit_px_w, unit_px_h = 75, 34
    width, height = 24 * unit_px_w, grid_h * unit_px_h + 60

    tmp = tempfile.mkdtemp(prefix="dashboard-picture-")
    minutes = (a.end - a.start) / 60
    out = [
        f"set terminal pngcairo size {width},{height} font 'DejaVu Sans,10' background '#ffffff'",
        f"set output {gp_string(a.out)}",
        "set multiplot",
        "set datafile missing 'NaN'",
    ]

    def place(gp, top_pad=60):
        gp = gp["gridPos"]
        x, y, w, h = gp["x"], gp["y"], gp["w"], gp["h"]
        ox, sx = x / 24, w / 24
        sy = h * unit_px_h / height
        oy = 1 - (top_pad + (y + h) * unit_px_h) / height
        return f"set origin {ox:.4f},{oy:.4f}; set size {sx:.4f},{sy:.4f}"

    def blank():
        return ["unset border; unset xtics; unset ytics; unset key; unset title; unset xlabel; unset ylabel",
                "set xrange [0:1]; set yrange [0:1]", "unset label"]

    # Heading.
    out += blank()
    out += [f"set origin 0,{1 - 55 / height:.4f}; set size 1,{50 / height:.4f}",
            f"set label 1 {gp_string(dashboard['title'] + ': a drawing of the dashboard from a local run (' + f'{minutes:.0f}' + ' minutes), not a Grafana screenshot')} at 0.005,0.5 left font 'DejaVu Sans,15'",
            "plot NaN notitle"]
    for r in rows:
        out += blank()
        out += [place(r), f"set label 1 {gp_string(r['title'])} at 0.002,0.5 left font 'DejaVu Sans Bold,13'",
                "plot NaN notitle"]

    colors = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#1f78c1", "#ba43a9", "#705da0", "#508642", "#cca300", "#447ebc"]
    for n, p in enumerate(panels):
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        steps = (p.get("fieldConfig", {}).get("defaults", {}).get("thresholds") or {}).get("steps", [])
        reds = sorted({s["value"] for s in steps if s.get("value") is not None and s["color"] == "red"})
        series = []
        for t in p.get("targets", []):
            expr = t["expr"].replace("$__rate_interval", "1m").replace("$__interval", f"{a.step}s")
            for res in query_range(a.prometheus, expr, a.start, a.end, a.step):
                if all(v in ("NaN", "+Inf", "-Inf") for _, v in res["values"]):
                    continue  # a quantile before its first observation
                name = legend(t.get("legendFormat", ""), res["metric"])
                series.append((name, {float(ts): float(v) for ts, v in res["values"]}))

        # Seconds in the unit that reads best, as Grafana's axis would; stacked panels add up.
        scale, suffix = 1, UNIT_SUFFIX.get(unit, "")
        if unit == "s":
            biggest = max((abs(v) for _, vs in series for v in vs.values() if v == v), default=0)
            scale, suffix = next((d, u) for d, u in [(86400, " d"), (3600, " h"), (60, " min"), (1, " s")] if biggest >= 2 * d or d == 1)
        stacked = (p.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("stacking") or {}).get("mode") == "normal"
        below = {}
        drawn = []
        for i, (name, vs) in enumerate(series):
            path = os.path.join(tmp, f"p{n}s{i}.dat")
            with open(path, "w") as f:
                for ts in sorted(vs):
                    v = vs[ts] + (below.get(ts, 0) if stacked else 0)
                    below[ts] = v
                    f.write(f"{(ts - a.start) / 60:.3f} {v / scale}\n")
            last = vs[max(vs)]
            drawn.append((name, path, last))
        series = drawn

        if p["type"] == "stat":
            out += blank()
            out += [place(p), "set border 15 lc rgb '#cccccc'",
                    f"set label 1 {gp_string(p['title'])} at 0.04,0.85 left font 'DejaVu Sans,10'"]
            text = "no data"
            color = "#444444"
            if series:
                text = "  ".join(human(v, unit) if len(series) == 1 else f"{name}: {human(v, unit)}" for name, _, v in series)
                v = series[-1][2]
                active = [st for st in steps if st.get("value") is None or v >= st["value"]]
                if active:
                    color = "#e02f44" if active[-1]["color"] == "red" else "#56a64b"
            size = 22 if len(text) < 12 else 13
            out += [f"set label 2 {gp_string(text)} at 0.5,0.38 center font 'DejaVu Sans Bold,{size}' tc rgb '{color}'",
                    "plot NaN notitle"]
            continue

        out += ["unset label", "set border 3 lc rgb '#999999'", "set xtics nomirror out font ',8'", "set ytics nomirror out font ',8'",
                f"set title {gp_string(p['title'])} font 'DejaVu Sans Bold,10' offset 0,-0.6",
                "set key top left font ',8' samplen 2 spacing 0.9 maxrows 4 opaque",
                "set grid lc rgb '#eeeeee'", "set xlabel 'minutes' font ',8' offset 0,1.2",
                f"set xrange [0:{minutes:.2f}]", "unset ylabel"]
        lo = p.get("fieldConfig", {}).get("defaults", {}).get("min")
        out.append(f"set yrange [{lo if lo is not None else '*'}:*]")
        if unit == "bytes":
            out.append("set format y '%.1s%cB'")
        else:
            out.append(f"set format y {gp_string('%g' + suffix.replace('%', '%%'))}")
        if stacked:
            out.append("set title " + gp_string(p["title"] + " (stacked)") + " font 'DejaVu Sans Bold,10' offset 0,-0.6")
        out.append(place(p))
        plots = []
        for i, (name, path, _) in enumerate(series[:10]):
            plots.append(f"{gp_string(path)} using 1:2 with lines lw 2 lc rgb '{colors[i % len(colors)]}' title {gp_string(name)}")
        if stacked:
            plots.reverse()  # the top of the stack first, so that every line stays visible
        for v in reds:
            plots.append(f"{v / scale} with lines dt 2 lw 1.5 lc rgb '#e02f44' title {gp_string('alert threshold ' + human(v, unit))}")
        if not plots:
            out += ["set yrange [0:1]", "set label 1 'no data' at graph 0.5,0.5 center tc rgb '#888888'"]
            plots.append("NaN notitle")
        out.append("plot " + ", ".join(plots))

    out.append("unset multiplot")
    script = os.path.join(tmp, "dashboard.gp")
    with open(script, "w") as f:
        f.write("\n".join(out) + "\n")
    subprocess.run(["gnuplot", script], check=True)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
