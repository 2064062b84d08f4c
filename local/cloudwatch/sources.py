"""What feeds the metric store, as CloudWatch is fed when the app is deployed.

    collector = Collector(store, app, endpoint_url=..., log_dir=...).start()   # one thread
    collector.log_events                                                       # for the log widget

- **Function logs**: each function's log file (`local.lambda_.workers` writes it), and each worker
  group task's (`local.ecs`), is read as CloudWatch Logs ingests it. An EMF line's metrics go to
  the store (`local.cloudwatch.emf`); every line is
  kept as a log event (the last `MAX_LOG_EVENTS`), JSON lines with their fields, for Logs Insights;
  and billed in the usage ledger (`local.cloudwatch.usage`: events and bytes ingested, EMF documents
  and the distinct metrics they define). `read_logs()` reads them now (a reading of the ledger).
- **The endpoint's service metrics**: Kinesis and DynamoDB (`local.endpoint.service_metrics`), by cursor.
- **Queue depths**: SQS's ApproximateNumberOfMessagesVisible and ...NotVisible per queue, read
  every `QUEUE_EVERY_S` (SQS publishes them once a minute; more often shows a DLQ filling sooner).

Lambda's and API Gateway's metrics are published by the runtime's parts themselves (`Publish`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..app import model
from .emf import EmfError, extract, is_emf
from .metrics import MetricId, MetricStore
from .usage import Usage

__all__ = ["Collector", "LogEvent"]

log = logging.getLogger(__name__)

MAX_LOG_EVENTS = 20_000
QUEUE_EVERY_S = 5.0
#: How the runtime prefixes what it writes into a function's log about the function: not Lambda's output.
RUNTIME_NOTE = "local runtime: "


@dataclass(frozen=True)
class LogEvent:
    """One line of a function's log, as Logs Insights sees it: @timestamp, @log, @message, fields."""

    timestamp: float
    log_group: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


class _LogFile:
    """One function's log, read from where the last read stopped; a partial last line waits.

    The file may hold earlier runs' lines (workers append): shown as log events, never billed."""

    def __init__(self, path: Path, log_group: str) -> None:
        self.path, self.log_group = path, log_group
        self.offset, self.partial = 0, b""
        self.billed_from = path.stat().st_size if path.is_file() else 0

    def new_lines(self) -> list[tuple[str, bool]]:
        """Each new whole line, and whether this run wrote it (billed)."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        position = self.offset - len(self.partial)  # where the first line starts
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        out = []
        for line in lines:
            position += len(line) + 1
            if line:
                out.append((line.decode("utf-8", "replace"), position > self.billed_from))
        return out


class Collector:
    """Reads every source into `store` once a second, in one daemon thread."""

    def __init__(
        self,
        store: MetricStore,
        app: model.LocalApp,
        *,
        endpoint_url: str,
        log_dir: Path,
        usage: Usage | None = None,
    ) -> None:
        self.store, self.app, self.endpoint_url = store, app, endpoint_url
        self.usage = usage if usage is not None else Usage()
        self._logs_lock = threading.Lock()  # the thread's round and a reading's may overlap
        self.log_events: deque[LogEvent] = deque(maxlen=MAX_LOG_EVENTS)
        self.emf_errors = 0  # EMF lines CloudWatch would not extract
        self._files = [
            _LogFile(Path(log_dir) / f"{function.name}.log", function.log_group or function.name)
            for function in app.functions
        ] + [  # a worker group's tasks, each slot's file, into the container's log group
            _LogFile(path, service.log_group or service.name)
            for service in app.workers
            for path in service.log_files(Path(log_dir))
        ]
        self._queues = [r for r in app.resources if r.type == "AWS::SQS::Queue"]
        self._cursor = 0
        self._queues_read_at = 0.0
        self._sqs: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cloudwatch-collector", daemon=True)

    def start(self) -> Collector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.collect_once()

    def collect_once(self) -> None:
        """One round of every source (the thread's loop; tests call it directly)."""
        for source in (self.read_logs, self._read_service_metrics, self._read_queues):
            try:
                source()
            except Exception as exc:  # an endpoint gone or busy: the next round tries again
                log.debug("collecting %s: %r", source.__name__, exc)

    def read_logs(self) -> None:
        """Every function's new log lines: to the store (EMF), the log events and the usage ledger."""
        with self._logs_lock:
            now = time.time()
            for log_file in self._files:
                self._read_log(log_file, now)

    def _read_log(self, log_file: _LogFile, now: float) -> None:
        group, usage = log_file.log_group, self.usage
        events = size = documents = 0
        metrics: list[MetricId] = []
        for line, billed in log_file.new_lines():
            fields = _json_object(line)
            if fields is not None and is_emf(fields):
                try:
                    extracted = extract(fields)
                except EmfError as exc:
                    self.emf_errors += 1
                    log.debug("%s: not extracted: %s", group, exc)
                else:
                    documents += billed
                    for metric, values, timestamp in extracted:
                        self.store.put_id(metric, values, timestamp)
                        if billed:
                            metrics.append(metric)
            if billed and not line.startswith(RUNTIME_NOTE):
                events += 1
                size += len(line.encode())
            self.log_events.append(LogEvent(now, group, line, fields or {}))
        if events:
            usage.add("logs", group, events=events, bytes=size)
        if documents:
            usage.add("emf", group, documents=documents)
            usage.distinct("emf", group, "metrics", metrics)

    def _read_service_metrics(self) -> None:
        url = f"{self.endpoint_url}/_shardline/metrics?after={self._cursor}"
        with urllib.request.urlopen(url, timeout=5) as response:
            answer = json.load(response)
        for _, second, namespace, name, dimensions, values in answer["datapoints"]:
            self.store.put_id(MetricId.of(namespace, name, dimensions), values, second)
        self._cursor = answer["cursor"]

    def _read_queues(self) -> None:
        if not self._queues or time.time() - self._queues_read_at < QUEUE_EVERY_S:
            return
        self._queues_read_at = time.time()
        if self._sqs is None:
            from ..app.provision import client  # an observer's client: chaos never touches it

            self._sqs = client("sqs", self.endpoint_url, retries={"max_attempts": 1})
        sqs = self._sqs
        names = ("ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible")
        for queue in self._queues:
            url = model.queue_url(self.endpoint_url, queue.name)
            attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            for name, attribute in zip(names, ("ApproximateNumberOfMessages", names[1]), strict=True):
                value = float(attributes.get(attribute, 0))
                self.store.put("AWS/SQS", name, {"QueueName": queue.name}, value)


def _json_object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
