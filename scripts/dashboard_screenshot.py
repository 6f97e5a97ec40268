"""Run a short real `looplift demo` and photograph its dashboard for the README (docs/dashboard.png).

    flock /tmp/looplift-heavy.lock .venv/bin/python scripts/dashboard_screenshot.py --out docs/dashboard.png

It also prints `looplift status` (text and --json) against the running stack. Everything on the page is what the
demo did: rollouts served by each version, the retrain runs and their gate
figures, the gateway's promotions; after the last cycle an operator rolls the alias back and promotes the newest
version again (real admin calls), so the swap markers show both. Needs Debian's `chromium` (headless).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=128)
    ap.add_argument("--held-out", type=int, default=60)
    ap.add_argument("--width", type=int, default=1400)
    args = ap.parse_args()

    from _chromium import Chromium, png_stats

    from looplift._demo import DemoConfig, run_demo
    from server import AdminClient

    seen: dict[str, Any] = {}

    def shoot(stack: dict[str, str]) -> None:
        with AdminClient(stack["gateway"], stack["admin_token"]) as admin:
            serving = admin.versions().serving
            if serving != "policy-v0":
                admin.rollback()
                admin.promote(serving)
        # `looplift status` on the running stack, as an operator would run it (printed for docs/observe.md).
        import subprocess

        cmd = [sys.executable, "-m", "looplift", "status", "--gateway", stack["gateway"], "--collector", stack["collector"],
               "--db", f"sqlite:///{stack['state']}/collector.db", "--runs-dir", f"{stack['state']}/runs",
               "--token", stack["admin_token"]]
        for extra in ([], ["--json"]):
            p = subprocess.run(cmd + extra, capture_output=True, text=True, timeout=120)
            print(f"$ looplift status {' '.join(extra)}  (exit {p.returncode})\n{p.stdout}{p.stderr}", flush=True)
        with Chromium() as browser:
            page = browser.open(f"{stack['collector']}/dashboard#window=1h&token={stack['admin_token']}",
                                ready_js="window.__dashboard && window.__dashboard.ready")
            seen["state"] = page.evaluate("JSON.stringify(window.__dashboard)")
            seen["errors"] = page.errors
            png = page.screenshot(width=args.width)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_bytes(png)
        stats = png_stats(png)
        seen["png"] = {k: v for k, v in stats.items() if k != "pixels"}

    with tempfile.TemporaryDirectory() as tmp:
        result = run_demo(DemoConfig(cycles=args.cycles, episodes=args.episodes, held_out=args.held_out,
                                     json_out=Path(tmp) / "demo.json", before_stop=shoot))
    for c in result["cycles"]:
        print(f"cycle {c['cycle']}: {c['version']} held-out {c['held_out_success']:.0%} promoted={c['promoted']}")
    print(f"dashboard: {seen['state']}")
    print(f"console errors: {seen['errors']}")
    print(f"wrote {args.out} {seen['png']}")


if __name__ == "__main__":
    main()
