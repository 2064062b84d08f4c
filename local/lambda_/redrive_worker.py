"""A consumer group's own code, packaged as Lambda runs it, redriving on-failure messages: the main of
the process `local.commands.redrive` starts.

Run as `python -I local/lambda_/redrive_worker.py <config JSON>` with the function's environment (as
`local.lambda_.worker` is: standard library only here; `sys.path` is the function's code folder, then its
layers). It imports the handler's module, finds the group's consumer there — a module-level
`KinesisConsumer`, or a `ConsumerFunction` (whose consumer is built from the environment) — and
then, for each line in (`{"body": <on-failure message>}`), runs `shardline.consumer.redrive` and
answers one line out (`{"ok": true, "result": {...}}` or `{"ok": false, "error": "..."}`). The first
line out is `{"ready": true, "group": ...}` or `{"ready": false, "error": ...}`. The handler's own
output goes to stderr (the function's log), never into the answers.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
import traceback

#: typing.TYPE_CHECKING without importing typing: the types are for mypy only (at run time nothing but
#: the standard library is imported before the function's code is on sys.path).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import IO, Any, TypedDict

    from shardline.consumer import KinesisConsumer

    class RedriveConfig(TypedDict):
        """The config JSON `local.commands.redrive` starts the worker with (argv[1])."""

        code_dir: str
        layer_python_dirs: list[str]
        runtime_site: str | None  # the runtime's own packages (boto3, ...), as the function's workers have


def python_path(config: RedriveConfig) -> list[str]:
    """Lambda's order: the task root, the layers (their site-packages when they have one), then the
    runtime's own packages."""
    paths = [config["code_dir"]]
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for layer in config["layer_python_dirs"]:
        site = os.path.join(layer, "lib", version, "site-packages")
        paths += [site, layer] if os.path.isdir(site) else [layer]
    runtime_site = config.get("runtime_site")
    return [*paths, *([runtime_site] if runtime_site else [])]


def find_consumer(module: ModuleType) -> tuple[KinesisConsumer, Any]:
    """(consumer, Kinesis client) of the one consumer the handler's module defines."""
    import boto3

    from shardline.aws_lambda import ConsumerFunction
    from shardline.consumer import KinesisConsumer

    found: list[tuple[KinesisConsumer, Any]] = []
    for value in vars(module).values():
        if isinstance(value, KinesisConsumer):
            found.append((value, None))
        elif isinstance(value, ConsumerFunction):
            found.append((value.get(), value.client("kinesis")))
    unique = {id(consumer): (consumer, kinesis) for consumer, kinesis in found}
    if len(unique) != 1:
        raise LookupError(
            f"module {module.__name__} defines {len(unique)} consumers: a redrive needs exactly one "
            "module-level KinesisConsumer or ConsumerFunction"
        )
    consumer, kinesis = next(iter(unique.values()))
    return consumer, kinesis if kinesis is not None else boto3.client("kinesis")


def answer(out: IO[str], message: dict[str, object]) -> None:
    out.write(json.dumps(message, default=str) + "\n")
    out.flush()


def main() -> int:
    config: RedriveConfig = json.loads(sys.argv[1])
    # Run by path, this file's folder heads sys.path: the runtime's own modules are not the function's.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # print() and log lines of the handler's code go to the function's log
    sys.path[:0] = python_path(config)
    try:
        module = importlib.import_module(os.environ["_HANDLER"].rsplit(".", 1)[0].replace("/", "."))
        consumer, kinesis = find_consumer(module)
        from shardline.consumer import redrive
    except Exception as exc:
        answer(out, {"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    answer(out, {"ready": True, "group": consumer.group})
    for line in sys.stdin:
        try:
            result = redrive(consumer, kinesis, json.loads(line)["body"])
        except Exception as exc:  # a refused message, Kinesis or DynamoDB failing: this message only
            traceback.print_exc()
            answer(out, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            continue
        fields = dataclasses.asdict(result)
        fields["complete"] = result.complete
        fields["missing"] = str(result.missing) if result.missing is not None else None
        answer(out, {"ok": True, "result": fields})
    return 0


if __name__ == "__main__":
    sys.exit(main())
