"""`python -m local redrive GROUP`: put what a consumer group's on-failure queue points at back through
the group, while the stream still holds it.

    code = redrive_group(app, "event_sink", endpoint_url="http://127.0.0.1:4566", log_dir=Path(".local/logs"))

The group's on-failure queue is its event-source mapping's destination (`status.consumer_groups`).
Its messages are redriven by the group's own function code, packaged as Lambda runs it, in one process
of its own (`local.lambda_.redrive_worker`, with the function's environment, sandboxed as its workers
are by `local.lambda_.sandbox`; its output goes to the function's log), through
`shardline.consumer.redrive`. A message is deleted only once its redrive finished with nothing missing;
any other is left in the queue (visible again) and said why.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from botocore.exceptions import ClientError, EndpointConnectionError

from .. import home
from ..app import model
from ..app.provision import client
from ..lambda_ import sandbox
from ..lambda_.process import log_stream_name
from ..lambda_.runtimes import packaging_for
from ..lambda_.workers import function_environment
from .status import consumer_groups

WORKER_MAIN = Path(__file__).resolve().parents[1] / "lambda_" / "redrive_worker.py"
#: How long a received message stays hidden from others while its redrive runs (released at the end).
VISIBILITY_TIMEOUT_S = 900


class RedriveError(Exception):
    """The group cannot be redriven: no such group, no on-failure queue, its code has no consumer."""


class RedriveUnreachable(RedriveError):
    """No AWS endpoint answers: the app is not running (there)."""


@dataclass
class RedriveOutcome:
    """What a redrive did (`redrive --json`): each message's answer, and how many were redriven or kept."""

    group: str = ""
    queue_url: str = ""
    redriven: int = 0  # messages redriven whole, and deleted
    left: int = 0  # messages kept in the queue (visible again)
    messages: list[dict[str, Any]] = field(default_factory=list)  # per message: ok, result or error, kept

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.left == 0, "group": self.group, "queue_url": self.queue_url, "redriven": self.redriven,
            "left": self.left, "messages": self.messages,
        }  # fmt: skip


def redrive_group(
    app: model.LocalApp,
    name: str,
    *,
    endpoint_url: str,
    log_dir: Path,
    say: Callable[[str], None] = print,
    outcome: RedriveOutcome | None = None,
) -> int:
    """Redrive every message of group `name`'s on-failure queue; 0 when each one went through whole
    (and was deleted), 1 when some are left in the queue. Raises `RedriveError` (`RedriveUnreachable`
    when no endpoint answers). `outcome`, when given, is filled in with what was done."""
    outcome = outcome if outcome is not None else RedriveOutcome()
    groups = consumer_groups(app)
    group = next((g for g in groups if name in (g["group"], g["function"])), None)
    if group is None:
        known = ", ".join(g["group"] for g in groups) or "none"
        raise RedriveError(f"no consumer group {name!r} in this app (groups: {known})")
    if not group["on_failure_arn"]:
        raise RedriveError(f"consumer group {name}: its event-source mapping has no on-failure destination")
    queue_url = model.queue_url(endpoint_url, group["on_failure_arn"].rsplit(":", 1)[-1])
    sqs = client("sqs", endpoint_url)
    try:
        sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    except EndpointConnectionError:
        where = f"no AWS endpoint answers at {endpoint_url}"
        raise RedriveUnreachable(f"{where}: is `{home.UP_COMMAND}` running?") from None
    except ClientError as error:
        raise RedriveError(f"consumer group {name}: its on-failure queue {queue_url}: {error}") from None
    outcome.group, outcome.queue_url = group["group"], queue_url
    kept: list[str] = []  # receipt handles of messages left in the queue
    if (refusal := sandbox.refused()) is not None:
        say(f"not as deployed: the group's code runs not sandboxed: {refusal}")
    done = 0
    with _Worker(app.function(group["function"]), endpoint_url, log_dir) as worker:
        try:
            while True:
                messages = sqs.receive_message(
                    QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=VISIBILITY_TIMEOUT_S
                ).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    reply = worker.redrive(message["Body"])
                    say(describe(reply))
                    whole = bool(reply.get("ok") and reply["result"]["complete"])
                    outcome.messages.append({**reply, "deleted": whole})
                    if whole:
                        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
                        done += 1
                    else:
                        kept.append(message["ReceiptHandle"])
        finally:
            for handle in kept:  # visible again: the next run tries them again
                sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
    outcome.redriven, outcome.left = done, len(kept)
    say(f"consumer group {group['group']}: {done} redriven and deleted, {len(kept)} left in {queue_url}")
    return 1 if kept else 0


def describe(reply: dict[str, Any]) -> str:
    """One line on one message's redrive."""
    if not reply.get("ok"):
        return f"not redriven: {reply.get('error')} (message kept)"
    r = reply["result"]
    line = (
        f"{r['shard_id']} {r['start']}..{r['end'] or '?'}: {r['records_read']} records read, "
        f"{r['processed']} applied, {r['already_applied']} already applied, "
        f"{r['dead_lettered']} dead-lettered"
    )
    if r["missing"]:
        line += f"; MISSING {r['missing']}"
    if not r["finished"]:
        line += f"; not finished (retry from {r['retry_from']}: {r['error']})"
    return line + ("; message deleted" if r["complete"] else "; message kept")


class _Worker:
    """The redrive process of one function (`lambda_.redrive_worker`): one message in, one answer out."""

    def __init__(self, function: model.Function, endpoint_url: str, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(log_dir / f"{function.name}.log", "ab")  # noqa: SIM115 - closed in close()
        packaging = packaging_for(function)  # as its workers run: the runtime's Python and packages
        layers = [*function.layer_dirs, *packaging.public_layers]
        code_dir = str(function.code_dir.resolve())
        layer_python_dirs = [str((layer / "python").resolve()) for layer in layers]
        runtime_site = str(packaging.site) if packaging.site else None
        config = {"code_dir": code_dir, "layer_python_dirs": layer_python_dirs, "runtime_site": runtime_site}
        argv = [packaging.interpreter, "-I", *(["-S"] if packaging.site else []), str(WORKER_MAIN)]
        self.process = subprocess.Popen(
            sandbox.wrap(  # the group's own code: as its workers run it, without power over the repository
                [*argv, json.dumps(config)],
                tmp_mb=function.ephemeral_storage_mb,
                keep=[code_dir, *layer_python_dirs, *filter(None, [runtime_site])],
                cwd=code_dir,
            ),
            cwd=function.code_dir,
            env=function_environment(function, endpoint_url, log_stream_name()),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        ready = self._answer()
        if not ready.get("ready"):
            self.close()
            raise RedriveError(f"function {function.name}: {ready.get('error')} (see {self._log.name})")

    def redrive(self, body: str) -> dict[str, Any]:
        """The worker's answer for one message; `RedriveError` if it died."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps({"body": body}) + "\n")
            stdin.flush()
        except BrokenPipeError:
            pass  # it died: _answer says so
        answer = self._answer()
        if "ok" not in answer:
            raise RedriveError(f"{answer['error']} (see {self._log.name})")
        return answer

    def _answer(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        line = stdout.readline() if stdout is not None else ""
        if not line:
            return {"ready": False, "error": f"the redrive process exited ({self.process.wait()})"}
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()  # the worker ends at the end of its input
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()

    def __enter__(self) -> _Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
