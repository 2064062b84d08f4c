"""The local runtime's warm invocation: a function packaged as Lambda packages it (the runtime's
Python, `-S`, its own mount namespace) against the same function on this interpreter with its
site-packages (how workers ran before packaging), measured in one run.

    python -m bench.worker_invoke [--quick]

Each side is one warm worker of a handler that returns its event; the figure is the median wall
time of a synchronous invocation from `Functions.invoke` to its result (the event and answer
crossing the worker's socket, the handler's call, the REPORT line), over `rounds` rounds of
`calls` invocations, the sides alternating round by round so that a noisy spell hits both.
Target: packaged within 1.2 × unpackaged (issue 27).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.report import Row, Target, markdown_table
from local.app.model import Function
from local.lambda_.workers import Functions

HANDLER = "def handler(event, context):\n    return event\n"
EVENT = {"Records": [{"data": "x" * 100, "partitionKey": f"k{i}"} for i in range(10)]}


def _functions(root: Path, packaged: bool) -> Functions:
    code = root / ("packaged" if packaged else "unpackaged")
    code.mkdir()
    (code / "app.py").write_text(HANDLER)
    function = Function("Echo", f"echo-{code.name}", "app.handler", code, timeout_seconds=30)
    functions = Functions(
        [function], endpoint_url="http://127.0.0.1:9", log_dir=root / "logs", packaged=packaged
    )
    functions.start()
    return functions


def _round(functions: Functions, name: str, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        result = functions.invoke(name, EVENT)
        times.append(time.perf_counter() - began)
        assert result.function_error is None, result.payload
    return times


def run(quick: bool = False) -> list[Row]:
    rounds, calls = (3, 100) if quick else (7, 400)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        packaged, unpackaged = _functions(root, True), _functions(root, False)
        try:
            samples: dict[str, list[float]] = {"packaged": [], "unpackaged": []}
            for index in range(rounds):
                order = [("packaged", packaged), ("unpackaged", unpackaged)]
                for side, functions in order if index % 2 == 0 else reversed(order):
                    samples[side] += _round(functions, f"echo-{side}", calls)
        finally:
            packaged.close()
            unpackaged.close()
    medians = {side: statistics.median(times) * 1e6 for side, times in samples.items()}
    return [
        Row(
            "warm invocation, packaged as deployed (median)",
            "µs",
            medians["packaged"],
            peer="this interpreter, its site-packages",
            peer_value=medians["unpackaged"],
            target=Target("ratio", "<=", 1.2),
        )
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.worker_invoke", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    print(markdown_table(rows))
    print(f"Target met: {all(row.met for row in rows)} (packaged within 1.2 x unpackaged).")


if __name__ == "__main__":
    main()
