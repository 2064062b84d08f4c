"""`python -m local send`: a small load generator that POSTs records to the REST API and counts the answers.

    report = send("http://127.0.0.1:3000/v1/streams", "events", count=20_000)
    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)   # local.verify

Records go in requests of `batch` from `concurrency` threads (one keep-alive connection each), paced
to at most `rate` records/s, SigV4-signed with the local credentials. Only what the API says to
retry is retried: the failed entries of a 207 (same order), a 503 after its `Retry-After`, a 429
(after `Retry-After` if any, else a growing pause); any other answer ends those records as failed.

Each record's data is compact JSON, padded to `size` bytes, that the verdict reads back in the
sinks and dead-letter queues (see `payload`):

    {"run":"<run id>","seq":<0..count-1>,"t":<epoch seconds of the first POST>,"poison":true,"pad":"xxx"}

`poison` is present only on every `poison_every`-th record; partition keys are `<run id>-k<seq % keys>`,
so a run's counters never mix with an earlier run's.
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from rich.console import Console
from rich.live import Live
from rich.text import Text

from local import model

if TYPE_CHECKING:
    from local.verify import Verdict

SERVICE = "execute-api"
MAX_ATTEMPTS = 20  # per record; a record still failing after that is counted as failed
MAX_BACKOFF_S = 2.0
REQUEST_TIMEOUT_S = 60.0


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


def partition_key(run_id: str, seq: int, keys: int) -> str:
    return f"{run_id}-k{seq % keys}"


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
    size: int
    keys: int
    poison_every: int
    accepted: dict[int, Accepted] = field(default_factory=dict)  # seq -> where it went
    failed: dict[int, str] = field(default_factory=dict)  # seq -> why (the last answer)
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
        return [f"{self.run_id}-k{i}" for i in range(min(self.keys, self.count))]

    def expected_counts(self) -> Counter[str]:
        """Per partition key, the accepted records a consumer should count (poison excluded)."""
        return Counter(record.key for record in self.accepted.values() if not record.poison)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "stream": self.stream,
            "count": self.count,
            "size": self.size,
            "keys": self.keys,
            "accepted": len(self.accepted),
            "failed": len(self.failed),
            "failure_reasons": dict(Counter(self.failed.values()).most_common(5)),
            "poison": sum(1 for record in self.accepted.values() if record.poison),
            "requests": self.requests,
            "retried_records": self.retried_records,
            "statuses": {str(status): n for status, n in sorted(self.statuses.items())},
            "elapsed_s": round(self.elapsed, 3),
            "accepted_per_s": round(self.accepted_per_second, 1),
        }


class _Pacer:
    """At most `rate` records/s across all threads: each request waits for its records' share of time."""

    def __init__(self, rate: float | None) -> None:
        self._rate = rate
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self, records: int) -> None:
        if not self._rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + records / self._rate
        time.sleep(max(0.0, start - now))


class _Client:
    """One keep-alive connection to the API, signing each request as the AWS SDKs do."""

    def __init__(self, api_url: str, sign: bool) -> None:
        self._parts = urllib.parse.urlsplit(api_url)
        self._sign = sign
        self._signer = SigV4Auth(Credentials(model.ACCESS_KEY, model.SECRET_KEY), SERVICE, model.REGION)
        self._connection: http.client.HTTPConnection | None = None

    def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], Any]:
        url = urllib.parse.urlunsplit((self._parts.scheme, self._parts.netloc, path, "", ""))
        request = AWSRequest("POST", url, data=body, headers={"Content-Type": "application/json"})
        if self._sign:
            self._signer.add_auth(request)
        headers = {"Host": self._parts.netloc, **dict(request.headers.items())}
        if self._connection is None:
            kind = (
                http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
            )
            self._connection = kind(self._parts.netloc, timeout=REQUEST_TIMEOUT_S)
        try:
            self._connection.request("POST", path, body=body, headers=headers)
            response = self._connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {"message": raw[:200].decode(errors="replace")}
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _retry_after(headers: dict[str, str], attempt: int) -> float:
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return min(MAX_BACKOFF_S, 0.05 * 2**attempt)


class _Sender:
    """The threads' shared state: the report, the counters the progress display shows."""

    def __init__(self, report: SendReport, api_url: str, *, sign: bool, pacer: _Pacer) -> None:
        self.report = report
        self.path = urllib.parse.urlsplit(f"{api_url.rstrip('/')}/{report.stream}/records").path
        self.api_url = api_url
        self.sign = sign
        self.pacer = pacer
        self.lock = threading.Lock()
        self.sent = 0  # records POSTed, retries included

    def run(self, batches: queue.Queue[list[int]]) -> None:
        client = _Client(self.api_url, self.sign)
        try:
            while True:
                try:
                    batch = batches.get_nowait()
                except queue.Empty:
                    return
                self._deliver(client, batch)
        finally:
            client.close()

    def _deliver(self, client: _Client, seqs: list[int]) -> None:
        report = self.report
        records: dict[int, dict[str, str]] = {}
        post_time, pending, attempt = 0.0, list(seqs), 0
        while pending:
            attempt += 1
            self.pacer.wait(len(pending))
            if not records:  # built after the pacing wait: `t` is when the records are first POSTed
                post_time = time.time()
                records = {seq: self._record(seq, post_time) for seq in seqs}
            body = json.dumps({"records": [records[seq] for seq in pending]}, separators=(",", ":")).encode()
            try:
                status, headers, answer = client.post(self.path, body)
            except (OSError, http.client.HTTPException) as error:
                status, headers, answer = 0, {}, {"message": f"{type(error).__name__}: {error}"}
            with self.lock:
                report.requests += 1
                report.statuses[status] += 1
                report.finished = time.time()
                self.sent += len(pending)
            entries = answer.get("records") if isinstance(answer, dict) else None
            if status in (200, 207) and isinstance(entries, list) and len(entries) == len(pending):
                retry = []
                with self.lock:
                    for seq, entry in zip(pending, entries, strict=True):
                        if "errorCode" in entry:
                            retry.append(seq)
                            report.failed[seq] = str(entry.get("errorCode"))
                        else:
                            report.failed.pop(seq, None)
                            report.accepted[seq] = Accepted(
                                key=records[seq]["partitionKey"],
                                post_time=post_time,
                                shard_id=entry.get("shardId"),
                                sequence_number=entry.get("sequenceNumber"),
                                sub_sequence_number=entry.get("subSequenceNumber"),
                                poison=self._poison(seq),
                            )
                pending, pause = retry, min(MAX_BACKOFF_S, 0.05 * 2 ** (attempt - 1))
            elif status == 200 and not entries:  # an API that answers 200 without positions
                with self.lock:
                    for seq in pending:
                        report.accepted[seq] = Accepted(
                            records[seq]["partitionKey"], post_time, None, None, None, self._poison(seq)
                        )
                pending, pause = [], 0.0
            elif status in (0, 429, 503):
                reason = f"HTTP {status}" if status else str(answer.get("message"))
                with self.lock:
                    report.failed.update((seq, reason) for seq in pending)
                pause = _retry_after(headers, attempt - 1)
            else:  # the API refused (4xx) or broke (5xx): retrying cannot help, or could duplicate
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

    def _record(self, seq: int, post_time: float) -> dict[str, str]:
        report = self.report
        data = payload(report.run_id, seq, post_time, report.size, self._poison(seq))
        return {
            "partitionKey": partition_key(report.run_id, seq, report.keys),
            "data": base64.b64encode(data).decode(),
        }

    def _poison(self, seq: int) -> bool:
        every = self.report.poison_every
        return every > 0 and (seq + 1) % every == 0


def send(
    api_url: str,
    stream: str,
    *,
    count: int,
    size: int = 100,
    keys: int = 100,
    rate: float | None = None,
    batch: int = 500,
    concurrency: int = 4,
    sign: bool = True,
    run_id: str | None = None,
    progress: bool = True,
    poison_every: int = 0,
) -> SendReport:
    """POST `count` records to `{api_url}/{stream}/records` and return what became of each."""
    if count < 0 or size < 0 or keys < 1 or batch < 1 or concurrency < 1:
        raise ValueError("count and size must be >= 0; keys, batch and concurrency >= 1")
    report = SendReport(
        run_id=run_id or f"run-{time.strftime('%H%M%S')}-{secrets.token_hex(3)}",
        stream=stream,
        api_url=api_url,
        count=count,
        size=size,
        keys=keys,
        poison_every=poison_every,
    )
    batches: queue.Queue[list[int]] = queue.Queue()
    for start in range(0, count, batch):
        batches.put(list(range(start, min(count, start + batch))))
    sender = _Sender(report, api_url, sign=sign, pacer=_Pacer(rate))
    report.started = report.finished = time.time()
    threads = [
        threading.Thread(target=sender.run, args=(batches,), name=f"send-{i}", daemon=True)
        for i in range(min(concurrency, batches.qsize()) or 1)
    ]
    for thread in threads:
        thread.start()
    _watch(sender, threads, enabled=progress)
    for thread in threads:
        thread.join()
    return report


def _watch(sender: _Sender, threads: list[threading.Thread], *, enabled: bool) -> None:
    """A live line (sent, accepted/s, failed, retries, elapsed) until the threads finish; on a tty only."""
    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        return
    report = sender.report

    def line() -> Text:
        with sender.lock:
            accepted, failed, retried, sent = (
                len(report.accepted),
                len(report.failed),
                report.retried_records,
                sender.sent,
            )
        elapsed = max(1e-9, time.time() - report.started)
        return Text(
            f"send {report.run_id}: sent {sent:,}/{report.count:,}  accepted {accepted:,} "
            f"({accepted / elapsed:,.0f}/s)  failed {failed:,}  retries {retried:,}  {elapsed:,.1f} s"
        )

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
