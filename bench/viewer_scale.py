"""`bench/viewer_scale.py`: the viewer at scale, in headless Chromium, figures printed and saved.

1. One long rollout: 200 calls on one prefix chain whose prompts grow to 32k tokens
   (`builder.synthetic.write_synthetic_rollout`, plus its auxiliary root): seconds from opening the
   rollout's URL to the first token shown, to the first window of the 32k-token sequence, and per
   scroll step (each loads one 2,048-token window), and the viewer process's peak RSS.
2. A 10k-rollout dataset: a real build of 20 synthetic rollouts whose `summary` config is then
   replicated to 10,000 rows (fresh rollout ids, 10 row groups): what the index reads. Seconds to the
   first page shown, to every row listed, and the viewer process's peak RSS.

The viewer runs as `rollout-dataset view` in its own process (its RSS is read from /proc), the page
in Debian's Chromium. Run: `.venv/bin/python bench/viewer_scale.py [--scratch DIR]`; writes
`bench/results/viewer_scale.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support/: the synthetic fixtures

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "viewer_scale.json"
CHROMIUM = os.environ.get("ROLLOUT_DATASET_CHROMIUM", "/usr/bin/chromium")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


class Viewer:
    """`rollout-dataset view PATH` in a subprocess; its URL from the first line it prints."""

    def __init__(self, path: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen([sys.executable, "-m", "rollout_dataset.cli", "view", str(path)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        match = re.search(r"http://\S+", line)
        if not match:
            self.proc.kill()
            raise RuntimeError(f"viewer did not start: {line!r} {self.proc.stderr.read()}")
        self.url = match.group(0)

    def peak_rss_mb(self) -> float:
        """The viewer process's peak RSS so far (MB)."""
        return _peak_rss_mb(self.proc.pid)

    def stop(self) -> None:
        """Stop the viewer (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def long_rollout(scratch: Path, browser) -> dict:
    from support.synthetic_dataset import write_synthetic_rollout

    folder = scratch / "long"
    if not (folder / "summary.json").exists():
        write_synthetic_rollout(folder / "r", n_turns=200, context_tokens=32768, seed=1)
    viewer = Viewer(folder)
    try:
        return _long_rollout(viewer, browser)
    finally:
        viewer.stop()


def _long_rollout(viewer: Viewer, browser) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    start = time.perf_counter()
    page.goto(viewer.url + "rollout.html?id=r")
    page.wait_for_selector(".tokens .tok", state="attached", timeout=120_000)
    first_token = time.perf_counter() - start
    longest = page.evaluate("""() => { let best = null; for (const s of document.querySelectorAll('.sequence'))
        { const n = Number(s.querySelector('h3').textContent.split(' · ').find(p => p.endsWith(' tokens')).split(' ')[0]);
          if (!best || n > best.n) best = {n, i: s.dataset.sequence}; } return best; }""")
    selector = f'.sequence[data-sequence="{longest["i"]}"] .tokens'
    page.wait_for_selector(f"{selector}[data-loaded]", state="attached", timeout=120_000)
    first_window = time.perf_counter() - start
    steps = []
    for _ in range(6):  # scroll to the end of what is shown; the next window loads
        loaded = int(page.locator(selector).get_attribute("data-loaded"))
        if loaded >= longest["n"]:
            break
        t0 = time.perf_counter()
        page.locator(f'.sequence[data-sequence="{longest["i"]}"] .sentinel').scroll_into_view_if_needed()
        # a function (not an expression string): the viewer's CSP forbids the eval an expression needs
        page.wait_for_function("([sel, n]) => Number(document.querySelector(sel).dataset.loaded) > n",
                               arg=[selector, loaded], timeout=60_000)
        steps.append(round(time.perf_counter() - t0, 3))
    calls = int(page.locator("#total-calls").get_attribute("data-value"))
    page.close()
    return {"calls": calls, "longest_sequence_tokens": longest["n"], "seconds_to_first_token": round(first_token, 3),
            "seconds_to_first_window_of_longest": round(first_window, 3), "seconds_per_scroll_window": steps,
            "viewer_peak_rss_mb": viewer.peak_rss_mb()}


def big_dataset(scratch: Path, browser, n: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rollout_dataset.builder import build
    from support.synthetic_dataset import write_synthetic_dataset

    dataset = scratch / f"dataset-{n}"
    if not (dataset / "data" / "summary").is_dir():
        dirs = write_synthetic_dataset(scratch / "small", 20, n_turns=4, context_tokens=512)
        build(dirs, dataset, progress=False)
        summary_dir = dataset / "data" / "summary"
        table = pq.read_table(summary_dir)
        for old in summary_dir.glob("*.parquet"):
            old.unlink()
        reps = -(-n // table.num_rows)
        big = pa.concat_tables([table] * reps).slice(0, n)
        ids = pa.array([f"{k:032x}" for k in range(n)])
        big = big.set_column(big.schema.get_field_index("rollout_id"), "rollout_id", ids)
        pq.write_table(big, summary_dir / "replicated-0000.parquet", row_group_size=max(1, n // 10))
    viewer = Viewer(dataset)
    try:
        return _big_dataset(viewer, browser, n)
    finally:
        viewer.stop()


def _big_dataset(viewer: Viewer, browser, n: int) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    start = time.perf_counter()
    page.goto(viewer.url)
    page.wait_for_selector("body[data-ready=index]", state="attached", timeout=120_000)
    first = time.perf_counter() - start
    page.wait_for_selector("body[data-loaded]", state="attached", timeout=300_000)
    every = time.perf_counter() - start
    listed = int(page.locator("body").get_attribute("data-loaded"))
    page.close()
    return {"rollouts": n, "listed": listed, "seconds_to_first_page": round(first, 3),
            "seconds_to_every_row": round(every, 3), "viewer_peak_rss_mb": viewer.peak_rss_mb()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scratch", default="/tmp/rollout-dataset-bench-viewer")
    parser.add_argument("--rollouts", type=int, default=10_000)
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    results: dict = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()}
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        results["long_rollout"] = long_rollout(scratch, browser)
        print("long rollout:", json.dumps(results["long_rollout"]))
        results["big_dataset"] = big_dataset(scratch, browser, args.rollouts)
        print("big dataset:", json.dumps(results["big_dataset"]))
        browser.close()
    results["load_average_at_end"] = list(os.getloadavg())
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"saved {RESULTS.relative_to(ROOT)}")
    shutil.rmtree(scratch / "small", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
