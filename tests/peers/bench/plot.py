"""Draws bench_proxy's latency against concurrency for every system (issue 14).

Usage: plot.py BENCH_JSON OUT_PNG

BENCH_JSON is what `bench_proxy --json` wrote. One line per measured system: p50 of a
`tools/call` in the closed loop at each concurrency, log scale; dashed lines are the direct
runs (no hop). Needs matplotlib (tests/peers/bench/requirements.txt).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    source, out = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        report = json.load(f)["report"]
    upstream_names = {
        "EverythingHttp": "server-everything HTTP",
        "EverythingStdio": "server-everything stdio",
        "Fixture": "Rust fixture",
    }
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    for system in report["systems"]:
        closed = [l for l in system["loads"] if l["rate"] is None]
        if system.get("skipped") or not closed:
            continue
        x = [l["sessions"] for l in closed]
        label = f'{system["name"]} ({upstream_names.get(system["upstream"], "?")})'
        style = "--" if system["name"] == "direct" else "-"
        axes[0].plot(x, [l["p50_ms"] for l in closed], style, marker="o", label=label)
        axes[1].plot(x, [l["p99_ms"] for l in closed], style, marker="o", label=label)
    for ax, what in zip(axes, ["p50", "p99"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks([1, 16, 64], ["1", "16", "64"])
        ax.set_xlabel("concurrency (closed loop, one session per worker)")
        ax.set_title(f"tools/call latency, {what}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f'bench_proxy at {report["commit"]}, {report["requests"]} calls per load, 2 cores')
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
