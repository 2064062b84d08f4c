"""`shardline`: the command line of the installed package (`[project.scripts]`).

    shardline local up --app cdk.out [--stack S]   # a synthesized app on loopback, until Ctrl-C
    shardline local status | send ... | redrive GROUP | usage
    shardline worker --stream S --group G --lease-table T --handler app:function

`local` is the local runtime's command line (`shardline.local`, the `local` extra): the same as
`python -m local ...` in shardline's repository. `worker` runs one worker of a consumer group
(`_worker_command`). Nothing heavy is imported until a subcommand runs, and a missing extra is
named with the command that installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence

__all__ = ["main"]

#: The modules the `local` extra brings (a ModuleNotFoundError naming one means the extra is missing).
LOCAL_EXTRA_MODULES = frozenset({"moto", "rich", "jsonschema", "werkzeug", "flask", "flask_cors", "yaml"})
#: How to get it: shardline is installed from a clone or its wheel (no package index has it yet).
INSTALL_LOCAL = 'install shardline with its `local` extra: pip install "<its folder or wheel>[local]"'


def _local(argv: list[str]) -> int:
    """`shardline local ...`: the local runtime's own command line."""
    if importlib.util.find_spec("shardline.local") is None:
        print(f"shardline local: the local runtime is not installed: {INSTALL_LOCAL}", file=sys.stderr)
        return 2
    try:
        entry = importlib.import_module("shardline.local.__main__")
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] not in LOCAL_EXTRA_MODULES:
            raise
        print(
            f"shardline local needs the `local` extra ({error.name} is missing): {INSTALL_LOCAL}",
            file=sys.stderr,
        )
        return 2
    run: Callable[..., int] = entry.main
    return run(argv, prog="shardline local")


def _worker(argv: list[str]) -> int:
    """`shardline worker ...`: one worker of a consumer group (`_worker_command`)."""
    from shardline._worker_command import main as worker_main

    return worker_main(argv, prog="shardline worker")


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "local": (_local, "run a synthesized CDK app on this machine (up, status, send, redrive, usage)"),
    "worker": (_worker, "consume a stream as one worker of a consumer group, until SIGTERM"),
}


def _usage() -> str:
    lines = ["usage: shardline <command> [options]", "", "commands:"]
    lines += [f"  {name:<8} {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "`shardline <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        from shardline import __version__

        print(f"shardline {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"shardline: no command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return command[0](args[1:])


if __name__ == "__main__":
    sys.exit(main())
