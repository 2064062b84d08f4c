"""`python -m local send`: a small load generator that POSTs records to the REST API and counts the answers.

    report = send("http://127.0.0.1:3000/v1/streams", "events", count=20_000)
    verdict = wait_and_verify("http://127.0.0.1:4566", app, report)   # local.commands.verify

Records go in requests of at most `batch` records and `BODY_BUDGET` bytes from `concurrency` threads
(one keep-alive connection each), as JSON or ndjson, paced to at most `rate` records/s, SigV4-signed
with the local credentials; sizes, keys and poison records follow a `LoadShape` (`send_shapes`).

Identity (`ids`, on by default): every record carries its own `id`, `<run id>-<seq>`, and every
request an `Idempotency-Key` (`<run id>-b<batch>.<n>`, the same for every post of the same records),
so a request may be posted again as it was: the consumers apply each id once. Without ids
(`ids=False`) records carry neither, and a record posted twice is two records to the consumers.

Each record ends in one of three outcomes, each one a caller can act on:
- accepted: a 200, or a 207 entry, with the sequence number Kinesis gave it (the API's word);
- refused: nothing of it was written — a 4xx for the request, or not accepted after MAX_ATTEMPTS
  posts none of which may have been written (the reason says which answer came last);
- unconfirmed: given up (MAX_ATTEMPTS posts, or a 4xx) after a post that may have been written,
  so it may be in the stream once or more: post it again as it was (same id) to settle it — with
  ids the consumers apply it once whichever posts landed. A "refused" here would hide a write.
Everything else is posted again, the same records with the same ids and key, after a pause (the
answer's `Retry-After`, else a growing backoff with jitter), until it ends:
- a 207 entry not written (`"written": false`, or a throttle or failure code) — only those entries;
- a 207 entry that may have been written (`written` not false; `OutcomeUnknown`, `MalformedResponse`,
  `RecordCountMismatch`; no sequence number; an echoed id that is not the record's);
- a request that failed as a whole: no answer (a timeout, a reset or closed connection), a 5xx
  (500, 502, 503, 504), a 429, or an answer whose entries do not match the records.
A record of which a post may have been written is *re-posted* (`SendReport.reposted`): with ids, its
copies are one record to the consumers; without, the verdict only claims at least once for it.
`lose_replies` drops that share of the API's answers after reading them (the write happened, the
client never learns it: a reply lost on the way back), so a run re-posts written records on purpose.

Each record's data is compact JSON, padded to `size` bytes, that the verdict reads back in the
sinks, the stream and dead-letter queues (see `payload`):

    {"run":"<run id>","seq":<0..count-1>,"t":<epoch seconds of the first POST>,"poison":true,"pad":"xxx"}

`poison` is present only on poison records; partition keys are `<run id>-k<index>`, so a run's
counters never mix with an earlier run's. With `payloads` (a template or a file of payloads,
`local.commands.send_payloads`) the data is the user's instead, and the verdict knows each record by
its id alone: such a run needs ids, and takes no poison records (their data is send's own).
"""

from __future__ import annotations

import base64
import http.client
import json
import queue
import random
import secrets
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ..app import model
from .send_http import Client, Pacer, backoff, retry_after
from .send_payloads import Payloads, iso_time
from .send_progress import Display
from .send_shapes import LoadShape, ShapeError

MAX_ATTEMPTS = 20  # posts of a record at most; a record still not accepted after that is refused
BODY_BUDGET = 5_000_000  # bytes of one request body at most (the API takes 6,000,000)
#: 207 entry codes that do not say the record was not written (an entry without `written`).
MAYBE_WRITTEN_CODES = frozenset({"OutcomeUnknown", "MalformedResponse", "RecordCountMismatch"})
IDEMPOTENCY_KEY = "Idempotency-Key"


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


def record_id(run_id: str, seq: int) -> str:
    """The id `send` gives record `seq` of a run (with ids on)."""
    return f"{run_id}-{seq}"


@dataclass
class Accepted:
    """Where the API says a record was written, and when it was first POSTed."""

    key: str
    post_time: float
    shard_id: str | None
    sequence_number: str | None
    sub_sequence_number: int | None
    poison: bool
    id: str | None = None
    posts: int = 1  # how many times it was POSTed (re-posts included)


@dataclass
class SendReport:
    """What `send` did: every record's fate, counts of requests and re-posts, the timing."""

    run_id: str
    stream: str
    api_url: str
    count: int
    size: int  # the largest record's data (poison aside): what `payload` pads to
    keys: int
    poison_every: int
    shape: LoadShape = field(repr=False, default_factory=lambda: LoadShape(0))
    ids: bool = True  # records carry ids (and requests an Idempotency-Key)
    payloads: Payloads | None = None  # the user's data (a template, a file); None: send's own `payload`
    accepted: dict[int, Accepted] = field(default_factory=dict)  # seq -> where it went
    failed: dict[int, str] = field(default_factory=dict)  # seq -> why it was refused (the last answer)
    #: seq -> why it was given up, though a post of it may have been written (see the module's doc)
    unconfirmed: dict[int, str] = field(default_factory=dict)
    #: seq -> posts of it that may have been written (a whole failure, an unconfirmed entry); its
    #: last post may be the one accepted, so a record with an entry here had that many more posts.
    reposted: dict[int, int] = field(default_factory=dict)
    whole_failures: Counter[str] = field(default_factory=Counter)  # why requests failed as a whole
    unconfirmed_entries: Counter[str] = field(default_factory=Counter)  # 207 entries maybe written, by code
    replies_lost: int = 0  # answers dropped on purpose (`lose_replies`)
    echo_mismatches: int = 0  # entries whose echoed id was not the record's
    throttled_entries: int = 0  # 207 entries answered with a throttle
    requests: int = 0
    retried_records: int = 0  # record re-sends (207 entries, re-posted requests)
    statuses: Counter[int] = field(default_factory=Counter)  # HTTP status -> requests (0: no answer)
    started: float = 0.0
    finished: float = 0.0  # when the last answer arrived (epoch seconds)

    @property
    def elapsed(self) -> float:
        return max(0.0, self.finished - self.started)

    @property
    def accepted_per_second(self) -> float:
        return len(self.accepted) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def refused(self) -> dict[int, str]:
        return self.failed

    def key_names(self) -> list[str]:
        return [partition_key(self.run_id, i) for i in range(min(self.keys, self.count))]

    def expected_counts(self) -> Counter[str]:
        """Per partition key, the accepted records a counter should count (poison too: it is
        poison for the event sink only)."""
        return Counter(record.key for record in self.accepted.values())

    def partition_key_of(self, seq: int) -> str:
        return partition_key(self.run_id, self.shape.key_index(seq))

    def id_of(self, seq: int) -> str | None:
        return record_id(self.run_id, seq) if self.ids else None

    def seq_of_id(self) -> dict[str, int]:
        """Every record's id -> its seq (empty without ids): how the verdict knows a record by its id."""
        return {record_id(self.run_id, seq): seq for seq in range(self.count)} if self.ids else {}

    def payload_of(self, seq: int, post_time: float) -> bytes:
        """The data `send` wrote for record `seq` (first POSTed at `post_time`)."""
        if self.payloads is not None:
            return self.payloads.payload(self.fields_of(seq, post_time))
        return payload(self.run_id, seq, post_time, self.shape.size(seq), self.shape.poison(seq))

    def fields_of(self, seq: int, post_time: float) -> dict[str, Any]:
        """A template's placeholders for record `seq` (`local.commands.send_payloads`)."""
        return {
            "id": record_id(self.run_id, seq), "seq": seq, "run": self.run_id,
            "key": self.partition_key_of(seq), "i": self.shape.key_index(seq), "now": iso_time(post_time),
        }  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        reposted_accepted = sum(1 for seq in self.reposted if seq in self.accepted)
        return {
            "run_id": self.run_id,
            "stream": self.stream,
            "count": self.count,
            "ids": self.ids,
            "payloads": self.payloads.describe() if self.payloads is not None else "send's own",
            "size": [self.shape.min_size, self.shape.max_size],
            "keys": self.keys,
            "skew": self.shape.skew,
            "accepted": len(self.accepted),
            "refused": len(self.failed),
            "refusal_reasons": dict(Counter(self.failed.values()).most_common(5)),
            "unconfirmed": len(self.unconfirmed),
            "reposted_records": len(self.reposted),
            "reposted_accepted": reposted_accepted,
            "whole_failures": dict(self.whole_failures.most_common(8)),
            "unconfirmed_entries": dict(self.unconfirmed_entries.most_common(5)),
            "replies_lost": self.replies_lost,
            "echo_mismatches": self.echo_mismatches,
            "throttled_entries": self.throttled_entries,
            "poison": sum(1 for record in self.accepted.values() if record.poison),
            "requests": self.requests,
            "retried_records": self.retried_records,
            "statuses": {str(status): n for status, n in sorted(self.statuses.items())},
            "elapsed_s": round(self.elapsed, 3),
            "accepted_per_s": round(self.accepted_per_second, 1),
        }


def entry_outcome(entry: Any, expected_id: str | None) -> str:
    """What a 200/207 entry says of its record: "accepted" (a shard and a sequence number),
    "not_written" (a failure that says nothing was written) or "maybe" (anything else)."""
    if not isinstance(entry, dict):
        return "maybe"
    echoed = entry.get("id")
    if expected_id is not None and echoed is not None and echoed != expected_id:
        return "maybe"  # not this record's answer
    code = entry.get("errorCode")
    if not code:
        return "accepted" if entry.get("shardId") and entry.get("sequenceNumber") else "maybe"
    if "written" in entry:
        return "not_written" if entry["written"] is False else "maybe"
    return "maybe" if code in MAYBE_WRITTEN_CODES else "not_written"


class _Sender:
    """The threads' shared state: the report, the counters the progress display shows."""

    def __init__(
        self,
        report: SendReport,
        api_url: str,
        *,
        sign: bool,
        pacer: Pacer,
        ndjson: bool,
        lose_replies: float = 0.0,
        rng: random.Random | None = None,
        losses: random.Random | None = None,
        api_key: str | None = None,
        credentials: tuple[str, str] = (model.ACCESS_KEY, model.SECRET_KEY),
    ) -> None:
        self.report = report
        self.api_key, self.credentials = api_key, credentials
        self.path = urllib.parse.urlsplit(f"{api_url.rstrip('/')}/{report.stream}/records").path
        self.api_url = api_url
        self.sign = sign
        self.pacer = pacer
        self.ndjson = ndjson
        self.lose_replies = lose_replies
        self.rng = rng or random.Random()  # jitter
        self.losses = losses or random.Random()  # which answers are lost: one draw per answer
        self.lock = threading.Lock()
        self.sent = 0  # records POSTed, re-posts included
        self.first_sent = 0  # records POSTed at least once
        self.pending_reposts = 0  # records waiting to be posted again after a whole failure

    def run(self, batches: queue.Queue[tuple[int, list[int]]]) -> None:
        client = Client(self.api_url, self.sign, self.api_key, self.credentials)
        try:
            while True:
                try:
                    number, batch = batches.get_nowait()
                except queue.Empty:
                    return
                self._deliver(client, number, batch)
        finally:
            client.close()

    def _post(self, client: Client, body: bytes, key: str | None) -> tuple[int, dict[str, str], Any]:
        kind = "application/x-ndjson" if self.ndjson else "application/json"
        headers = {IDEMPOTENCY_KEY: key} if key else {}
        try:
            status, answer_headers, answer = client.post(self.path, body, kind, headers)
        except (OSError, http.client.HTTPException) as error:
            return 0, {}, {"message": f"{type(error).__name__}: {error}"}
        with self.lock:
            lose = self.lose_replies > 0 and self.losses.random() < self.lose_replies
            self.report.replies_lost += lose
        if lose:  # read, then dropped with the connection: the client cannot know what happened
            client.close()
            return 0, {}, {"message": "reply lost (send's lose_replies)"}
        return status, answer_headers, answer

    def _deliver(self, client: Client, number: int, seqs: list[int]) -> None:
        """Post one batch until each record is accepted or refused."""
        report = self.report
        records: dict[int, dict[str, str]] = {}
        post_time, pending, attempt, version = 0.0, list(seqs), 0, 0
        maybe: Counter[int] = Counter()  # seq -> posts that may have been written
        posts: Counter[int] = Counter()
        reason = ""
        while pending:
            attempt += 1
            self.pacer.wait(len(pending))
            if not records:  # built after the pacing wait: `t` is when the records are first POSTed
                post_time = time.time()
                records = {seq: self._record(seq, post_time) for seq in seqs}
                with self.lock:
                    self.first_sent += len(seqs)
            key = f"{report.run_id}-b{number}.{version}" if report.ids else None
            body = self._body([records[seq] for seq in pending])
            status, headers, answer = self._post(client, body, key)
            posts.update(pending)
            with self.lock:
                report.requests += 1
                report.statuses[status] += 1
                report.finished = time.time()
                self.sent += len(pending)
            entries = answer.get("records") if isinstance(answer, dict) else None
            if status in (200, 207) and isinstance(entries, list) and len(entries) == len(pending):
                retry, reason = self._take_entries(pending, entries, records, post_time, maybe, posts)
                pause = backoff(attempt, self.rng)
            elif 400 <= status < 500 and status != 429:  # this post wrote nothing; a retry cannot help
                self._end(maybe, pending, f"HTTP {status}: {str(answer.get('message', ''))[:120]}")
                return
            else:  # failed as a whole (or an answer that does not match): posted again as it was
                reason = f"HTTP {status}" if status else str(answer.get("message"))[:80]
                if status != 429:  # a 429 wrote nothing; anything else may have
                    maybe.update(pending)
                with self.lock:
                    report.whole_failures[reason if status else "no answer"] += 1
                retry, pause = list(pending), retry_after(headers, attempt, self.rng)
            if retry != pending:
                version += 1  # other records: another key (each record keeps its own id)
            pending = retry
            if pending and attempt >= MAX_ATTEMPTS:
                self._end(maybe, pending, f"{reason} (after {attempt} posts)")
                return
            if pending:
                with self.lock:
                    report.retried_records += len(pending)
                time.sleep(pause)
        self._end(maybe)

    def _end(self, maybe: Counter[int], given_up: Sequence[int] = (), reason: str = "") -> None:
        """End a batch: its reposts (`maybe`) counted, and each record `given_up` refused, or
        unconfirmed where a post of it may have been written."""
        written = f"{reason}; an earlier post may have been written"
        with self.lock:
            self.report.reposted.update(maybe)
            self.report.failed.update((seq, reason) for seq in given_up if seq not in maybe)
            self.report.unconfirmed.update((seq, written) for seq in given_up if seq in maybe)

    def _take_entries(
        self,
        pending: list[int],
        entries: list[Any],
        records: dict[int, dict[str, str]],
        post_time: float,
        maybe: Counter[int],
        posts: Counter[int],
    ) -> tuple[list[int], str]:
        """Record a 200/207's entries; the records to post again, and the last failure's code."""
        report, retry, reason = self.report, [], ""
        with self.lock:
            for seq, entry in zip(pending, entries, strict=True):
                expected = records[seq].get("id")
                outcome = entry_outcome(entry, expected)
                code = str(entry.get("errorCode") or "") if isinstance(entry, dict) else "malformed entry"
                if isinstance(entry, dict) and expected and entry.get("id") not in (None, expected):
                    report.echo_mismatches += 1
                if outcome == "accepted":
                    report.accepted[seq] = self._accepted(seq, records, post_time, entry, posts[seq])
                    continue
                retry.append(seq)
                reason = code or "no sequence number"
                if outcome == "maybe":
                    maybe[seq] += 1
                    report.unconfirmed_entries[reason] += 1
                else:
                    report.throttled_entries += "Throughput" in code or "Throttl" in code
        return retry, reason

    def _accepted(
        self,
        seq: int,
        records: dict[int, dict[str, str]],
        post_time: float,
        entry: dict[str, Any],
        posts: int,
    ) -> Accepted:
        return Accepted(
            key=records[seq]["partitionKey"],
            post_time=post_time,
            shard_id=entry.get("shardId"),
            sequence_number=entry.get("sequenceNumber"),
            sub_sequence_number=entry.get("subSequenceNumber"),
            poison=self.report.shape.poison(seq),
            id=records[seq].get("id"),
            posts=posts,
        )

    def _body(self, records: list[dict[str, str]]) -> bytes:
        if self.ndjson:
            return "\n".join(json.dumps(record, separators=(",", ":")) for record in records).encode()
        return json.dumps({"records": records}, separators=(",", ":")).encode()

    def _record(self, seq: int, post_time: float) -> dict[str, str]:
        report = self.report
        data = report.payload_of(seq, post_time)
        record = {
            "partitionKey": partition_key(report.run_id, report.shape.key_index(seq)),
            "data": base64.b64encode(data).decode(),
        }
        identity = report.id_of(seq)
        if identity is not None:
            record["id"] = identity
        return record


def batches_of(shape: LoadShape, batch: int, size_of: Callable[[int], int] | None = None) -> list[list[int]]:
    """The records in requests of at most `batch` records and about `BODY_BUDGET` bytes of body
    (`size_of(seq)`: record `seq`'s data at most, else the shape's size)."""
    size_of = size_of or shape.size
    batches: list[list[int]] = []
    current: list[int] = []
    budget = 0
    for seq in range(shape.count):
        cost = size_of(seq) * 4 // 3 + 250  # base64 data, the key, the id and the JSON around them
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
    ids: bool = True,
    lose_replies: float = 0.0,
    api_key: str | None = None,
    credentials: tuple[str, str] = (model.ACCESS_KEY, model.SECRET_KEY),
    payloads: Payloads | None = None,
    display: Display | None = None,
) -> SendReport:
    """POST `count` records to `{api_url}/{stream}/records` and return what became of each.

    Sizes are `size`, or log-uniform in [size, max_size]; keys, poison records: `LoadShape`.
    `ids`: each record carries an id and each request an Idempotency-Key (see the module).
    `lose_replies`: the share of answers dropped after they were read (a reply lost after the write);
    with a `seed`, the n-th answer is lost or not run after run. `api_key`: a client's key, sent as
    `x-api-key` (an API with clients requires one). `credentials`: the (access key, secret key) requests
    are signed with — the caller the API stamps on the records (two callers may send the same
    `run_id`: the same ids and Idempotency-Keys, two callers' records).
    `monitor()` adds a line to the live display (e.g. the consumer groups' progress); `display`, when
    given, shows the progress instead (`local.commands.send_progress`: a bar, lines, or nothing).
    `payloads`: the records' data from a template or a file (`local.commands.send_payloads`); needs
    `ids`, no poison."""
    if batch < 1 or concurrency < 1:
        raise ValueError("batch and concurrency must be >= 1")
    if payloads is not None and not ids:
        raise ShapeError(
            "a payload template or file needs ids (drop --no-ids): the verdict knows such records by their "
            "ids alone (<run id>-<seq>), since their data no longer carries send's run and seq"
        )
    if payloads is not None and (poison_rate or poison_every):
        raise ShapeError(
            "--poison-rate takes send's own payloads (450 KiB of them): not with a template or file"
        )
    if not 0 <= lose_replies < 1:
        raise ShapeError(f"--lose-replies: a share in [0, 1), got {lose_replies}")
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
        ids=ids,
        payloads=payloads,
    )
    batches: queue.Queue[tuple[int, list[int]]] = queue.Queue()
    for number, seqs in enumerate(batches_of(shape, batch, payloads.size_hint if payloads else None)):
        batches.put((number, seqs))
    rng = random.Random(None if seed is None else f"{seed}:send")
    losses = random.Random(None if seed is None else f"{seed}:lose")
    sender = _Sender(
        report, api_url, sign=sign, pacer=Pacer(rate), ndjson=ndjson, lose_replies=lose_replies, rng=rng,
        losses=losses, api_key=api_key, credentials=credentials,
    )  # fmt: skip
    report.started = report.finished = time.time()
    threads = [
        threading.Thread(target=sender.run, args=(batches,), name=f"send-{i}", daemon=True)
        for i in range(min(concurrency, batches.qsize()) or 1)
    ]
    for thread in threads:
        thread.start()
    if display is not None:
        _show(sender, threads, display)
    else:
        _watch(sender, threads, enabled=progress, monitor=monitor)
    for thread in threads:
        thread.join()
    return report


def _show(sender: _Sender, threads: list[threading.Thread], display: Display) -> None:
    """Tell `display` how many records were sent and accepted until the threads finish."""
    report = sender.report

    def tell(final: bool) -> None:
        with sender.lock:
            sent, accepted, refused = sender.first_sent, len(report.accepted), len(report.failed)
        display.sending(report.count, sent, accepted, refused, final=final)

    while any(thread.is_alive() for thread in threads):
        tell(False)
        time.sleep(0.25)
    tell(True)


def _watch(
    sender: _Sender, threads: list[threading.Thread], *, enabled: bool, monitor: Callable[[], str] | None
) -> None:
    """A live display until the threads finish (on a tty only): sent, accepted/s, throttled entries,
    retries, re-posted records, refused, elapsed; and `monitor()`'s line (the consumer groups)."""
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
            accepted, refused, reposted = len(report.accepted), len(report.failed), len(report.reposted)
            retried, throttled, sent = report.retried_records, report.throttled_entries, sender.sent
            unconfirmed = len(report.unconfirmed)
        elapsed = max(1e-9, time.time() - report.started)
        text = (
            f"send {report.run_id}: sent {sent:,}/{report.count:,}  accepted {accepted:,} "
            f"({accepted / elapsed:,.0f}/s)  throttled {throttled:,}  retries {retried:,}  "
            f"re-posted {reposted:,}  refused {refused:,}  unconfirmed {unconfirmed:,}  {elapsed:,.1f} s"
        )
        return Text(text + (f"\n{watched['line']}" if watched["line"] else ""))

    threading.Thread(target=poll_monitor, name="send-monitor", daemon=True).start()
    with Live(line(), console=console, refresh_per_second=4, transient=False) as live:
        while any(thread.is_alive() for thread in threads):
            time.sleep(0.25)
            live.update(line())
        live.update(line())
