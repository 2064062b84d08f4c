"""`make cost`: what a million records cost through shardline and through the usual build, per component.

    python -m bench.cost                      # 1,000,000 records of 100 B over 1,000 keys, each app
    python -m bench.cost --quick              # 5,000 records: a few minutes
    python -m bench.cost --records 200000 --sizes 100,1024 --keys 500

The same load goes through each app under the local runtime (`python -m local up`, limits on):
shardline's app as this repository deploys it (`app.py`), and the baseline built the usual way
(`bench/baseline`: each record its own Kinesis record, Powertools' `BatchProcessor` and idempotency
writing DynamoDB). `send` posts it through each app's REST API and its verdict must hold (every
record once in each sink) before anything is priced. The runtime counts what each app did
(`shardline local usage`: requests, invocations and billed milliseconds, Kinesis records, bytes and
PUT payload units, DynamoDB request units, SQS requests, log bytes, EMF metrics); `bench.cost_model`
scales the counts to a million records and prices them with `bench.cost_prices` at each sustained
rate: the shards a rate needs follow from the measured bytes and Kinesis records per user record.

Each record size is a run of its own (its counts differ); the rates reuse a run's counts. Prints a
table per component for 100-B records at 10,000 records/s, the totals over rates and sizes, writes
`build/cost/cost.json` and the curves `build/cost/*.png`, and ends with one line:
`cost per million records at 10,000 records/s: shardline $X, usual build $Y, ratio R`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.cost_model import Measured, price, total
from bench.up_process import REPO_ROOT, UpProcess, synthesize

RATES = (1_000, 10_000, 100_000)
SIZES = (100, 1024, 10_240)
HEADLINE_RATE = 10_000
APPS = ("shardline", "usual build")


def _log(message: str) -> None:
    print(f"[cost] {message}", file=sys.stderr, flush=True)


def usage(up: UpProcess, *, reset: bool = False) -> dict[str, Any]:
    url = f"http://127.0.0.1:{up.api_port}/_shardline/usage" + ("?reset=1" if reset else "")
    with urllib.request.urlopen(url, timeout=60) as answer:
        return dict(json.loads(answer.read()))


def measure(
    cdk_out: Path, workdir: Path, *, records: int, size: int, keys: int
) -> tuple[Measured, dict[str, Any]]:
    """One app under the runtime: the load sent, its verdict held, and what the runtime counted."""
    from local.app.template import load
    from local.commands.send import send
    from local.commands.verify import wait_and_verify

    with UpProcess(cdk_out, workdir) as up:
        up.start()
        app = load(cdk_out, endpoint_url=up.endpoint_url)
        route = next(iter(json.loads(_producer(app).environment["SHARDLINE_STREAMS"])))
        api_url = f"http://127.0.0.1:{up.api_port}/{app.apis[0].stage}/streams"
        usage(up, reset=True)
        began = time.monotonic()
        report = send(api_url, route, count=records, size=size, keys=keys, progress=sys.stderr.isatty())
        verdict = wait_and_verify(up.endpoint_url, app, report, timeout=max(600.0, records / 50))
        if not verdict.ok:
            raise RuntimeError(
                f"{cdk_out.parent.name}: the verdict failed; nothing priced:\n{verdict.as_dict()}"
            )
        counted = usage(up)
        groups = len({m.function_name for m in app.mappings})
        seconds = time.monotonic() - began
    accepted = len(report.accepted)
    _log(f"{cdk_out.parent.name}: {accepted:,} records of {size} B in {seconds:,.0f} s, verdict ok")
    return Measured.from_usage(counted, records=accepted, reading_groups=groups), counted


def _producer(app: Any) -> Any:
    return next(f for f in app.functions if "SHARDLINE_STREAMS" in f.environment)


def render(bills: dict[str, dict[str, Any]]) -> str:
    """The component table: dollars per million records of each app, and the ratio."""
    ours, theirs = bills[APPS[0]], bills[APPS[1]]
    width = max(len(name) for name in {*ours, *theirs})
    lines = [f"{'component':<{width}}  {'shardline':>12}  {'usual build':>12}  {'ratio':>7}"]
    for name in dict.fromkeys([*ours, *theirs]):
        a, b = ours.get(name), theirs.get(name)
        x, y = (a.usd if a else 0.0), (b.usd if b else 0.0)
        ratio = f"{x / y:6.2f}" if y else "     -"
        lines.append(f"{name:<{width}}  {x:12.4f}  {y:12.4f}  {ratio:>7}")
    x, y = total(ours), total(theirs)
    lines.append(f"{'total':<{width}}  {x:12.4f}  {y:12.4f}  {x / y:7.2f}")
    return "\n".join(lines)


def plot(curves: dict[str, Any], out: Path) -> list[Path]:
    """Total per million records against the rate (one line per app and size)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    written = []
    figure, axes = pyplot.subplots(figsize=(8, 5))
    for app_name in APPS:
        for size, by_rate in curves[app_name].items():
            rates = sorted(int(rate) for rate in by_rate)
            axes.plot(
                rates, [by_rate[str(rate)] for rate in rates], marker="o", label=f"{app_name}, {size} B"
            )
    axes.set_xscale("log")
    axes.set_xlabel("records/s sustained")
    axes.set_ylabel("USD per million records")
    axes.set_title("What a million records cost (us-east-1)")
    axes.legend()
    path = out / "cost-by-rate.png"
    figure.savefig(path, dpi=120, bbox_inches="tight")
    pyplot.close(figure)
    written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="bytes of data per record, each a run"
    )
    parser.add_argument("--keys", type=int, default=1_000, help="distinct partition keys")
    parser.add_argument("--rates", default=",".join(map(str, RATES)), help="records/s sustained, priced")
    parser.add_argument("--quick", action="store_true", help="5,000 records (a few minutes)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "cost")
    args = parser.parse_args(argv)
    records = 5_000 if args.quick else args.records
    sizes = [int(size) for size in args.sizes.split(",")]
    rates = [int(rate) for rate in args.rates.split(",")]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    apps = {
        APPS[0]: synthesize(out / "shardline" / "cdk.out"),
        APPS[1]: synthesize(out / "baseline" / "cdk.out", "baseline"),
    }
    measured: dict[str, dict[int, Measured]] = {name: {} for name in APPS}
    raw: dict[str, dict[int, Any]] = {name: {} for name in APPS}
    for size in sizes:
        for name, cdk_out in apps.items():
            measured[name][size], raw[name][size] = measure(
                cdk_out, out / cdk_out.parent.name / f"run-{size}", records=records, size=size, keys=args.keys
            )
    curves = {
        name: {
            str(size): {str(rate): total(price(app, rate)) for rate in rates} for size, app in by_size.items()
        }
        for name, by_size in measured.items()
    }
    headline_size = sizes[0]
    bills = {name: price(measured[name][headline_size], HEADLINE_RATE) for name in APPS}
    print(f"per million records of {headline_size} B at {HEADLINE_RATE:,} records/s (USD, us-east-1):")
    print(render(bills))
    print()
    print("totals per million records (USD): rate x size")
    for name in APPS:
        for size in sizes:
            row = "  ".join(f"{rate:>7,}/s ${curves[name][str(size)][str(rate)]:.4f}" for rate in rates)
            print(f"  {name:<12} {size:>6} B  {row}")
    for path in plot(curves, out):
        print(f"plot: {path}")
    (out / "cost.json").write_text(
        json.dumps(
            {
                "records": records,
                "sizes": sizes,
                "rates": rates,
                "keys": args.keys,
                "measured": {n: {str(s): asdict(m) for s, m in by.items()} for n, by in measured.items()},
                "usage": {n: {str(s): u for s, u in by.items()} for n, by in raw.items()},
                "curves": curves,
                "headline": {n: {k: asdict(line) for k, line in bill.items()} for n, bill in bills.items()},
            },
            indent=2,
            default=str,
        )
    )
    ours, theirs = total(bills[APPS[0]]), total(bills[APPS[1]])
    print(
        f"cost per million records at {HEADLINE_RATE:,} records/s: shardline ${ours:.4f}, "
        f"usual build ${theirs:.4f}, ratio {ours / theirs:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
