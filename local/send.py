"""`python -m local send`: a small load generator that POSTs records to the REST API and counts the answers.

    report = send("http://127.0.0.1:3000/v1/streams", "events", count=20_000)
    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)   # local.verify

Records go in requests of at most `batch` records and `BODY_BUDGET` bytes from `concurrency` threads
(one keep-alive connection each), as JSON or ndjson, paced to at most `rate` records/s, SigV4-signed
with the local credentials; sizes, keys and poison records follow a `LoadShape` (`local._send_shapes`).

Each record ends in one of three outcomes, and a retry never risks a copy:
- accepted: a 200, or a 207 entry with a position;
- refused: nothing was written — a 4xx, or a not-written answer still failing after MAX_ATTEMPTS;
  what says "not written" is retried: the failed entries of a 207 (same order; every code but
  OutcomeUnknown), a 503 after its `Retry-After`, a 429 (after `Retry-After`, else a growing pause);
- unknown: the answer cannot say whether it was written — no answer, a 502, 504 or other 5xx, or a
  207 entry `OutcomeUnknown` (a Kinesis reply lost and not settled) — never retried.

Each record's data is compact JSON, padded to `size` bytes, that the verdict reads back in the
sinks and dead-letter queues (see `payload`):

    {"run":"<run id>","seq":<0..count-1>,"t":<epoch seconds of the first POST>,"poison":true,"pad":"xxx"}

`poison` is present only on poison records; partition keys are `<run id>-k<index>`, so a run's
counters never mix with an earlier run's.
"""

from __future__ import annotations

import base64
import http.client
import json
import queue
import secrets
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from local import model
from local._send_http import MAX_BACKOFF_S, Client, Pacer, retry_after
from local._send_shapes import LoadShape

if TYPE_CHECKING:
    from local.verify import Verdict

MAX_ATTEMPTS = 20  # per record; a record still failing after that is counted as failed
BODY_BUDGET = 5_000_000  # bytes of one request body at most (the API takes 6,000,000)
OUTCOME_UNKNOWN = "OutcomeUnknown"  # a 207 entry that may have been written (shardline.errors)
UNKNOWN_STATUSES = (0, 500, 502, 504)  # no answer or a server error: written or not, nobody knows


def payload(run_id: str, seq: int, post_time: float, size: int, poison: bool = False) -> bytes:
    """A record's data: what the verdict looks for; at least `size` bytes (exactly, when size allows)."""
    head: dict[str, Any] = {"run": run_id, "seq": seq, "t": round(post_time, 6)}
    if poison:
        head["poison"] = True
    text = json.dumps({**head, "pad": ""}, separators=(",", ":"))
    return json.dumps({**head, "pad": "x" * max(0, size - len(text))}, separators=(",", ":")).encode()


def parse_payload(data: bytes) -> dict[str, Any] | None:
    """The fields of a payload `send` wrote, or None for any other data."""
    try:
        fields = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if isinstance(fields, dict) and isinstance(fields.get("run"), str) and isinstance(fields.get("seq"), int):
        return fields
    return None


def partition_key(run_id: str, index: int) -> str:
    return f"{run_id}-k{index}"


@dataclass
class Accepted:
    """Where the API says a record was written, and when it was first POSTed."""

    key: str
    post_time: float
    shard_id: str | None
    sequence_number: str | None
    sub_sequence_number: int | None
    poison: bool


@dataclass
class SendReport:
    """What `send` did: every record's fate, counts of requests and retries, the timing."""

    run_id: str
    stream: str
    api_url: str
    count: int
    size: int  # the largest record's data (poison aside): what `payload` pads to
    keys: int
    poison_every: int
    shape: LoadShape = field(repr=False, default_factory=lambda: LoadShape(0))
    accepted: dict[int, Accepted] = field(default_factory=dict)  # seq -> where it went
    failed: dict[int, str] = field(default_factory=dict)  # seq -> why it was refused (the last answer)
    unknown: dict[int, Accepted] = field(default_factory=dict)  # seq -> maybe written (no position)
    unknown_reasons: Counter[str] = field(default_factory=Counter)
    throttled_entries: int = 0  # 207 entries answered with a throttle
    requests: int = 0
    retried_records: int = 0  # record re-sends (207 entries, 503/429/connection retries)
    statuses: Counter[int] = field(default_factory=Counter)  # HTTP status -> requests (0: no answer)
    started: float = 0.0
    finished: float = 0.0  # when the last answer arrived (epoch seconds)

    @property
    def elapsed(self) -> float:
        return max(0.0, self.finished - self.started)

    @property
    def accepted_per_second(self) -> float:
        return len(self.accepted) / self.elapsed if self.elapsed > 0 else 0.0

    def key_names(self) -> list[str]:
        return [partition_key(self.run_id, i) for i in range(min(self.keys, self.count))]

    def expected_counts(self) -> Counter[str]:
        """Per partition key, the accepted records a counter should count (poison too: it is
        poison for the event sink only)."""
        return Counter(record.key for record in self.accepted.values())

    def payload_of(self, seq: int, post_time: float) -> bytes:
        """The data `send` wrote for record `seq` (first POSTed at `post_time`)."""
        return payload(self.run_id, seq, post_time, self.shape.size(seq), self.shape.poison(seq))

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "stream": self.stream,
            "count": self.count,
            "size": [self.shape.min_size, self.shape.max_size],
            "keys": self.keys,
            "skew": self.shape.skew,
            "accepted": len(self.accepted),
            "refused": len(self.failed),
            "refusal_reasons": dict(Counter(self.failed.values()).most_common(5)),
            "unknown": len(self.unknown),
            "unknown_reasons": dict(self.unknown_reasons.most_common(5)),
            "throttled_entries": self.throttled_entries,
            "poison": sum(1 for record in self.accepted.values() if record.poison),
            "requests": self.requests,
            "retried_records": self.retried_records,
            "statuses": {str(status): n for status, n in sorted(self.statuses.items())},
            "elapsed_s": round(self.elapsed, 3),
            "accepted_per_s": round(self.accepted_per_second, 1),
        }


class _Sender:
    """The threads' shared state: the report, the counters the progress display shows."""

    def __init__(self, report: SendReport, api_url: str, *, sign: bool, pacer: Pacer, ndjson: bool) -> None:
        self.report = report
        self.path = urllib.parse.urlsplit(f"{api_url.rstrip('/')}/{report.stream}/records").path
        self.api_url = api_url
        self.sign = sign
        self.pacer = pacer
        self.ndjson = ndjson
        self.lock = threading.Lock()
        self.sent = 0  # records POSTed, retries included

    def run(self, batches: queue.Queue[list[int]]) -> None:
        client = Client(self.api_url, self.sign)
        try:
            while True:
                try:
                    batch = batches.get_nowait()
                except queue.Empty:
                    return
                self._deliver(client, batch)
        finally:
            client.close()

    def _deliver(self, client: Client, seqs: list[int]) -> None:
        report = self.report
        records: dict[int, dict[str, str]] = {}
        post_time, pending, attempt = 0.0, list(seqs), 0
        while pending:
            attempt += 1
            self.pacer.wait(len(pending))
            if not records:  # built after the pacing wait: `t` is when the records are first POSTed
                post_time = time.time()
                records = {seq: self._record(seq, post_time) for seq in seqs}
            try:
                body = self._body([records[seq] for seq in pending])
                kind = "application/x-ndjson" if self.ndjson else "application/json"
                status, headers, answer = client.post(self.path, body, kind)
            except (OSError, http.client.HTTPException) as error:
                status, headers, answer = 0, {}, {"message": f"{type(error).__name__}: {error}"}
            with self.lock:
                report.requests += 1
                report.statuses[status] += 1
                report.finished = time.time()
                self.sent += len(pending)
            entries = answer.get("records") if isinstance(answer, dict) else None
            if status in (200, 207) and isinstance(entries, list) and len(entries) == len(pending):
                pending = self._take_entries(pending, entries, records, post_time)
                pause = min(MAX_BACKOFF_S, 0.05 * 2 ** (attempt - 1))
            elif status == 200 and not entries:  # an API that answers 200 without positions
                with self.lock:
                    for seq in pending:
                        report.accepted[seq] = self._accepted(seq, records, post_time, {})
                pending, pause = [], 0.0
            elif status in (429, 503):  # nothing was written: retried after Retry-After
                with self.lock:
                    report.failed.update((seq, f"HTTP {status}") for seq in pending)
                pause = retry_after(headers, attempt - 1)
            elif status in UNKNOWN_STATUSES or status >= 500:  # maybe written: a retry could copy
                reason = f"HTTP {status}" if status else str(answer.get("message"))[:80]
                with self.lock:
                    for seq in pending:
                        report.unknown[seq] = self._accepted(seq, records, post_time, {})
                        report.failed.pop(seq, None)
                    report.unknown_reasons[reason] += len(pending)
                return
            else:  # the API refused (4xx): nothing was written, and retrying cannot help
                reason = f"HTTP {status}: {str(answer.get('message', ''))[:120]}"
                with self.lock:
                    report.failed.update((seq, reason) for seq in pending)
                return
            if pending and attempt >= MAX_ATTEMPTS:
                return
            if pending:
                with self.lock:
                    report.retried_records += len(pending)
                time.sleep(pause)

    def _take_entries(
        self, pending: list[int], entries: list[Any], records: dict[int, dict[str, str]], post_time: float
    ) -> list[int]:
        """Record a 200/207's entries; the records to send again (those it says were not written)."""
        report, retry = self.report, []
        with self.lock:
            for seq, entry in zip(pending, entries, strict=True):
                code = entry.get("errorCode") if isinstance(entry, dict) else "malformed entry"
                if code == OUTCOME_UNKNOWN:
                    report.unknown[seq] = self._accepted(seq, records, post_time, {})
                    report.unknown_reasons[OUTCOME_UNKNOWN] += 1
                    report.failed.pop(seq, None)
                elif code:
                    retry.append(seq)
                    report.failed[seq] = str(code)
                    report.throttled_entries += "Throughput" in str(code) or "Throttl" in str(code)
                else:
                    report.failed.pop(seq, None)
                    report.accepted[seq] = self._accepted(seq, records, post_time, entry)
        return retry

    def _accepted(
        self, seq: int, records: dict[int, dict[str, str]], post_time: float, entry: dict[str, Any]
    ) -> Accepted:
        return Accepted(
            key=records[seq]["partitionKey"],
            post_time=post_time,
            shard_id=entry.get("shardId"),
            sequence_number=entry.get("sequenceNumber"),
            sub_sequence_number=entry.get("subSequenceNumber"),
            poison=self.report.shape.poison(seq),
        )

    def _body(self, records: list[dict[str, str]]) -> bytes:
        if self.ndjson:
            return "\n".join(json.dumps(record, separators=(",", ":")) for record in records).encode()
        return json.dumps({"records": records}, separators=(",", ":")).encode()

    def _record(self, seq: int, post_time: float) -> dict[str, str]:
        report = self.report
        data = report.payload_of(seq, post_time)
        return {
            "partitionKey": partition_key(report.run_id, report.shape.key_index(seq)),
            "data": base64.b64encode(data).decode(),
        }


def batches_of(shape: LoadShape, batch: int) -> list[list[int]]:
    """The records in requests of at most `batch` records and about `BODY_BUDGET` bytes of body."""
    batches: list[list[int]] = []
    current: list[int] = []
    budget = 0
    for seq in range(shape.count):
        cost = shape.size(seq) * 4 // 3 + 200  # base64 data, the key and the JSON around them
        if current and (len(current) >= batch or budget + cost > BODY_BUDGET):
            batches.append(current)
            current, budget = [], 0
        current.append(seq)
        budget += cost
    if current:
        batches.append(current)
    return batches


def send(
    api_url: str,
    stream: str,
    *,
    count: int,
    size: int = 100,
    max_size: int | None = None,
    keys: int = 100,
    skew: str = "uniform",
    rate: float | None = None,
    batch: int = 500,
    concurrency: int = 4,
    sign: bool = True,
    run_id: str | None = None,
    progress: bool = True,
    poison_every: int = 0,
    poison_rate: float = 0.0,
    ndjson: bool = False,
    seed: int | None = None,
    monitor: Callable[[], str] | None = None,
) -> SendReport:
    """POST `count` records to `{api_url}/{stream}/records` and return what became of each.

    Sizes are `size`, or log-uniform in [size, max_size]; keys, poison records: `LoadShape`.
    `monitor()` adds a line to the live display (e.g. the consumer groups' progress)."""
    if batch < 1 or concurrency < 1:
        raise ValueError("batch and concurrency must be >= 1")
    shape = LoadShape(count, size, max_size or size, keys, skew, poison_rate, poison_every, seed)
    report = SendReport(
        run_id=run_id or f"run-{time.strftime('%H%M%S')}-{secrets.token_hex(3)}",
        stream=stream,
        api_url=api_url,
        count=count,
        size=max_size or size,
        keys=keys,
        poison_every=poison_every,
        shape=shape,
    )
    batches: queue.Queue[list[int]] = queue.Queue()
    for seqs in batches_of(shape, batch):
        batches.put(seqs)
    sender = _Sender(report, api_url, sign=sign, pacer=Pacer(rate), ndjson=ndjson)
    report.started = report.finished = time.time()
    threads = [
        threading.Thread(target=sender.run, args=(batches,), name=f"send-{i}", daemon=True)
        for i in range(min(concurrency, batches.qsize()) or 1)
    ]
    for thread in threads:
        thread.start()
    _watch(sender, threads, enabled=progress, monitor=monitor)
    for thread in threads:
        thread.join()
    return report


def _watch(
    sender: _Sender, threads: list[threading.Thread], *, enabled: bool, monitor: Callable[[], str] | None
) -> None:
    """A live display until the threads finish (on a tty only): sent, accepted/s, throttled entries,
    retries, refused, unknown, elapsed; and `monitor()`'s line (the consumer groups)."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        return
    report = sender.report
    watched = {"line": ""}

    def poll_monitor() -> None:  # off the display's thread: it reads other processes
        while monitor is not None and any(thread.is_alive() for thread in threads):
            try:
                watched["line"] = monitor()
            except Exception as error:  # the runtime may not answer: say so, keep sending
                watched["line"] = f"(consumers: {type(error).__name__})"
            time.sleep(1.0)

    def line() -> Text:
        with sender.lock:
            accepted, refused, unknown = len(report.accepted), len(report.failed), len(report.unknown)
            retried, throttled, sent = report.retried_records, report.throttled_entries, sender.sent
        elapsed = max(1e-9, time.time() - report.started)
        text = (
            f"send {report.run_id}: sent {sent:,}/{report.count:,}  accepted {accepted:,} "
            f"({accepted / elapsed:,.0f}/s)  throttled {throttled:,}  retries {retried:,}  "
            f"refused {refused:,}  unknown {unknown:,}  {elapsed:,.1f} s"
        )
        return Text(text + (f"\n{watched['line']}" if watched["line"] else ""))

    threading.Thread(target=poll_monitor, name="send-monitor", daemon=True).start()
    with Live(line(), console=console, refresh_per_second=4, transient=False) as live:
        while any(thread.is_alive() for thread in threads):
            time.sleep(0.25)
            live.update(line())
        live.update(line())


def wait_and_verify(
    endpoint_url: str, app: model.LocalApp, report: SendReport, *, timeout: float = 300, progress: bool = True
) -> Verdict:
    """`local.verify.wait_and_verify` (imported here for the CLI; that module reads this one's payloads)."""
    from local.verify import wait_and_verify as verify

    return verify(endpoint_url, app, report, timeout=timeout, progress=progress)
