"""Frontiers, tables, summary lines and plots of bench_frontier.py's
results (see its docstring for the definitions). Reads and writes only the
result dictionaries, so `bench_frontier.py --render DIR` can redo them
without measuring."""
import json
import os
import platform
import sys
import time

import torch

MIB = 1 << 20
DEVICE = "h100-80gb"
BUDGETS = (0.9, 0.7, 0.5, 0.3, 0.1)
ECHO_OVERHEAD = 0.05
ECHO_MORE_OVERHEADS = (0.1, 0.2, 0.3)
SUMMARY_CAP = 5.0  # percent extra roofline compute
EPS_X = 0.1  # percentage points of extra roofline compute that count as equal
EPS_Y = 1024  # bytes

def frontier(series, key="saved_bytes"):
    """Pareto points of a series (lowest memory for a given extra compute),
    sorted by extra compute."""
    out, best = [], None
    for p in sorted(series, key=lambda p: (p["extra_roofline_pct"], p[key])):
        if best is None or p[key] < best:
            out.append(p)
            best = p[key]
    return out


def frontier_summary(points):
    torch_pts = [p for p in points if p["kind"] == "torch"]
    echo_pts = [p for p in points if p["kind"] == "echo"]

    def not_dominated(key):
        return [t["label"] for t in torch_pts
                if not any(e["extra_roofline_pct"] <= t["extra_roofline_pct"] + EPS_X
                           and e[key] <= t[key] + EPS_Y for e in echo_pts)]

    undominated = not_dominated("saved_bytes")
    undominated_peak = not_dominated("peak_bytes")
    # Torch points a user gets as torch ships them: no workaround needed and
    # the gradients equal eager's.
    as_shipped = {t["label"] for t in torch_pts
                  if not t.get("workaround") and t.get("grads_match_eager", True)}

    def best(series):
        within = [p for p in series if p["extra_roofline_pct"] <= SUMMARY_CAP + 1e-9]
        return min(within, key=lambda p: (p["saved_bytes"], p["extra_roofline_pct"]),
                   default=None)

    eb, tb = best(echo_pts), best(torch_pts)
    return dict(echo_frontier=[p["label"] for p in frontier(echo_pts)],
                torch_frontier=[p["label"] for p in frontier(torch_pts)],
                echo_at_or_below_torch=not undominated,
                torch_points_not_dominated=undominated,
                echo_at_or_below_torch_by_peak=not undominated_peak,
                torch_points_not_dominated_by_peak=undominated_peak,
                torch_points_not_dominated_as_shipped=[
                    t for t in undominated if t in as_shipped],
                torch_points_not_dominated_by_peak_as_shipped=[
                    t for t in undominated_peak if t in as_shipped],
                echo_best_within_cap=eb["label"] if eb else None,
                torch_best_within_cap=tb["label"] if tb else None)


# ---------------------------------------------------------------- output


def model_table(res):
    lines = [f"### {res['model']} ({res['ops']} joint ops, eager step "
             f"{res['eager_flops'] / 1e9:.3f} GFLOP)", "",
             "| point | saved-for-backward MiB | reduction vs eager | step peak MiB | "
             "extra FLOPs % | extra roofline % | recomputed ops | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for p in res["points"]:
        if p["kind"] == "failed":
            error = p["error"][:160].replace("|", "/")
            lines.append(f"| {p['label']} | failed | | | | | | {error} |")
            continue
        notes = []
        if not p["loss_matches_eager"]:
            notes.append("LOSS MISMATCH")
        elif not p["grads_match_eager"]:
            notes.append("GRADS DIFFER")
        if p.get("same_as"):
            notes.append(f"same as {p['same_as']}")
        if p["kind"] == "echo":
            opts = p.get("options", {})
            if "memory_limit_bytes" in opts:
                notes.append(f"limit {opts['memory_limit_bytes'] / MIB:.3f} MiB")
            if p.get("feasible") is False:
                notes.append("infeasible")
            if p.get("predicted_overhead_pct") is not None:
                notes.append(f"echod predicted {p['predicted_overhead_pct']:.2f}%")
            if p.get("stash_lower_bound_bytes") and opts.get("objective") == "stash_bytes":
                notes.append(f"no plan within the budget holds < "
                             f"{p['stash_lower_bound_bytes'] / MIB:.3f} MiB")
        if p.get("moved_ops"):
            notes.append(f"{p['moved_ops']} ops moved to bw")
        if p.get("workaround"):
            notes.append(f"fails as is (saved BatchNorm buffer updated in place); measured with "
                         f"{p['cloned_buffers']} saved buffers cloned")
        lines.append(
            f"| {p['label']} | {p['saved_bytes'] / MIB:.3f} | {p['saved_reduction_pct']:.1f}% | "
            f"{p['peak_bytes'] / MIB:.3f} | {p['extra_flops_pct']:.2f}% | "
            f"{p['extra_roofline_pct']:.2f}% | {p['recompute_executions']} | "
            f"{'; '.join(notes)} |")
    return lines


def frontier_lines(res):
    pts = res["points"]
    lines = []
    for kind, title in (("torch", "torch budget points"), ("echo", "Echo points")):
        series = [p for p in pts if p["kind"] == kind]
        pareto = {p["label"] for p in frontier(series)}
        items = [f"{p['extra_roofline_pct']:.2f}% -> {p['saved_bytes'] / MIB:.3f} MiB "
                 f"({p['label']}{'' if p['label'] in pareto else ', dominated'})"
                 for p in sorted(series, key=lambda p: (p["extra_roofline_pct"],
                                                        p["saved_bytes"]))]
        lines.append(f"- {title} (extra roofline -> MiB held for backward): " +
                     "; ".join(items))
    return lines


def summary_line(res):
    pts = {p["label"]: p for p in res["points"]}
    eager = pts["eager"]

    def describe(label):
        if label is None:
            return "no point within the cap"
        p = pts[label]
        return (f"{p['saved_reduction_pct']:.1f}% less saved than eager "
                f"({eager['saved_bytes'] / MIB:.3f} -> {p['saved_bytes'] / MIB:.3f} MiB) at "
                f"{p['extra_roofline_pct']:.2f}% extra roofline ({label})")

    line = (f"**{res['model']}**: Echo at <= {SUMMARY_CAP:g}% extra roofline compute: "
            f"{describe(res['echo_best_within_cap'])}; torch's best at <= {SUMMARY_CAP:g}%: "
            f"{describe(res['torch_best_within_cap'])}. Echo's frontier at or below torch's: "
            f"{'yes' if res['echo_at_or_below_torch'] else 'no'}")
    if res["torch_points_not_dominated"]:
        line += (" (torch points no Echo point dominates: "
                 + ", ".join(res["torch_points_not_dominated"]) + ")")
    line += (". With step peak instead of saved bytes (what memory_limit_bytes bounds): "
             f"{'yes' if res['echo_at_or_below_torch_by_peak'] else 'no'}")
    if res["torch_points_not_dominated_by_peak"]:
        line += " (not dominated: " + ", ".join(res["torch_points_not_dominated_by_peak"]) + ")"
    if "torch_points_not_dominated_as_shipped" in res:
        held = res["torch_points_not_dominated_as_shipped"]
        peak = res["torch_points_not_dominated_by_peak_as_shipped"]
        line += (". Against torch's points that run as torch ships them with eager's "
                 f"gradients, by held bytes: {'no (' + ', '.join(held) + ')' if held else 'yes'}"
                 f"; by step peak: {'no (' + ', '.join(peak) + ')' if peak else 'yes'}")
    bound = pts.get(f"Echo AUTO stash {SUMMARY_CAP:g}%", {}).get("stash_lower_bound_bytes")
    if bound:
        line += (f". By echod's cost model no plan within {SUMMARY_CAP:g}% holds less than "
                 f"{bound / MIB:.3f} MiB for backward (at most "
                 f"{eager['saved_bytes'] / bound:.2f}x less than eager)")
    wrong = [p["label"] for p in res["points"]
             if p["kind"] != "failed" and not p.get("grads_match_eager", True)]
    if wrong:
        line += ". Gradients differ from eager's (counted anyway): " + ", ".join(wrong)
    failed = [p["label"] for p in res["points"] if p["kind"] == "failed"]
    if failed:
        line += ". Failed, left out: " + ", ".join(failed)
    return line + "."


def plot(results, path, key="saved_bytes", ylabel="MiB held for backward"):
    try:
        import matplotlib
    except ImportError:  # e.g. a GPU image without it: tables and JSON only
        print(f"matplotlib is not installed: {path} not drawn", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    for ax, res in zip(axes.flat, results):
        pts = res["points"]
        eager = pts[0]
        for kind, style, name in (("torch", dict(color="tab:blue", marker="o"),
                                   "torch min-cut (activation_memory_budget)"),
                                  ("echo", dict(color="tab:red", marker="s"), "Echo")):
            series = sorted((p for p in pts if p["kind"] == kind),
                            key=lambda p: (p["extra_roofline_pct"], p["saved_bytes"]))
            xs = [p["extra_roofline_pct"] for p in series]
            ys = [p[key] / MIB for p in series]
            good = [p.get("grads_match_eager", True) for p in series]
            ax.scatter([x for x, g in zip(xs, good) if g], [y for y, g in zip(ys, good) if g],
                       label=name, zorder=3, **style)
            if not all(good):
                ax.scatter([x for x, g in zip(xs, good) if not g],
                           [y for y, g in zip(ys, good) if not g], facecolors="none",
                           edgecolors=style["color"], marker=style["marker"], zorder=3,
                           label=f"{name.split(' ')[0]}: gradients differ from eager")
            front = frontier(series, key)
            fx = [p["extra_roofline_pct"] for p in front]
            fy = [p[key] / MIB for p in front]
            ax.step(fx, fy, where="post", color=style["color"], alpha=0.6)
            for p in series:
                tag = p["label"].replace("torch budget ", "").replace("torch default", "1.0")
                tag = tag.replace("Echo AUTO @ peak", "@").replace("Echo ", "")
                ax.annotate(tag, (p["extra_roofline_pct"], p[key] / MIB),
                            textcoords="offset points", xytext=(4, 3), fontsize=7,
                            color=style["color"])
        ax.axhline(eager[key] / MIB, color="gray", linestyle="--", linewidth=1,
                   label="eager")
        ax.axvline(SUMMARY_CAP, color="gray", linestyle=":", linewidth=1)
        ax.set_title(f"{res['model']}")
        ax.set_xlabel("extra compute % (roofline, h100-80gb)")
        ax.set_ylabel(ylabel)
        if key == "saved_bytes":
            ax.set_ylim(bottom=0)
        ax.set_xlim(left=-0.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(results, header):
    out = list(header)
    for res in results:
        out += [""] + model_table(res) + [""] + frontier_lines(res)
        if res["notes"]:
            out += [""] + [f"- {n}" for n in res["notes"]]
    out += ["", "## Summary", ""] + [f"- {summary_line(r)}" for r in results]
    return out


def write_outputs(out, results, total, complete=True, meta=None):
    os.makedirs(out, exist_ok=True)
    if meta is None:
        meta = dict(torch=torch.__version__, threads=torch.get_num_threads(),
                    machine=platform.machine(), date=time.strftime("%Y-%m-%d"),
                    device=DEVICE, budgets=list(BUDGETS), echo_overhead=ECHO_OVERHEAD,
                    summary_cap_pct=SUMMARY_CAP, argv=sys.argv[1:], seconds=total,
                    complete=complete)
        if "--cuda" in meta["argv"]:
            meta["gpu"] = torch.cuda.get_device_name()
    on_cuda = "--cuda" in meta["argv"]
    ran_on = (f"CUDA fp32 on {meta.get('gpu', 'a GPU')}" if on_cuda
              else "CPU fp32 on a shared 2-core machine")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(dict(meta=meta, models=results), f, indent=1)
    header = [
        "# Memory / extra-compute frontier: torch's activation_memory_budget vs Echo",
        "",
        "Produced by (echod started by the script on a free port):",
        "",
        "    export ECHO_TORCH_CACHE_DIR=/tmp/bench_plan_cache",
        "    build/venv/bin/python tests/python/bench_frontier.py " + " ".join(meta["argv"]),
        "",
        f"torch {meta['torch']}, {meta['threads']} threads, {meta['date']}, "
        f"{ran_on}; {total:.0f} s"
        + ("" if complete else " so far (incomplete run)") + ".",
        "",
        "Definitions (details in the docstring of tests/python/bench_frontier.py):",
        "",
        "- *saved-for-backward*: bytes of distinct storages autograd keeps from the forward "
        "(saved_tensors_hooks; parameters and inputs excluded).",
        "- *step peak*: pre-existing tensors plus the "
        + ("CUDA caching allocator's max_memory_allocated" if on_cuda else "CPU allocator peak")
        + " of one forward+backward (tests/python/measure.py).",
        "- *extra FLOPs*: FlopCounterMode over one step minus eager's, relative to eager's "
        "(matmul-like ops only; recomputed element-wise ops count 0).",
        "- *extra roofline*: echod's h100-80gb roofline time (EstimateMemory "
        "compute_time_seconds) of the recomputed op executions relative to the whole joint "
        "graph's (Echo: recompute=True entries of the plan's schedule; torch: forward ops "
        "that both torch's forward and backward graphs run).",
        "- torch points: functorch's min_cut_rematerialization_partition at "
        "activation_memory_budget 1.0 (default), " + ", ".join(map(str, BUDGETS)) +
        ", run by echo_torch's freeing executor; Echo AUTO @ peak(B): memory_limit_bytes = "
        "measured step peak of torch budget B (1.0: the default); Echo AUTO 5%: "
        "max_overhead_ratio=0.05 (and 0%, 10%, 20%, 30%); Echo AUTO stash 5% and "
        "stash @ extra(B): objective=stash_bytes at 5% and at the extra roofline torch "
        "budget B spent, with echod's stash_lower_bound_bytes (no plan within the budget "
        "holds less); Echo ECHO: policy ECHO; all Echo plans with device=h100-80gb.",
        "- *frontier at or below*: every torch point T has an Echo point E with "
        f"extra_E <= extra_T + {EPS_X} pp and saved_E <= saved_T + 1 KiB (\"by step "
        "peak\": the same with the measured step peak).",
        "- frontier.png: y = MiB held for backward; frontier_peak.png: y = step peak; "
        "x = extra roofline %. Lines are each series' lower-left staircase.",
    ]
    with open(os.path.join(out, "frontier.md"), "w") as f:
        f.write("\n".join(render(results, header)) + "\n")
    plot(results, os.path.join(out, "frontier.png"))
    plot(results, os.path.join(out, "frontier_peak.png"), "peak_bytes",
         "step peak MiB (measured)")
