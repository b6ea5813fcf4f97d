"""The explorer as a person meets it, timed in Chromium: first paint of `dlexplore explore` on a warm
server, and slider-to-plot latency (the GPU slider, which picks a precomputed count, and the batch
slider, which calls the model), from the key press to the changed data in BokehJS at the next frame.

Run it against this checkout and against a baseline checkout (its own venv), alternating, on the
same machine::

    python benchmarks/bench_explorer_browser.py --root . --root /path/to/baseline --rounds 3

With ``--trace PATH`` (repeatable) the server explores your own run (``dlexplore explore --trace``);
``--calibrate`` clicks "Calibrate to the trace" before the moves and ``--hybrid`` moves the tp
slider to 2 (the hybrid model draws), and the tp slider's moves (each a model call) are timed too:
the slider path with a trace loaded and the hybrid controls shown. A root whose explorer has no
``--trace`` is measured without it (and says so).

Each root must hold a ``.venv`` with dlexplore and its ``explore`` and ``test`` extras; Chromium is
Debian's (``/usr/bin/chromium``, or ``$DLX_CHROMIUM``). First paint is from the page request to the
first figure drawn, in a fresh browser context (nothing cached), once the server's kernels are idle
(warm); the median of ``--pages`` per round is reported. A root whose explore command has no
``--pool-size`` (before the preheated pool) starts one kernel per page.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "browser"))

from _browser import (  # noqa: E402
    CHROMIUM_ARGS,
    Server,
    descendants,
    find_chromium,
    free_port,
    jupyter_env,
    percentile,
    private_home_env,
    timed_change,
    wait_settled,
)

SOURCES = ["throughput_predicted", "throughput_selected", "step_breakdown", "comm_buckets"]

DRAWN = """() => {
  const has = (root) => { for (const el of root.querySelectorAll("*"))
    if (el.tagName === "CANVAS" || (el.shadowRoot && has(el.shadowRoot))) return true; return false; };
  return window.Bokeh !== undefined && ["throughput_predicted", "step_breakdown"].every((n) =>
    Bokeh.documents.some((d) => d.get_model_by_name(n) !== null)) && has(document.body);
}"""


def _kernel_cpu(server: Server) -> float:
    """CPU clock ticks the server's kernels have used (its own kernels only: others may be running)."""
    total = 0.0
    for pid in descendants(server.proc.pid):
        try:
            if b"ipykernel" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


def _wait_idle(server: Server, timeout: float = 120) -> None:
    """Until the server's kernels use no CPU for a second (the pool's kernel has run the notebook)."""
    deadline = time.monotonic() + timeout
    before = _kernel_cpu(server)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _kernel_cpu(server)
        if now - before < 5:  # clock ticks (1/100 s)
            return
        before = now


def _slider(page, label: str):
    import re

    label_re = re.compile(rf"^\s*{re.escape(label)}\s*$")
    return page.locator(".widget-slider", has=page.locator(".widget-label", has_text=label_re)).get_by_role(
        "slider"
    )


def _prepare(page, calibrate: bool, hybrid: bool) -> None:
    """Calibrate to the trace and switch to the hybrid model, as a person would, then settle."""
    if calibrate:
        page.get_by_role("button", name="Calibrate to the trace").click()
        page.wait_for_function(
            "() => document.querySelector('.dlx-trace-report')?.innerText.includes('Calibrated')",
            timeout=120_000,
        )
    if hybrid:
        before = page.evaluate("() => document.querySelector('.dlx-hybrid-note')?.innerText || ''")
        _slider(page, "tp (tensor)").focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "(old) => (document.querySelector('.dlx-hybrid-note')?.innerText || '') !== old",
            arg=before,
            timeout=120_000,
        )
    wait_settled(page, SOURCES, quiet_ms=500)


def measure(
    root: Path,
    browser,
    pages: int,
    moves: int,
    traces: list[Path] = (),
    calibrate: bool = False,
    hybrid: bool = False,
) -> dict:
    """One round against one checkout: first paints and slider latencies (ms)."""
    exe = root / ".venv" / "bin" / "dlexplore"
    help_text = subprocess.run([str(exe), "explore", "--help"], capture_output=True, text=True).stdout
    home = Path(tempfile.mkdtemp(prefix="dlx-bench-"))
    port = free_port()
    argv = [str(exe), "explore", "--no-browser", "--port", str(port)]
    if "--pool-size" in help_text:
        argv += ["--pool-size", "1"]
    traced = bool(traces) and "--trace" in help_text
    for path in traces if traced else ():
        argv += ["--trace", str(Path(path).resolve())]
    server = Server(str(root), argv, port=port, cwd=home, env=jupyter_env(home), log_path=home / "server.log")
    out: dict = {"root": str(root), "pool": "--pool-size" in help_text, "trace": traced}
    try:
        server.wait_ready()
        paints = []
        for _ in range(pages):
            _wait_idle(server)
            context = browser.new_context(viewport={"width": 1280, "height": 720})
            page = context.new_page()
            start = time.monotonic()
            page.goto(server.url + "/", wait_until="commit")
            page.wait_for_function(DRAWN, timeout=120_000, polling="raf")
            paints.append((time.monotonic() - start) * 1e3)
            page.close(run_before_unload=True)
            context.close()
        out["first_paint_ms"] = paints
        _wait_idle(server)
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        page = context.new_page()
        page.goto(server.url + "/")
        page.wait_for_function(DRAWN, timeout=120_000)
        wait_settled(page, SOURCES, quiet_ms=500)
        if traced:
            _prepare(page, calibrate, hybrid)
        sliders = [
            ("GPUs", "throughput_selected", ["gpus"], ["ArrowRight"] * 4 + ["ArrowLeft"] * 4),
            ("Batch/GPU", "throughput_predicted", ["throughput"], ["ArrowRight", "ArrowLeft"] * 4),
        ]
        if traced and hybrid:
            sliders.append(
                ("tp (tensor)", "throughput_predicted", ["throughput"], ["ArrowRight", "ArrowLeft"] * 4)
            )
        for label, source, columns, key_pairs in sliders:
            handle = _slider(page, label)
            samples = []
            for i in range(moves):
                key = key_pairs[i % len(key_pairs)]
                handle.focus()
                change = timed_change(page, source, columns, lambda key=key: page.keyboard.press(key))
                if change["ms"] is not None:
                    samples.append(change["ms"])
                wait_settled(page, SOURCES, quiet_ms=200)
            out[f"{label} slider_ms"] = samples
        context.close()
    finally:
        server.stop()
    return out


def _summary(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples):7.1f} ms, p95 {percentile(samples, 95):7.1f} ms "
        f"(n={len(samples)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        action="append",
        type=Path,
        required=True,
        help="a checkout with its .venv (repeat: this one and a baseline)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the roots")
    parser.add_argument("--pages", type=int, default=5, help="first paints per round")
    parser.add_argument("--moves", type=int, default=16, help="moves per slider per round")
    parser.add_argument("--json", help="write every sample here")
    parser.add_argument(
        "--trace", action="append", default=[], type=Path, help="explore this traced run (repeat for several)"
    )
    parser.add_argument("--calibrate", action="store_true", help="calibrate to the trace before the moves")
    parser.add_argument(
        "--hybrid", action="store_true", help="tp = 2 before the moves; time the tp slider too"
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        sys.exit("Chromium not found: apt-get install chromium, or set DLX_CHROMIUM")
    results: dict[str, dict[str, list[float]]] = {}
    with sync_playwright() as playwright:
        home = Path(tempfile.mkdtemp(prefix="dlx-chromium-"))
        browser = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, headless=True, env=private_home_env(home)
        )
        for round_ in range(args.rounds):
            for root in args.root:
                one = measure(
                    root.resolve(), browser, args.pages, args.moves, args.trace, args.calibrate, args.hybrid
                )
                if args.trace and not one["trace"]:
                    print(f"{root}: its explorer has no --trace; measured without it", flush=True)
                merged = results.setdefault(str(root.resolve()), {})
                for key, value in one.items():
                    if isinstance(value, list):
                        merged.setdefault(key, []).extend(value)
                print(
                    f"round {round_ + 1}, {root}: first paint {_summary(one['first_paint_ms'])}", flush=True
                )
        browser.close()
    for root, figures in results.items():
        print(f"\n{root}")
        for key, samples in figures.items():
            if samples:
                print(f"  {key:22s} {_summary(samples)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
