"""The identity model (`test_identity_model`) with the world it left out, one ingredient a test
(issue 39): forked and restored producers, callers sharing ids, ids re-used with other bodies,
redrives straddling a resend's copies, chained reshards, forged floors, lane eviction.

The invariant of every test: each accepted (confirmed) record is applied exactly once, by its
identity, and nothing is dropped behind a success; an id re-used with another body surfaces
(dead-lettered whole, or refused), never a silent drop or overwrite. The sink counts applications
per (identity, payload digest), so a second payload applied under one identity (an overwrite in a
sink keyed by the id) shows as two keys.

How each ingredient is made, and why so:

1. Forks and restores run in real processes (`os.fork()`): a fork copies exactly what the world's
   fork copies (the producer's id and lane counters, its lock, its thread pool's bookkeeping
   without the threads), which no in-process clone reproduces honestly. The child's producer is
   the inherited object; only its transport is rewired, to a pipe whose far end (this process)
   serves the one `SimStream` — as a forked gunicorn or Celery worker opens its own connections to
   the same stream. The child is driven command by command, so interleavings stay deterministic.
   A restore is a fork of a process that created (and maybe used) a producer and then never
   sends again (the snapshot), twice (the restores). A child forked after its producer was used
   lost the request pool's threads; a real restore keeps its threads, so there the model is
   harsher than SnapStart (before the fix such a child's first send never returned: the watchdog
   failed it).
2. Callers are stamped per record (`UserRecord.caller`, the design's override; one `Producer`, as
   the HTTP function serves every caller). Where the API is missing (before the fix) the callers
   cannot be told apart, and the tests of 2, 3 and 7 ran on that world rather than skip;
   the sink keys by `ConsumedRecord.scoped_id` where it exists and the test computes the expected
   scoped id from the design's formula on its own, so the two are checked against each other.
3. One caller re-uses ids from a small pool with bodies from a small pool.
4. `MappingReplay` gives a batch up (`maximum_retry_attempts`) while the sink's dependency is down
   (the consumer stalls, blaming nothing); the mapping's position per shard persists across
   deliveries; `redrive` puts each on-failure record back through the group, before or after the
   main run met the resend's other copy.
5. A reply lost after the write, then a chain of reshards (split, merge) before the resend: the
   copy lands in any descendant, through shards that received nothing.
7. A direct `PutRecord` of an aggregate carrying the victim's producer id and lane, a counter and
   floor above the victim's, under another caller (`sl.c`).
8. Thousands of producers' lanes, dead ones (nothing for longer than the resend horizon) and
   live ones resending, past `_dedup.MAX_STATE_BYTES`, with crashes around the checkpoint: the
   oldest lanes go first, and every eviction stored is counted (`DedupLanesEvicted`), a process
   that dies after its evicting commit included (the model found that one missing). The alarm, the
   README's arithmetic and the bench are outside a model's reach. Past the bound, a live lane's
   copy would be applied again: by design, counted.

Deliveries may reach a child before its parents (the consumer's `ShardLineage` is what orders
them, as the design says nothing in Lambda guarantees it), as in `test_identity_model`.

What the world does that this model still leaves out: the worker driver (only the event-source
mapping's is driven), real time (the producer's clock is real but fast; record ages use the lease
table's virtual clock), the wire (botocore, serialization, the endpoint's own faults), a child
inheriting the parent's open connections (rewired here), a SnapStart restore that keeps the pid
and runs no at-fork hooks (here a restore is a fork: the pid changes and the hooks run, so the
model cannot tell an after-restore hook from a pid guard), threads sending during the fork, the
HTTP handler (its 422 on re-used ids, its caller stamp from API Gateway's event), bisection and
batching windows of the mapping, the dependency failing by itself (here it is down for whole
deliveries), guards' TTLs (property 6), several consumer groups, and KCL
consumers reading the same stream.

Long for a test module (over 400 lines) because the seven ingredients share one driver.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import inspect
import itertools
import json
import os
import signal
import threading
from collections import Counter
from multiprocessing.connection import Connection, Pipe
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardline.consumer import ConsumedRecord, DeadLetterQueue, KinesisConsumer, deaggregate, once, redrive
from shardline.consumer._dedup import MAX_STATE_BYTES
from shardline.errors import DependencyUnavailable
from shardline.kinesis import UserRecord
from shardline.kpl import encode
from shardline.kpl._identity import AggregateId
from shardline.testing import FakeLambdaContext, InMemoryLeaseTable, MappingReplay, event_record
from tests.support.identity_model import (
    FAULTS,
    FIRST_SEQUENCE,
    STREAM,
    Crash,
    Pipeline,
    SimShard,
    SimStream,
)

CALLERS_STAMPED = "caller" in UserRecord._fields  # the design's API (issue 39), once merged
IDS_SCOPED = hasattr(ConsumedRecord, "scoped_id")
GUARDS_HASH_PAYLOADS = "payload_hash" in inspect.signature(once).parameters
#: How the model fails (an invariant, or several explicit examples at once), not a TypeError of an API
#: that moved: the xfail marks accept only these.
MODEL_FAILS = (AssertionError, ExceptionGroup)
SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def caller_scope(caller: str | None) -> str:
    """The design's scope of a caller, computed here independently of the library."""
    if not caller:
        return "-"
    text = base64.b32encode(hashlib.sha256(caller.encode()).digest()).decode().lower()
    return text[:16]


def user_record(
    key: str, data: bytes, record_id: str | None, caller: str | None = None, derived: bool = False
) -> UserRecord:
    """A record stamped with its caller and id kind where the API has them (before the fix: neither)."""
    if CALLERS_STAMPED:
        return UserRecord(key, data, None, record_id, caller=caller, id_derived=derived)  # type: ignore[call-arg]
    return UserRecord(key, data, None, record_id)


def identity(record_id: str | None, data: bytes, caller: str | None = None, derived: bool = False) -> str:
    """What the sink keys a record by: its scoped id (the design), its id (before the fix), else its data."""
    if record_id is None:
        return data.decode()
    if IDS_SCOPED:
        return f"{caller_scope(caller)}/{'k' if derived else 'i'}/{record_id}"
    return record_id


class MemoryQueue:
    """SQS for the dead-letter queue: the messages it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def send_message(self, *, QueueUrl: str, MessageBody: str, **_: Any) -> dict[str, str]:
        self.bodies.append(json.loads(MessageBody))
        return {"MessageId": str(len(self.bodies))}


class World(Pipeline):
    """The model's pipeline with a dead-letter queue, a dependency that can be down, one mapping
    per shard that keeps its position (and gives batches up), and a sink keyed by identity and
    payload."""

    def __init__(self, stream: SimStream, batch_size: int, retries: int = -1) -> None:
        super().__init__(stream, batch_size)
        self.table = InMemoryLeaseTable(key_schema={"sink": ["pk"]}, start=stream.now)
        self.queue = MemoryQueue()
        self.consumer = KinesisConsumer(
            "model",
            self.table,
            kinesis=stream,
            checkpoint_interval=0.0,
            dlq=DeadLetterQueue(self.queue, "dlq"),  # type: ignore[arg-type]
        )
        self.consumer.handler(self._apply)
        self.retries = retries
        self.mappings: dict[str, MappingReplay] = {}
        self.down = 0  # deliveries the sink's dependency is still down for
        self.confirmed_keys: Counter[str] = Counter()  # "<identity>#<digest>" of confirmed records
        self.sent_keys: set[str] = set()

    def _apply(self, record: ConsumedRecord) -> list[dict[str, Any]]:
        self.handled += 1
        if self.crash_at is not None and self.handled >= self.crash_at:
            self.crash_at = None
            raise Crash("the process died in the handler")
        if self.down:
            raise DependencyUnavailable("the sink's table is unavailable")
        scoped = getattr(record, "scoped_id", None) if IDS_SCOPED else record.id
        name = scoped or record.data.decode()
        conflict = {"payload_hash": record.payload_hash} if GUARDS_HASH_PAYLOADS else {}  # type: ignore[attr-defined]
        writes = [once("sink", {"pk": {"S": f"once#{name}"}}, **conflict)] if record.id else []
        return [
            *writes,
            {
                "Update": {
                    "TableName": "sink",
                    "Key": {"pk": {"S": f"{name}#{digest(record.data)}"}},
                    "UpdateExpression": "ADD applied :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ]

    def post(self, records: list[UserRecord], callers: list[str | None] | None = None) -> None:
        """Send `records` through the producer, noting which were confirmed."""
        self.stream.now = max(self.stream.now, self.table.now())
        callers = callers or [None] * len(records)
        keys = [
            f"{identity(r.id, r.data, c, bool(getattr(r, 'id_derived', False)))}#{digest(r.data)}"
            for r, c in zip(records, callers, strict=True)
        ]
        self.requests.append(records)
        self.sent_keys.update(keys)
        for key, result in zip(keys, self.producer.put_many(records, deadline=5.0), strict=True):
            if result.success:
                self.confirmed_keys[key] += 1

    def deliver(self, shard_id: str, crash: int = 0, down: int = 0) -> None:
        """The shard's mapping delivers what it has (the dependency down for `down` deliveries)."""
        if crash == 1:
            self.crash_at = self.handled + 1
        elif crash == 2:
            self.table.fail_next("checkpoint_with", Crash("died after its commit"), landed=True)
        elif crash == 3:
            self.table.fail_next("checkpoint_with", Crash("died before its commit"))
        records = self.stream.shards[shard_id].records
        replay = self.mappings.get(shard_id)
        if replay is None:
            replay = self.mappings[shard_id] = MappingReplay(
                [], self.batch_size, maximum_retry_attempts=self.retries, clock=self.table.now
            )
        replay.records += [event_record(STREAM, shard_id, r) for r in records[len(replay.records) :]]
        for _ in range(60):  # a child waits (fails) until its parents are done
            if replay.finished:
                break
            self.down = max(0, down)
            down -= 1
            replay.invoke(self.consumer.process, FakeLambdaContext())
        self.down = 0

    def drain(self) -> None:
        self.stream.faults.clear()
        self.crash_at = None
        for shard in self.stream.in_lineage_order():
            self.deliver(shard.shard_id)

    def applied_keys(self) -> dict[str, int]:
        return {
            item["pk"]["S"]: int(item["applied"]["N"])
            for item in self.table.items("sink")
            if not item["pk"]["S"].startswith("once#")
        }

    def dead_lettered(self) -> set[str]:
        """Digests of the payloads dead-lettered (whole: the data is in the dead letter)."""
        return {digest(base64.b64decode(body["data"])) for body in self.queue.bodies}


def check_exactly_once(world: World, conflicts_surface: bool = False) -> None:
    """Every confirmed record applied once, nothing applied twice or that was never sent; with
    `conflicts_surface`, a confirmed record may instead be dead-lettered, and no identity has two
    payloads applied."""
    applied = world.applied_keys()
    assert all(count == 1 for count in applied.values()), {k: v for k, v in applied.items() if v != 1}
    missing = sorted(set(world.confirmed_keys) - set(applied))
    if conflicts_surface:
        dead = world.dead_lettered()
        missing = [key for key in missing if key.rsplit("#", 1)[1] not in dead]
        payloads = Counter(key.rsplit("#", 1)[0] for key in applied)
        assert all(n == 1 for n in payloads.values()), {k: n for k, n in payloads.items() if n > 1}
    assert not missing, f"confirmed, never applied: {missing[:5]}"
    assert set(applied) <= world.sent_keys, sorted(set(applied) - world.sent_keys)[:5]


# -- 1. forks and restores ---------------------------------------------------------------------------

#: Seconds a forked child may take to answer one command. A send in memory takes milliseconds;
#: a child that takes this long is stuck (a lock or a thread pool that did not survive the fork).
CHILD_WATCHDOG_S = 5.0


class PipeClient:
    """A forked child's Kinesis client: each call is served by the parent's `SimStream`."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.lock = threading.Lock()  # the producer's request threads share the pipe

    def list_shards(self, **params: Any) -> dict[str, Any]:
        return self._call("list_shards", params)

    def put_records(self, **params: Any) -> dict[str, Any]:
        return self._call("put_records", params)

    def _call(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.connection.send(("call", operation, params))
            kind, value = self.connection.recv()
        if kind == "timeout":
            raise ReadTimeoutError(endpoint_url="http://sim")
        if kind == "error":
            raise ClientError(value, "PutRecords")
        return value  # type: ignore[no-any-return]


class Child:
    """A forked copy of this process, sending with the producer it inherited, command by command."""

    def __init__(self, world: World) -> None:
        self.connection, theirs = Pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into pytest
            code = 0
            try:
                client = PipeClient(theirs)
                world.client.list_shards, world.client.put_records = client.list_shards, client.put_records
                while True:
                    command, records = theirs.recv()
                    if command == "exit":
                        break
                    results = world.producer.put_many(records, deadline=5.0)
                    theirs.send(("sent", [result.success for result in results]))
            except BaseException as exc:  # reported to the parent, which fails the test
                code = 1
                with contextlib.suppress(BaseException):  # the pipe is gone: the exit code says it
                    theirs.send(("crashed", repr(exc)))
            finally:
                os._exit(code)

    def send(self, stream: SimStream, records: list[UserRecord]) -> list[bool]:
        """Have the child send `records`, serving its calls on `stream`; which were confirmed."""
        self.connection.send(("send", records))
        while True:
            if not self.connection.poll(CHILD_WATCHDOG_S):
                raise AssertionError(f"the forked child's producer did not answer in {CHILD_WATCHDOG_S} s")
            message = self.connection.recv()
            if message[0] == "sent":
                return list(message[1])
            if message[0] == "crashed":
                raise AssertionError(f"the forked child died: {message[1]}")
            _, operation, params = message
            try:
                self.connection.send(("ok", getattr(stream, operation)(**params)))
            except ReadTimeoutError:
                self.connection.send(("timeout", None))
            except ClientError as exc:
                self.connection.send(("error", exc.response))

    def end(self) -> None:
        with contextlib.suppress(OSError):  # the child is gone already
            self.connection.send(("exit", None))
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def run_fleet(world: World, ops: list[tuple[str, int, int]], snapshot: bool) -> None:
    """Parent sends, forks (or, with `snapshot`, stops sending at its first fork: the image
    restored), children send, splits and deliveries, in `ops` order."""
    serial = itertools.count()
    children: list[Child] = []
    try:
        for op, number, option in ops:
            batch = [
                user_record(f"key-{n % 7}", f"r{n}".encode(), None)
                for n in (next(serial) for _ in range(number))
            ]
            if op == "send" and not (snapshot and children):
                world.post(batch)
            elif op == "fork" and len(children) < 2:
                children.append(Child(world))
            elif op == "child" and children:
                child = children[option % len(children)]
                world.requests.append(batch)
                for record, ok in zip(batch, child.send(world.stream, batch), strict=True):
                    key = f"{identity(None, record.data)}#{digest(record.data)}"
                    world.sent_keys.add(key)
                    world.confirmed_keys[key] += ok
            elif op == "split":
                world.stream.split(number)
            elif op == "consume":
                shards = world.stream.in_lineage_order()
                world.deliver(shards[number % len(shards)].shard_id, option % 4)
    finally:
        for child in children:
            child.end()
    world.drain()


fleet_ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 12), st.just(0)),
        st.tuples(st.just("fork"), st.just(0), st.just(0)),
        st.tuples(st.just("child"), st.integers(1, 12), st.integers(0, 1)),
        st.tuples(st.just("split"), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("consume"), st.integers(0, 100), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(SLOW, max_examples=100)
# The shrunk counterexample before the fixs: the child's record confirmed, never applied (its aggregate
# numbered like the parent's, under the same producer id); and a child forked after the producer
# was used, whose first send never returns (the request pool's threads did not survive the fork).
@example(ops=[("fork", 0, 0), ("send", 1, 0), ("child", 1, 0)], faults=[], shard_count=1, batch_size=1)
@example(ops=[("send", 1, 0), ("fork", 0, 0), ("child", 1, 0)], faults=[], shard_count=1, batch_size=1)
@given(fleet_ops, st.lists(st.sampled_from(FAULTS), max_size=20), st.integers(1, 3), st.integers(1, 7))
def test_property_1_a_forked_producer_id_is_never_live_in_two_processes(ops, faults, shard_count, batch_size):
    world = World(SimStream(shard_count, faults), batch_size)
    try:
        run_fleet(world, ops, snapshot=False)
    finally:
        world.producer.close()
    check_exactly_once(world)


@settings(SLOW, max_examples=100)
# The shrunk counterexample before the fix: the snapshot created its producer (the module-level pattern) and
# never used it; both restores send; the second one's record is skipped as a copy of the first's.
@example(before=[], ops=[("child", 1, 0), ("child", 1, 1)], faults=[], shard_count=1)
@given(
    st.lists(st.integers(1, 12), max_size=3),
    fleet_ops.filter(lambda ops: all(op != "send" for op, _, _ in ops)),
    st.lists(st.sampled_from(FAULTS), max_size=20),
    st.integers(1, 3),
)
def test_property_1_a_restored_snapshot_draws_a_new_producer_id_in_each_restore(
    before, ops, faults, shard_count
):
    world = World(SimStream(shard_count, faults), 5)
    snapshot = [("send", n, 0) for n in before] + [("fork", 0, 0), ("fork", 0, 0)]
    try:
        run_fleet(world, snapshot + ops, snapshot=True)
    finally:
        world.producer.close()
    check_exactly_once(world)


# -- 2. callers sharing ids, 3. ids re-used with other bodies ---------------------------------------


def run_posts(world: World, ops: list[tuple[str, Any, Any]]) -> None:
    """Posts of (caller, id, derived, body) records, re-posts, splits and deliveries; then every
    request re-posted until confirmed, and every shard drained."""
    posted: list[tuple[list[UserRecord], list[str | None]]] = []
    for op, number, option in ops:
        if op == "post":
            callers = [caller for caller, _, _, _ in option]
            records = [
                user_record(f"key-{n}", body.encode(), record_id, caller, derived)
                for n, (caller, record_id, derived, body) in enumerate(option)
            ]
            posted.append((records, callers))
            world.post(records, callers)
        elif op == "repost" and posted:
            world.post(*posted[number % len(posted)])
        elif op == "split":
            world.stream.split(number)
        elif op == "consume":
            shards = world.stream.in_lineage_order()
            world.deliver(shards[number % len(shards)].shard_id, option % 4)
    world.stream.faults.clear()
    for records, callers in posted:  # the client re-posts as the README tells it: until confirmed
        world.post(records, callers)
    world.drain()


def shared_ids(draw_body: st.SearchStrategy[int]) -> st.SearchStrategy[list[tuple[str, Any, Any]]]:
    record = st.tuples(
        st.sampled_from(["alice", "bob"]), st.sampled_from(["x", "k:1", "k:2"]), st.booleans(), draw_body
    )
    return st.lists(
        st.one_of(
            st.tuples(st.just("post"), st.just(0), st.lists(record, min_size=1, max_size=4)),
            st.tuples(st.just("repost"), st.integers(0, 100), st.just(0)),
            st.tuples(st.just("split"), st.integers(0, 100), st.just(0)),
            st.tuples(st.just("consume"), st.integers(0, 100), st.integers(0, 3)),
        ),
        min_size=1,
        max_size=8,
    )


def one_body_per_identity(ops: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """Property 2's posts: a record's body is its identity's (no id is re-used with another body)."""
    return [
        (
            op,
            number,
            [(c, i, d, f"{c}|{'k' if d else 'i'}|{i}") for c, i, d, _ in option] if op == "post" else option,
        )
        for op, number, option in ops
    ]


@settings(SLOW, max_examples=200)
@example(
    ops=[("post", 0, [("alice", "x", False, "alice|i|x"), ("alice", "x", True, "alice|k|x")])], faults=[]
)
@example(ops=[("post", 0, [("alice", "x", False, "alice|i|x"), ("bob", "x", False, "bob|i|x")])], faults=[])
@given(shared_ids(st.just(0)).map(one_body_per_identity), st.lists(st.sampled_from(FAULTS), max_size=20))
def test_property_2_ids_belong_to_their_caller_and_derived_ids_to_their_own_namespace(ops, faults):
    world = World(SimStream(2, faults), 5)
    try:
        run_posts(world, ops)
    finally:
        world.producer.close()
    check_exactly_once(world)


@settings(SLOW, max_examples=200)
@example(
    ops=[("post", 0, [("alice", "x", False, "alice|x|v0"), ("alice", "x", False, "alice|x|v1")])], faults=[]
)
@given(
    shared_ids(st.integers(0, 2)).map(
        lambda ops: [
            (op, n, [("alice", i, False, f"alice|{i}|v{b}") for _, i, _, b in o] if op == "post" else o)
            for op, n, o in ops
        ]
    ),
    st.lists(st.sampled_from(FAULTS), max_size=20),
)
def test_property_3_an_id_re_used_with_another_payload_surfaces_never_dropped_or_overwritten(ops, faults):
    world = World(SimStream(2, faults), 5)
    try:
        run_posts(world, ops)
    finally:
        world.producer.close()
    check_exactly_once(world, conflicts_surface=True)


# -- 4. redrives straddling copies ------------------------------------------------------------------


def redrive_batch(world: World, message: dict[str, Any]) -> Any:
    """`redrive` as an operator runs it, on the model's clock where it takes one."""
    clock = {"now": world.table.now} if "now" in inspect.signature(redrive).parameters else {}
    return redrive(world.consumer, world.stream, message, context=FakeLambdaContext(), **clock)


def run_outages(world: World, ops: list[tuple[str, int, int]]) -> None:
    """Sends (ids on odd ones), deliveries while the sink's dependency is down for some of them
    (the mapping gives batches up), redrives of what it gave up, splits; then the shards drained
    and every on-failure record redriven (twice: a redrive run again applies nothing again)."""
    serial = itertools.count()
    for op, number, option in ops:
        if op == "send":
            batch = [
                user_record(f"key-{n % 5}", f"r{n}".encode(), f"id-{n}" if option else None)
                for n in (next(serial) for _ in range(number))
            ]
            world.post(batch)
        elif op == "consume":
            shards = world.stream.in_lineage_order()
            world.deliver(shards[number % len(shards)].shard_id, 0, down=option)
        elif op == "split":
            world.stream.split(number)
        elif op == "redrive":
            pending = [m for replay in world.mappings.values() for m in replay.on_failure]
            if pending:
                redrive_batch(world, pending[number % len(pending)])
        elif op == "split":
            world.stream.split(number)
    world.drain()
    for _ in range(2):
        for message in [m for replay in world.mappings.values() for m in replay.on_failure]:
            result = redrive_batch(world, message)
            assert result.complete, result


outage_ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 10), st.integers(0, 1)),
        st.tuples(st.just("consume"), st.integers(0, 100), st.integers(0, 4)),
        st.tuples(st.just("redrive"), st.integers(0, 100), st.just(0)),
    ),
    min_size=1,
    max_size=10,
)


@settings(SLOW, max_examples=300)
# Copy 1 of a resent aggregate given up by the mapping, copy 2 applied by the main run, copy 1 redriven.
@example(ops=[("send", 1, 0), ("consume", 0, 1)], faults=["lost_after"], batch_size=1, retries=0)
# Both copies given up (the dependency down for two deliveries), each redriven under its own row.
@example(ops=[("send", 1, 0), ("consume", 0, 2)], faults=["lost_after"], batch_size=1, retries=0)
@given(
    outage_ops,
    st.lists(st.sampled_from((*FAULTS, "lost_after", "lost_after")), max_size=20),
    st.integers(1, 5),
    st.integers(0, 2),
)
def test_property_4_a_redrive_is_applied_once_with_the_main_run(ops, faults, batch_size, retries):
    world = World(SimStream(1, faults), batch_size, retries=retries)
    try:
        run_outages(world, ops)
    finally:
        world.producer.close()
    check_exactly_once(world)


# -- 5. chained reshards ----------------------------------------------------------------------------


def run_reshards(world: World, ops: list[tuple[str, int, Any]]) -> None:
    """Sends, some losing a reply after the write while a chain of reshards happens before the
    resend; reshards and deliveries between sends."""
    serial = itertools.count()
    stream = world.stream
    for op, number, option in ops:
        if op == "send":
            if option:  # the reply is lost after the write; the stream reshards before the resend
                stream.faults.insert(0, "lost_after")
                stream.after_lost_reply = [
                    (lambda kind=kind, pick=pick: getattr(stream, kind)(pick)) for kind, pick in option
                ]
            batch = [
                user_record(f"key-{n % 9}", f"r{n}".encode(), None)
                for n in (next(serial) for _ in range(number))
            ]
            world.post(batch)
            stream.after_lost_reply = []
        elif op in ("split", "merge"):
            getattr(stream, op)(number)
        elif op == "consume":
            shards = stream.in_lineage_order()
            world.deliver(shards[number % len(shards)].shard_id, option % 4)
    world.drain()


reshard = st.tuples(st.sampled_from(["split", "merge"]), st.integers(0, 100))
reshard_ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 10), st.lists(reshard, max_size=3)),
        st.tuples(st.sampled_from(["split", "merge"]), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("consume"), st.integers(0, 100), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(SLOW, max_examples=300)
@example(ops=[("send", 2, [("split", 0), ("split", 0)])], faults=[], shard_count=1, batch_size=1)
@example(ops=[("send", 2, [("split", 0), ("merge", 0)])], faults=[], shard_count=1, batch_size=1)
@example(ops=[("send", 2, [("merge", 0), ("split", 0)])], faults=[], shard_count=2, batch_size=1)
# One split, the child delivered before its parent ever was (the parent has no row yet).
@example(ops=[("send", 1, [("split", 0)]), ("consume", 2, 0)], faults=[], shard_count=1, batch_size=1)
@given(reshard_ops, st.lists(st.sampled_from(FAULTS), max_size=20), st.integers(1, 3), st.integers(1, 7))
def test_property_5_dedup_state_follows_the_whole_lineage_of_chained_reshards(
    ops, faults, shard_count, batch_size
):
    world = World(SimStream(shard_count, faults), batch_size)
    try:
        run_reshards(world, ops)
    finally:
        world.producer.close()
    check_exactly_once(world)


# -- 7. forged floors -------------------------------------------------------------------------------


def victims_aggregates(stream: SimStream) -> list[tuple[SimShard, AggregateId]]:
    """Every aggregate id the stream holds, with its shard (what a reader of the stream sees)."""
    found = []
    for shard in stream.shards.values():
        records = [event_record(STREAM, shard.shard_id, r) for r in shard.records]
        for record in deaggregate(records):
            if record.aggregate_id is not None and record.data.startswith(b"r"):
                found.append((shard, AggregateId.parse(record.aggregate_id)))
    return found


def run_forgeries(world: World, ops: list[tuple[str, int, int]]) -> None:
    """The victim's sends (its caller "victim"), forgeries by "mallory" (a direct write of an
    aggregate carrying the victim's producer id and lane, a higher counter and a high floor),
    splits and deliveries."""
    serial = itertools.count()
    forged = itertools.count()
    stream = world.stream
    for op, number, option in ops:
        if op == "send":
            batch = [
                user_record(f"key-{n % 5}", f"r{n}".encode(), None, "victim")
                for n in (next(serial) for _ in range(number))
            ]
            world.post(batch, ["victim"] * len(batch))
        elif op == "forge":
            seen = victims_aggregates(stream)
            if not seen:
                continue
            shard, victim = seen[number % len(seen)]
            fake = AggregateId(
                victim.producer, victim.lane, victim.counter + 1 + option, victim.counter + 10_000
            )
            data = f"forged-{next(forged)}".encode()
            payload = encode([user_record("mallory", data, None, "mallory")], fake.encode())
            stream._write({"PartitionKey": "a", "ExplicitHashKey": str(shard.start), "Data": payload})
            world.sent_keys.add(f"{identity(None, data)}#{digest(data)}")
        elif op == "split":
            stream.split(number)
        elif op == "consume":
            shards = stream.in_lineage_order()
            world.deliver(shards[number % len(shards)].shard_id, option % 4)
    world.drain()


forgery_ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 10), st.just(0)),
        st.tuples(st.just("forge"), st.integers(0, 100), st.integers(0, 3)),
        st.tuples(st.just("split"), st.integers(0, 100), st.just(0)),
        st.tuples(st.just("consume"), st.integers(0, 100), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(SLOW, max_examples=200)
@example(
    ops=[("send", 1, 0), ("send", 1, 0), ("send", 1, 0), ("forge", 0, 0), ("send", 1, 0)],
    faults=[],
    shard_count=2,
    batch_size=1,
)
@given(forgery_ops, st.lists(st.sampled_from(FAULTS), max_size=20), st.integers(1, 2), st.integers(1, 7))
def test_property_7_a_floor_cannot_be_forged_across_callers(ops, faults, shard_count, batch_size):
    world = World(SimStream(shard_count, faults), batch_size)
    try:
        run_forgeries(world, ops)
    finally:
        world.producer.close()
    check_exactly_once(world)


# -- 8. lane eviction --------------------------------------------------------------------------------

#: Lanes of a bare `<producer>.<lane>` key the state holds at its bound: `"<16>.0":[w,t]`, 36 bytes.
LANES_AT_BOUND = MAX_STATE_BYTES // 36


def lane_records(dead: int, live: int, copies: list[int], start: float) -> list[dict[str, Any]]:
    """One shard: an aggregate from each of `dead` producers (their last, 400 s ago: past the
    resend horizon, within the dedup horizon), then one from each of `live` producers, then the
    live producers' resends of theirs (`copies`: indexes among the live, within the horizon)."""
    entries = []
    for index in range(dead + live):
        arrival = start + (0.0 if index < dead else 400.0)
        entries.append((f"{index:016x}", f"lane-{index}".encode(), arrival))
    entries += [(entries[dead + c % live][0], entries[dead + c % live][1], start + 460.0) for c in copies]
    return [
        event_record(
            STREAM,
            "shardId-000000000000",
            {
                "PartitionKey": "a",
                "Data": encode([UserRecord(f"k{n % 97}", data)], AggregateId(producer, "0", 1, 1).encode()),
                "SequenceNumber": str(FIRST_SEQUENCE + n * 10**16),
                "ApproximateArrivalTimestamp": arrival,
            },
        )
        for n, (producer, data, arrival) in enumerate(entries)
    ]


@settings(SLOW, max_examples=4)
@example(extra=50, live=1, copies=[0], batch_size=2500, crashes=[(1, 2)])  # a crash after the evicting commit
@given(
    st.integers(50, 400),
    st.integers(1, 300),
    st.lists(st.integers(0, 10_000), min_size=1, max_size=30),
    st.integers(1000, 2500),
    st.lists(st.tuples(st.integers(0, 5), st.integers(2, 3)), max_size=2),
)
def test_property_8_lane_eviction_is_counted_and_retires_dead_producers_first(
    extra, live, copies, batch_size, crashes
):
    start = 1_700_000_000.0
    records = lane_records(LANES_AT_BOUND + extra, live, copies, start)
    table = InMemoryLeaseTable(key_schema={"sink": ["pk"]}, start=start + 500.0)
    consumer = KinesisConsumer("lanes", table, checkpoint_interval=3600.0)  # at each batch's end
    consumer.handler(
        lambda record: [
            {
                "Update": {
                    "TableName": "sink",
                    "Key": {"pk": {"S": record.data.decode()}},
                    "UpdateExpression": "ADD applied :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            }
        ]
    )
    replay = MappingReplay(records, batch_size)
    crash_at = dict(crashes)
    for invocation in range(200):
        if replay.finished:
            break
        kind = crash_at.pop(invocation, 0)
        if kind == 2:
            table.fail_next("checkpoint_with", Crash("died after its commit"), landed=True)
        elif kind == 3:
            table.fail_next("checkpoint_with", Crash("died before its commit"))
        replay.invoke(consumer.process, FakeLambdaContext())
    applied = {item["pk"]["S"]: int(item["applied"]["N"]) for item in table.items("sink")}
    lanes = LANES_AT_BOUND + extra + live
    assert len(applied) == lanes, "a record was lost"
    twice = sorted(key for key, count in applied.items() if count != 1)
    assert not twice, f"live producers' resends applied again (live lanes evicted first): {twice[:5]}"
    row = table.get(consumer.settings.lease_key(STREAM, "shardId-000000000000"))
    assert row is not None and row.applied_aggregates
    kept = len(json.loads(row.applied_aggregates)["k"])
    evicted = consumer.metrics.snapshot()["DedupLanesEvicted"]
    assert evicted >= lanes - kept, f"{lanes - kept} lanes evicted from the stored state, {evicted} counted"


@pytest.mark.xfail(
    strict=True,
    raises=MODEL_FAILS,
    reason="issue 39 property 4 with reshards: a child's redrive run before the redrive of its parent's "
    "given-up tail waits for it (not complete); Lambda moves on to the children, the consumer does not yet",
)
@settings(SLOW, max_examples=150)
# The parent's given-up tail redriven after its child's: the child's redrive waits for the parent.
@example(
    ops=[
        ("send", 1, 0),
        ("split", 0, 0),
        ("split", 0, 0),
        ("consume", 16, 0),
        ("send", 2, 0),
        ("consume", 1, 1),
    ],
    faults=[],
    shard_count=2,
    batch_size=1,
    retries=0,
)
# The parent's last batch given up, then its children's: redriven parent first, all applied once.
@example(
    ops=[("send", 1, 0), ("send", 1, 0), ("split", 1, 0), ("send", 1, 0), ("consume", 1, 1)],
    faults=[],
    shard_count=2,
    batch_size=1,
    retries=0,
)
@given(
    st.lists(
        st.one_of(
            outage_ops.flatmap(lambda ops: st.just(ops[0])),
            st.tuples(st.just("split"), st.integers(0, 100), st.just(0)),
        ),
        min_size=1,
        max_size=10,
    ),
    st.lists(st.sampled_from((*FAULTS, "lost_after", "lost_after")), max_size=20),
    st.integers(1, 2),
    st.integers(1, 5),
    st.integers(0, 2),
)
def test_property_4_a_redrive_is_applied_once_with_the_main_run_across_reshards(
    ops, faults, shard_count, batch_size, retries
):
    world = World(SimStream(shard_count, faults), batch_size, retries=retries)
    try:
        run_outages(world, ops)
    finally:
        world.producer.close()
    check_exactly_once(world)
