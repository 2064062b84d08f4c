"""The verdict of a `send` run, as data: per consumer group where each record went, and what the stream holds.

`wait_and_verify` (`local.commands.verify`) fills it in; `local.commands.verify_render` prints it.
Each group's accepted records fall in three parts, of this run only: *applied* (in the sink, or
counted; for a group checked by lag, passed by its checkpoint and not dead-lettered), *dead-lettered*
(the run's records in the group's DLQ, by their ids or send's payload, grouped by cause: the dead
letter's error type and message, or its fingerprint) and *missing* (neither). A dead-lettered record
fails the group unless it was sent as poison; the DLQ's letters of earlier runs count for nothing
(`dlq_queue_depth` only says the queue holds them).

A group with a sink is `ok` when it drained and nothing is lost, applied twice, miscounted,
dead-lettered that should not be, or altered; a group checked by lag (no sink declared) when it
caught up with every shard the run wrote to, with no function error, no healthy record dead-lettered
and no on-failure message of the run. The verdict is `ok` when every group is, the stream backs
every answer, and no answer echoed another record's id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .send import SendReport

#: The kinds of check: a sink holding records (by id), one holding counts (per key), or lag and errors.
RECORDS, COUNTER, LAG = "records", "counter", "lag"
NOT_DECLARED = "sink not declared: checked by lag and errors only"


@dataclass
class DeadLetterCause:
    """The run's dead letters of one cause in a group: how many, and a few of their record ids."""

    count: int = 0
    ids: list[str] = field(default_factory=list)  # at most `CAUSE_IDS`
    poison: int = 0  # of them, records sent as poison

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "poison": self.poison, "ids": self.ids}


#: Record ids the verdict lists per dead-letter cause.
CAUSE_IDS = 5


def dead_letter_cause(letter: dict[str, Any]) -> str:
    """Why a dead letter failed, as shardline's dead letter says it (`shardline.consumer._failure_text`):
    its error type and message when the group writes messages, else its type and fingerprint, else
    its `error` text."""
    kind, message = letter.get("errorType"), letter.get("errorMessage")
    if kind and message is not None:
        return f"{kind}: {message}"
    if kind and letter.get("errorFingerprint"):
        return f"{kind} [{letter['errorFingerprint']}]"
    return str(letter.get("error") or "no error given")[:200]


@dataclass(frozen=True)
class Group:
    """A consumer group (one of its sinks) as the verdict checks it (`local.commands.verify_groups`)."""

    name: str
    function: str
    kind: str  # RECORDS, COUNTER or LAG
    sink_table: str  # "" for LAG
    stream_name: str
    dlq_url: str
    id_attribute: str = "recordId"  # RECORDS: the attribute holding the record's id
    key_attribute: str = "partitionKey"  # COUNTER: the hash key, a partition key
    count_attribute: str = "count"  # COUNTER: that key's count
    #: RECORDS: the sink is shardline's event-sink layout (`pk` = `<stream>#<shard>`, `sk` = the
    #: zero-padded position): read partition by partition from the last `sk`; else scanned whole.
    incremental: bool = False
    #: How the kind was known: "declared" (SHARDLINE_SINKS), "key schema" (guessed, this repository's
    #: own app until its groups declare) or NOT_DECLARED.
    source: str = "declared"
    lease_table: str = ""  # LAG: its checkpoints say how far it got
    on_failure_queue: str = ""  # the name of its mapping's on-failure queue, if any


@dataclass
class GroupResult:
    """One group's end-to-end result."""

    group: Group
    expected: int = 0  # accepted records (poison included)
    applied: int = 0  # found in the sink (distinct) or counted; LAG: passed by the checkpoint, not DLQ'd
    done_at: float | None = None
    drain_s: float | None = None  # done_at - the last POST answer
    lost: list[int] = field(default_factory=list)
    duplicated: dict[int, int] = field(default_factory=dict)  # seq -> times found (more than allowed)
    duplicated_at: dict[int, list[str]] = field(default_factory=dict)  # a few of them: each item's pk|sk
    refused_present: list[int] = field(default_factory=list)  # in the sink although the API refused it
    reposted_present: int = 0  # re-posted records found in the sink (once each with ids)
    #: items of the run whose `recordId` is not the record's id (absent included), with ids on
    wrong_ids: dict[int, list[str | None]] = field(default_factory=dict)
    wrong_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (expected, counted)
    dlq_depth: int = 0  # the run's records in the group's DLQ (poison included)
    dlq_queue_depth: int = 0  # every message in the queue, earlier runs' included (not judged)
    dead_lettered: list[int] = field(default_factory=list)  # non-poison records of the run in the DLQ
    #: the run's dead letters by cause ("ValueError: bad", or "ValueError [fingerprint]"): count, a few ids
    dead_letter_causes: dict[str, DeadLetterCause] = field(default_factory=dict)
    poison_whole: int = 0  # poison records found in the DLQ with data and key as sent
    poison_altered: list[int] = field(default_factory=list)
    poison_missing: list[int] = field(default_factory=list)
    poison_in_sink: list[int] = field(default_factory=list)
    latency_s: dict[str, float] = field(default_factory=dict)  # p50, p99, max (records groups)
    queries: int = 0
    items_read: int = 0
    #: LAG: shards the run wrote to that the group's checkpoint has not passed: shard -> "at X, last Y"
    behind: dict[str, str] = field(default_factory=dict)
    function_errors: int | None = None  # LAG: its function's errors since the run began (None: unknown)
    on_failure: int = 0  # messages of the run in its mapping's on-failure queue

    @property
    def missing(self) -> int:
        """Accepted records neither applied nor dead-lettered (by id for a records sink; a count else)."""
        if self.group.kind == RECORDS:
            return len(self.lost)
        return max(0, self.expected - self.applied - self.dlq_depth)

    @property
    def ok(self) -> bool:
        if self.group.kind == LAG:
            errors = bool(self.function_errors) or bool(self.on_failure)
            return self.done_at is not None and not (self.behind or self.dead_lettered or errors)
        problems = (self.lost, self.duplicated, self.wrong_counts, self.dead_lettered, self.refused_present)
        poison_problems = (self.poison_altered, self.poison_missing, self.poison_in_sink, self.wrong_ids)
        return self.done_at is not None and not any(problems + poison_problems) and not self.on_failure

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "group"}
        out["missing"] = self.missing
        out["dead_letter_causes"] = {cause: c.as_dict() for cause, c in self.dead_letter_causes.items()}
        out["wrong_counts"] = {k: list(v) for k, v in self.wrong_counts.items()}
        out["duplicated"] = {str(k): v for k, v in self.duplicated.items()}
        out["duplicated_at"] = {str(k): v for k, v in self.duplicated_at.items()}
        out["wrong_ids"] = {str(k): v for k, v in list(self.wrong_ids.items())[:20]}
        group = {
            "group": self.group.name,
            "kind": self.group.kind,
            "sink_table": self.group.sink_table,
            "source": self.group.source,
        }
        return {**group, "ok": self.ok, **out}


@dataclass
class StreamResult:
    """What the stream holds of the run: the Kinesis-level duplicates, and whether the API's word holds."""

    kinesis_records: int = 0
    user_records: int = 0  # every copy
    aggregate_copies: int = 0  # Kinesis records repeating an aggregate id (producer resends, re-routes)
    records_in_aggregate_copies: int = 0
    reposted_records: int = 0  # user records in more than one aggregate (client re-posts)
    reposted_copies: int = 0
    records_twice: int = 0  # user records in the stream more than once, whatever the reason
    without_aggregate_id: int = 0
    undecodable: int = 0
    #: accepted records not in the Kinesis record at the sequence number the API answered
    unbacked: list[int] = field(default_factory=list)
    refused_in_stream: list[int] = field(default_factory=list)  # refused, yet in the stream
    wrong_ids: int = 0  # user records whose id in the stream is not the one sent
    #: where the stream holds records a group lost or applied twice (a few): each copy's position
    where: dict[int, list[str]] = field(default_factory=dict)
    duplicates: int = 0  # Kinesis-level duplicates: extra copies of user records, whatever the reason
    read: bool = True  # False: the stream could not be read (`error`)
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.read and not (
            self.unbacked or self.refused_in_stream or self.wrong_ids or self.undecodable
        )

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["where"] = {str(seq): notes for seq, notes in self.where.items()}
        out["unbacked"], out["refused_in_stream"] = self.unbacked[:20], self.refused_in_stream[:20]
        out["unbacked_count"], out["refused_in_stream_count"] = (
            len(self.unbacked),
            len(self.refused_in_stream),
        )
        return {"ok": self.ok, **out}


@dataclass
class Verdict:
    """Every group's result for one `send` run, and what the stream holds of it."""

    report: SendReport
    groups: list[GroupResult]
    poll_interval_s: float
    timed_out: bool
    stream: StreamResult = field(default_factory=lambda: StreamResult(read=False, error="not read"))
    #: Requests the endpoint refused during the run (`local.iam`): each a principal's missing grant.
    access_denied: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        answers = self.report.echo_mismatches == 0
        groups = self.groups
        return (
            bool(groups)
            and all(g.ok for g in groups)
            and not self.timed_out
            and self.stream.ok
            and answers
            and not self.access_denied
        )

    @property
    def lost(self) -> int:
        return sum(len(g.lost) for g in self.groups)

    @property
    def dead_lettered(self) -> int:
        """Records of the run dead-lettered that were not sent as poison, over every group."""
        return sum(len(g.dead_lettered) for g in self.groups)

    @property
    def duplicate_effects(self) -> int:
        """Records applied more than once: found twice in an event sink, or a counter over its count."""
        over = sum(max(0, n - low) for g in self.groups for low, n in g.wrong_counts.values())
        return sum(len(g.duplicated) for g in self.groups) + over

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "timed_out": self.timed_out,
            "lost": self.lost,
            "missing": self.lost,  # the same: neither applied nor dead-lettered
            "dead_lettered": self.dead_lettered,
            "duplicate_effects": self.duplicate_effects,
            "counts_exact": not any(g.wrong_counts for g in self.groups),
            "latency_resolution_s": self.poll_interval_s,
            "send": self.report.as_dict(),
            "stream": self.stream.as_dict(),
            "groups": [g.as_dict() for g in self.groups],
            "access_denied": self.access_denied,
        }
