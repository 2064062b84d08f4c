"""`python -m local up | status | send | redrive`: the local runtime's command line.

python -m local up [--json]        # the app of cdk.out on loopback, until Ctrl-C
python -m local status [--json]    # streams and shards, consumer groups, DLQs, functions
python -m local send --count 20000 # POST records to the API, then prove where they went
python -m local send --payload-file orders.ndjson --records-per-request 100   # the user's data
python -m local redrive GROUP      # what GROUP's on-failure queue points at, through GROUP again
python -m local usage [--reset]    # the billable operations so far, per component (--json)

Every command exits with one table's statuses (`local.exit_codes`: 0 ok, 1 failed, 2 usage or bad
input, 3 the app not running, 130 interrupted); `--json` puts JSON alone on stdout.

(up, status and send are also make verbs.) Installed (with the `local` extra), the same
command line is `shardline local ...` (`shardline._cli`), run from the team's project folder:

shardline local up --app cdk.out [--stack S] [--stream NAME=SHARDS]
shardline local send --count 1000 && shardline local status

`--app` is `--cdk-out`. What the runtime keeps (the Lambda runtime's packages, a run's pid and logs)
is in `local.home`; an installed runtime installs the packages on its first `up`, saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from . import home, running
from .app import model
from .app.template import load, unsupported_reason
from .chaos.profiles import PROFILE_NAMES, ProfileError, load_profile
from .cloudwatch.monitor import DASHBOARD_ROUTE
from .exit_codes import FAILED, INTERRUPTED, NOT_RUNNING, OK, USAGE, UsageError, epilog
from .runtime import DEFAULT_API_PORT, DEFAULT_ENDPOINT_PORT, Runtime, Settings

if TYPE_CHECKING:
    from .commands.send_payloads import Payloads

STATE_DIR = home.state_dir()
PID_FILE = STATE_DIR / "up.pid"
#: How the user runs this command line, for the lines it prints.
COMMAND = "python -m local" if home.IN_REPOSITORY else "shardline local"
#: The producer API's limit on records per request (as Kinesis PutRecords').
MAX_RECORDS_PER_REQUEST = 500


def main(argv: list[str] | None = None, *, prog: str = COMMAND) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a synthesized CDK app on this machine: up | status | send | redrive | usage.",
        epilog=f"{prog} up (from the app's folder, cdk.out there), then {prog} send and {prog} status. "
        + epilog(),
    )
    _where(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="run the app on loopback until Ctrl-C")
    up.add_argument("--no-limits", action="store_true", help="do not enforce Kinesis's per-shard limits")
    up.add_argument(
        "--json", action="store_true",
        help='JSON lines on stdout: {"event": "ready", ...} (endpoints, API, app, pid, groups) once up, '
        '{"event": "stopped"} at the end; the rest on stderr',
    )  # fmt: skip
    up.add_argument(
        "--no-iam", action="store_true",
        help="do not authorize requests (every local call is allowed, as before; deployed, they are not)",
    )  # fmt: skip
    up.add_argument("--log-dir", type=Path, default=STATE_DIR / "logs", help="the functions' output")
    up.add_argument("--max-workers", type=int, default=4, help="warm workers per function, at most")
    up.add_argument(
        "--chaos",
        default="none",
        metavar="PROFILE",
        help=f"inject faults: {', '.join(PROFILE_NAMES)}, or a TOML/JSON profile file (see README)",
    )
    up.add_argument(
        "--stream", dest="streams", action="append", default=[], metavar="NAME=SHARDS",
        help="a stream the app names by ARN but does not define (an existing one): its shards "
        "(default: 1 each; such streams are created locally either way)",
    )  # fmt: skip

    status = commands.add_parser("status", help="streams, shards, consumer groups, DLQs, functions")
    status.add_argument("--json", action="store_true", help="machine-readable")

    send = commands.add_parser("send", help="POST records to the API, then check every consumer group")
    send.add_argument("--count", type=int, default=10_000)
    send.add_argument("--duration", type=float, help="seconds to send for, at --rate (instead of --count)")
    send.add_argument(
        "--size", default=None,
        help="bytes of send's own data per record: N, or MIN-MAX (log-uniform; default 100)",
    )  # fmt: skip
    payloads = send.add_mutually_exclusive_group()
    payloads.add_argument(
        "--payload-template", metavar="TEXT|@FILE",
        help="each record's data: a JSON template whose string values hold {id} {seq} {run} {key} {i} {now} "
        '(a value of just "{seq}" or "{i}" is a number; see README)',
    )  # fmt: skip
    payloads.add_argument(
        "--payload-file", type=Path, metavar="FILE",
        help="each record's data: a line of this ndjson file, in order, cycled when --count is larger",
    )  # fmt: skip
    send.add_argument(
        "--keys", type=int, default=100, help="distinct partition keys (a template's {i}: the key's index)"
    )
    send.add_argument("--skew", default="uniform", help="keys: uniform, zipf[:S] or hot[:SHARE]")
    send.add_argument("--poison-rate", type=float, default=0.0, help="share of poison records (450 KiB)")
    send.add_argument("--format", choices=("json", "ndjson"), default="json", help="request bodies")
    send.add_argument("--seed", type=int, help="the same sizes, keys and poison records, run after run")
    send.add_argument("--rate", type=float, default=None, help="records/s at most (default: unpaced)")
    send.add_argument(
        "--records-per-request", "--batch", dest="batch", type=int, default=500, metavar="N",
        help="records per request, 1-500 (fewer when their bodies would pass 5 MB)",
    )  # fmt: skip
    send.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    send.add_argument("--stream", default=None, help="the API's stream name (default: the first)")
    send.add_argument(
        "--api-key", default=None, help="a client's API key (default: the first of the app's clients, if any)"
    )
    send.add_argument("--timeout", type=float, default=600, help="seconds to wait for the sinks")
    send.add_argument("--no-wait", action="store_true", help="only send; do not wait for the consumers")
    send.add_argument("--json", action="store_true", help="print the verdict as JSON, alone (no progress)")
    send.add_argument(
        "--no-ids", dest="ids", action="store_false",
        help="records without ids, requests without Idempotency-Key (re-posted records: at least once)",
    )  # fmt: skip
    send.add_argument(
        "--lose-replies", type=float, default=0.0,
        help="share of the API's answers dropped after they were read (written; the client re-posts)",
    )  # fmt: skip

    redrive = commands.add_parser(
        "redrive", help="put what a consumer group's on-failure queue points at back through the group"
    )
    redrive.add_argument("group", help="the consumer group (SHARDLINE_GROUP) or its function's name")
    redrive.add_argument("--log-dir", type=Path, default=STATE_DIR / "logs", help="the functions' output")
    redrive.add_argument("--json", action="store_true", help="what was redriven, as one JSON object")

    usage = commands.add_parser("usage", help="the billable operations so far, per component")
    usage.add_argument("--json", action="store_true", help="machine-readable")
    usage.add_argument("--reset", action="store_true", help="zero the counters (after showing them)")

    for command in (up, status, send, redrive, usage):
        _where(command, suppress=True)  # also after the command: `make local LOCAL_ARGS=--api-port=3001`
    args = parser.parse_args(argv)
    verbs = {"up": _up, "status": _status, "send": _send, "redrive": _redrive, "usage": _usage}
    try:
        problem = _find_the_app(args)
        if problem:
            raise UsageError(problem)
        return verbs[args.command](args)
    except UsageError as error:
        print(f"{prog} {args.command}: {error}", file=sys.stderr)
        return USAGE
    except NotRunning as error:
        print(f"{prog} {args.command}: {error}", file=sys.stderr)
        return NOT_RUNNING
    except KeyboardInterrupt:
        print(f"{prog} {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED


class NotRunning(Exception):
    """No app answers where the command looked for it (`NOT_RUNNING`)."""


def _answers(url: str) -> bool:
    """Something accepts a connection at `url`'s host and port (the app is up there)."""
    import socket
    import urllib.parse

    where = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((where.hostname or "127.0.0.1", where.port or 80), timeout=2):
            return True
    except OSError:
        return False


def _require_running(*urls: str) -> None:
    """`NotRunning` unless every one of `urls` answers."""
    for url in urls:
        if not _answers(url):
            raise NotRunning(f"no app answers at {url}: is `{COMMAND} up` running (and on these ports)?")


def _find_the_app(args: argparse.Namespace) -> str | None:
    """Fill in the app and the ports not given: for `up`, the defaults; for a command that talks to
    a running app and was given none of them, the app up from this folder, else the only one up
    (`local.running`); what to say when several are up and none from here."""
    given = args.cdk_out is not None or args.endpoint_port is not None or args.api_port is not None
    run = None
    if args.command != "up" and not given:
        located = running.locate()
        if located.problem:
            return located.problem
        run = located.run
        if run is None and not (args.cdk_out or Path("cdk.out")).joinpath("manifest.json").exists():
            raise NotRunning(f"no app is up (none registered in {home.runs_dir()}) and no cdk.out here")
    if run is not None:
        args.cdk_out, args.stack = Path(run.cdk_out), args.stack or run.stack
        args.endpoint_port, args.api_port = run.endpoint_port, run.api_port
        return None
    args.cdk_out = args.cdk_out if args.cdk_out is not None else Path("cdk.out")
    args.endpoint_port = args.endpoint_port if args.endpoint_port is not None else DEFAULT_ENDPOINT_PORT
    args.api_port = args.api_port if args.api_port is not None else DEFAULT_API_PORT
    return None


def _where(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Where the app and the runtime are: accepted before the command and after it."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--cdk-out", "--app", dest="cdk_out", type=Path, default=default(None),
        help="the synthesized app (the cloud assembly folder `cdk synth` writes; default: cdk.out, or "
        "the running app's)",
    )  # fmt: skip
    parser.add_argument("--stack", default=default(None), help="the stack to run, when cdk.out holds several")
    parser.add_argument(
        "--endpoint-port", type=int, default=default(None),
        help=f"default: {DEFAULT_ENDPOINT_PORT}, or the running app's",
    )  # fmt: skip
    parser.add_argument(
        "--api-port", type=int, default=default(None),
        help=f"default: {DEFAULT_API_PORT}, or the running app's",
    )  # fmt: skip


#: How `up` names each step of `Runtime.start` (`local.runtime.STEPS`).
STEP_LABELS = {
    "endpoint": "AWS endpoint",
    "resources": "resources",
    "iam": "IAM",
    "functions": "functions",
    "sandbox": "handlers",
    "api": "REST API",
    "mappings": "event-source mappings",
    "workers": "worker groups",
    "dashboard": "dashboard and alarms",
}


def _up(args: argparse.Namespace) -> int:
    # With --json, stdout is the JSON lines' alone: the words go to stderr.
    console = Console(highlight=False, soft_wrap=True, stderr=args.json)
    try:
        chaos = load_profile(args.chaos)
    except ProfileError as error:
        console.print(f"[red]bad --chaos[/]: {error}")
        return USAGE
    try:
        existing = _parse_streams(args.streams)
    except ValueError as error:
        console.print(f"[red]bad --stream[/]: {error}")
        return USAGE
    refused = _cannot_start(console, args)
    if refused:
        return refused
    settings = Settings(
        cdk_out=args.cdk_out,
        stack=args.stack,
        endpoint_port=args.endpoint_port,
        api_port=args.api_port,
        limits=not args.no_limits,
        iam=not args.no_iam,
        log_dir=args.log_dir,
        max_workers=args.max_workers,
        chaos=chaos,
        existing_streams=existing,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    # Ctrl-C raises KeyboardInterrupt even when started in the background of a script (which starts
    # a program with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with console.status("starting the AWS endpoint", spinner="dots") as spinner:
        labels = STEP_LABELS
        following = {
            "endpoint": "creating the template's resources",
            "resources": "authorizing every principal",
            "iam": "warming the functions",
            "functions": "serving the REST API",
            "api": "starting the event-source mappings",
            "mappings": "reading the dashboard and the alarms",
        }

        def step(name: str, detail: str) -> None:
            mark = "[bold red]✗[/]" if detail.startswith("NOT ") else "[green]✓[/]"  # the sandbox refused
            console.print(f"{mark} {labels[name]:<22} {detail}")
            if name in following:
                spinner.update(following[name])

        runtime = Runtime(settings, on_step=step)
        if not (settings.cdk_out / "manifest.json").exists():
            hint = "`make local` synthesizes it" if home.IN_REPOSITORY else "run `cdk synth`, or give --app"
            console.print(f"[red]no synthesized app in {settings.cdk_out}[/]: {hint}")
            return USAGE
        try:
            runtime.start()
        except KeyboardInterrupt:
            console.print("interrupted: stopped everything")
            return INTERRUPTED
        except Exception as error:  # a port in use, a template the runtime cannot read: say which
            console.print(f"[red]could not start[/]: {type(error).__name__}: {error}")
            if not isinstance(error, OSError | ValueError):  # not the machine's or the app's: ours
                console.print_exception(max_frames=8)  # what a report of the defect needs
            console.print("stopped everything it had started")
            return FAILED
    return _serve(console, runtime, done, json_lines=args.json)


def _serve(console: Console, runtime: Runtime, done: threading.Event, *, json_lines: bool) -> int:
    """The app is up: say where it is (`json_lines`: also as `up --json`'s ready line), registered
    for the other commands, until Ctrl-C or SIGTERM (`done`); then everything stopped."""
    settings = runtime.settings
    STATE_DIR.mkdir(exist_ok=True)
    PID_FILE.write_text(str(os.getpid()))
    registered = running.register(
        running.Run(
            pid=os.getpid(), folder=str(Path.cwd().resolve()), cdk_out=str(settings.cdk_out.resolve()),
            stack=settings.stack, endpoint_port=settings.endpoint_port, api_port=settings.api_port,
        )
    )  # fmt: skip
    try:
        _print_ready(console, runtime)
        if json_lines:
            _json_line(ready_event(runtime))
        try:
            while not done.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        console.print("stopping ...")
    finally:
        runtime.stop()
        PID_FILE.unlink(missing_ok=True)
        registered.unlink(missing_ok=True)
    console.print("stopped: no process left behind")
    if json_lines:
        _json_line({"event": "stopped", "pid": os.getpid()})
    return OK


def _json_line(event: dict[str, object]) -> None:
    print(json.dumps(event, separators=(",", ":")), flush=True)


def ready_event(runtime: Runtime) -> dict[str, object]:
    """`up --json`'s first line: where everything is, what a script needs to talk to the app."""
    from .commands.status import consumer_groups

    app, settings = runtime.app, runtime.settings
    assert app is not None
    return {
        "event": "ready",
        "pid": os.getpid(),
        "folder": str(Path.cwd().resolve()),
        "app": str(settings.cdk_out.resolve()),
        "stack": app.stack_name,
        "endpoint_url": runtime.endpoint_url,
        "api_url": runtime.api_url if runtime.api is not None else None,
        "dashboard_url": f"{runtime.api.url}{DASHBOARD_ROUTE}" if runtime.api is not None else None,
        "region": model.REGION,
        "account": model.ACCOUNT,
        "credentials": {"access_key_id": model.ACCESS_KEY, "secret_access_key": model.SECRET_KEY},
        "api_keys": {plan.name: plan.value for plan in (app.apis[0].keys if app.apis else ())},
        "streams": [stream.name for stream in app.streams],
        "groups": consumer_groups(app),
        "log_dir": str(settings.log_dir),
        "started_in_s": round(runtime.started_in, 3),
    }


def _print_not_as_deployed(console: Console, runtime: Runtime) -> None:
    """What runs here otherwise than deployed: each function's and each worker group's note."""
    functions, services = runtime.functions, runtime.services
    notes = [(name, stats) for name, stats in (functions.stats() if functions is not None else {}).items()]
    notes += [
        (f"worker group {name}", stats) for name, stats in (services.stats() if services else {}).items()
    ]
    for name, stats in notes:
        if stats.get("not_as_deployed"):
            console.print(f"[bold red]not as deployed[/]: {name}: {stats['not_as_deployed']}")


def _print_ready(console: Console, runtime: Runtime) -> None:
    app = runtime.app
    assert app is not None
    by_type: dict[str, list[str]] = {}
    for logical_id, kind in app.unsupported:
        by_type.setdefault(kind, []).append(logical_id)
    if by_type:
        console.print("[dim]not run locally:[/]")
        for kind, ids in sorted(by_type.items()):
            console.print(f"[dim]  {kind} ×{len(ids)}: {unsupported_reason(kind)}[/]")
    by_property: dict[tuple[str, str], list[str]] = {}
    for entry in app.not_emulated:
        by_property.setdefault((entry.property, entry.difference), []).append(entry.logical_id)
    if by_property:
        console.print("[yellow]not emulated[/] (the app runs without these; `status` lists them):")
        for (name, difference), ids in sorted(by_property.items()):
            console.print(
                f"  {name} ({len(ids)}: {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''}): {difference}"
            )
    _print_not_as_deployed(console, runtime)
    stream = app.streams[0].name if app.streams else "?"
    route = _route_name(app)
    settings = runtime.settings
    ports = ""
    if (settings.endpoint_port, settings.api_port) != (DEFAULT_ENDPOINT_PORT, DEFAULT_API_PORT):
        ports = f"--endpoint-port {settings.endpoint_port} --api-port {settings.api_port}"
    if settings.chaos.active:
        console.print(
            f"[yellow]chaos profile {settings.chaos.name}[/]: faults injected at the endpoint and in the "
            "workers; `status` counts them (see README, Chaos)"
        )
    console.print(
        f"\n[bold]shardline is up[/] in {runtime.started_in:.1f} s "
        f"(stack {app.stack_name}, logs in {runtime.settings.log_dir})\n"
        + (
            f"  REST API      {runtime.api_url}   (SigV4, credentials test/test)\n"
            if runtime.api is not None
            else "  REST API      none in this app (`send` needs one; put records with the AWS endpoint)\n"
        )
        + f"  AWS endpoint  {runtime.endpoint_url}   (region {model.REGION}, account {model.ACCOUNT})\n"
        + (
            f"  Dashboard     {runtime.api.url}{DASHBOARD_ROUTE}"
            f"{'   (or: make dashboard)' if home.IN_REPOSITORY else ''}\n"
            if runtime.api is not None
            else ""
        )
        + "\nTry, in another terminal:\n"
        + (
            f"  {_command()} send --count 20000 {ports}{'   # or: make send' if home.IN_REPOSITORY else ''}\n"
            if runtime.api is not None
            else ""
        )
        + f"  {_command()} status {ports}{'   # or: make status' if home.IN_REPOSITORY else ''}\n"
        f"  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test aws --endpoint-url {runtime.endpoint_url} "
        f"--region {model.REGION} kinesis list-shards --stream-name {stream}\n"
        f"\n[dim]{route}. Ctrl-C stops everything.[/]"
    )
    for plan in app.apis[0].keys if app.apis else ():
        console.print(f"  API key of {plan.name}: {plan.value}   (header x-api-key)")


def _command() -> str:
    return ".venv/bin/python -m local" if home.IN_REPOSITORY else COMMAND


def _parse_streams(values: list[str]) -> dict[str, int]:
    """`--stream NAME=SHARDS` (repeatable) as {name: shards}."""
    streams = {}
    for value in values:
        name, _, shards = value.partition("=")
        if not name or not shards.isdigit() or not 1 <= int(shards) <= 10_000:
            raise ValueError(f"{value!r}: give NAME=SHARDS, SHARDS a whole number from 1")
        streams[name] = int(shards)
    return streams


def _runtime_packages(console: Console) -> bool:
    """The Lambda runtime's packages and the Powertools layer, installed the first time (installed
    runtime; in this repository `make setup` installs them); False when that failed."""
    from .lambda_ import runtimes

    missing = runtimes.missing()
    if not missing or home.IN_REPOSITORY:
        return True
    console.print(
        f"installing the Lambda runtime's packages (boto3 ...) and the Powertools layer into "
        f"{runtimes.ROOT} (once; pinned, hashes checked; $SHARDLINE_CACHE_DIR to choose where)"
    )
    try:
        with console.status("pip install ...", spinner="dots"):
            runtimes.install()
    except (OSError, subprocess.CalledProcessError) as error:
        console.print(f"[red]could not install them[/]: {error}")
        return False
    console.print(f"[green]✓[/] {'Lambda runtime':<22} {runtimes.ROOT}")
    return True


def _route_name(app: model.LocalApp) -> str:
    if not app.apis:
        return "no REST API in this app"
    paths = ", ".join(f"{m.http_method} {m.path}" for m in app.apis[0].methods)
    return f"routes: {paths}"


def _cannot_start(console: Console, args: argparse.Namespace) -> int | None:
    """Before `up` starts anything: a killed run of this folder stopped; the exit status (said why)
    when another app holds the ports (2) or the Lambda runtime's packages are missing (1)."""
    _stop_previous_run(console)
    if not _ports_free(console, args.endpoint_port, args.api_port):
        return USAGE
    return None if _runtime_packages(console) else FAILED


def _ports_free(console: Console, endpoint_port: int, api_port: int) -> bool:
    """No other app up on this machine listens on the ports `up` was given (said when one does)."""
    holder = running.holder_of(endpoint_port, api_port)
    if holder is not None:
        console.print(
            f"[red]ports taken[/]: the app up from {holder.folder} (pid {holder.pid}) listens on "
            f"{holder.endpoint_port} and {holder.api_port}: stop it, or give this one other ports "
            "(--endpoint-port, --api-port)"
        )
    return holder is None


def _stop_previous_run(console: Console) -> None:
    """A run that was killed without cleaning up leaves its pid: stop it (its children die with it)."""
    if not PID_FILE.exists():
        return
    try:
        pid = int(PID_FILE.read_text())
    except (ValueError, OSError):
        PID_FILE.unlink(missing_ok=True)
        return
    if running.is_local_up(pid) and pid != os.getpid():
        console.print(f"stopping the previous run (pid {pid})")
        os.kill(pid, signal.SIGTERM)
    PID_FILE.unlink(missing_ok=True)


def _local_app(args: argparse.Namespace) -> tuple[model.LocalApp, str, str]:
    endpoint_url = f"http://127.0.0.1:{args.endpoint_port}"
    if not (args.cdk_out / "manifest.json").exists():
        raise UsageError(f"no synthesized app in {args.cdk_out}: give the one `up` runs (--app)")
    app = load(args.cdk_out, endpoint_url=endpoint_url, stack=args.stack)
    api_url = f"http://127.0.0.1:{args.api_port}/{app.apis[0].stage}" if app.apis else ""
    return app, endpoint_url, api_url


def _status(args: argparse.Namespace) -> int:
    from .commands.status import collect, render

    app, endpoint_url, _ = _local_app(args)
    report = collect(app, endpoint_url=endpoint_url, api_base=f"http://127.0.0.1:{args.api_port}")
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        render(report, Console(highlight=False, soft_wrap=True))
    # Up means every part a command talks to answers: the endpoint, and the API where the app has one
    # (it starts after the functions: a script waiting for `up` must not post before it answers).
    down = "error" in report.get("kinesis", {}) or (bool(app.apis) and "error" in report.get("runtime", {}))
    return NOT_RUNNING if down else OK


def _usage(args: argparse.Namespace) -> int:
    from .commands.usage import fetch, render

    reading = fetch(f"http://127.0.0.1:{args.api_port}", reset=args.reset)
    if args.json:
        print(json.dumps(reading, indent=2))
    else:
        render(reading, Console(highlight=False))
    return NOT_RUNNING if "error" in reading else OK


def _send(args: argparse.Namespace) -> int:
    from .commands.send import send
    from .commands.send_progress import display_for
    from .commands.send_shapes import ShapeError, parse_size
    from .commands.status import function_errors, groups_line
    from .commands.verify import wait_and_verify
    from .commands.verify_render import render

    app, endpoint_url, api_url = _local_app(args)
    stream = args.stream or _first_stream_route(app)
    display = display_for(json_output=args.json)  # stderr: stdout is the verdict's
    api_base = f"http://127.0.0.1:{args.api_port}"
    try:
        payloads = _payloads(args)
        low, high = parse_size(args.size or "100")
        if not 1 <= args.batch <= MAX_RECORDS_PER_REQUEST:
            raise ShapeError(f"--records-per-request: 1 to {MAX_RECORDS_PER_REQUEST}, got {args.batch}")
        if args.duration is not None and not args.rate:
            raise ShapeError("--duration needs --rate (records/s)")
        count = int(args.duration * args.rate) if args.duration is not None else args.count
        _require_running(api_base, endpoint_url)  # before anything is sent
        errors_before = function_errors(api_base)
        report = send(
            f"{api_url}/streams", stream, count=count, size=low, max_size=high, keys=args.keys,
            skew=args.skew, rate=args.rate, batch=args.batch, concurrency=args.concurrency,
            progress=False, poison_rate=args.poison_rate, ndjson=args.format == "ndjson", display=display,
            seed=args.seed, monitor=lambda: groups_line(app, endpoint_url=endpoint_url, api_base=api_base),
            ids=args.ids, lose_replies=args.lose_replies, api_key=args.api_key or _first_api_key(app),
            payloads=payloads,
        )  # fmt: skip
    except ShapeError as error:
        raise UsageError(str(error)) from None
    if args.no_wait:
        display.stop()
        return OK

    def errors_since(function: str) -> int | None:
        now, before = function_errors(api_base).get(function), errors_before.get(function, 0)
        return None if now is None else now - before

    verdict = wait_and_verify(
        endpoint_url,
        app,
        report,
        timeout=args.timeout,
        progress=False,
        function_errors=errors_since,
        display=display,
    )
    display.stop()
    print(json.dumps(verdict.as_dict(), indent=2, default=str) if args.json else render(verdict))
    return OK if verdict.ok else FAILED


def _payloads(args: argparse.Namespace) -> Payloads | None:
    """`--payload-template` or `--payload-file`, read and checked (a `PayloadError` when they cannot be)."""
    from .commands.send_payloads import load_payload_file, parse_template
    from .commands.send_shapes import ShapeError

    if args.payload_template is None and args.payload_file is None:
        return None
    if args.size is not None:
        raise ShapeError("--size sets send's own payloads: not with --payload-template or --payload-file")
    if args.payload_template is not None:
        return parse_template(args.payload_template)
    return load_payload_file(args.payload_file)


def _redrive(args: argparse.Namespace) -> int:
    from .commands.redrive import RedriveError, RedriveOutcome, RedriveUnreachable, redrive_group

    app, endpoint_url, _ = _local_app(args)
    outcome = RedriveOutcome()
    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    try:
        code = redrive_group(
            app, args.group, endpoint_url=endpoint_url, log_dir=args.log_dir, say=say, outcome=outcome
        )
    except RedriveUnreachable as error:
        raise NotRunning(str(error)) from None
    except RedriveError as error:
        raise UsageError(str(error)) from None
    if args.json:
        print(json.dumps(outcome.as_dict(), indent=2, default=str))
    return OK if code == 0 else FAILED


def _first_api_key(app: model.LocalApp) -> str | None:
    """The local value of the API's first client key (an API with clients refuses a request without)."""
    keys = app.apis[0].keys if app.apis else ()
    return keys[0].value if keys else None


def _first_stream_route(app: model.LocalApp) -> str:
    """The producer's name for the first stream (its SHARDLINE_STREAMS key, e.g. "events")."""
    from .app import environments

    for function in app.functions:
        routes = environments.routes(function)
        if routes:
            return next(iter(routes))
    raise UsageError("no producer function (SHARDLINE_STREAMS) in this app: `send` posts to its API")


if __name__ == "__main__":
    sys.exit(main())
