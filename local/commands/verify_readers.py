"""The readers of `verify`: a run's records in an event sink (incrementally, or any records sink by
scanning it for ids), counts in a counts sink, letters in a dead-letter queue, copies in the stream —
each read without consuming anything."""

from __future__ import annotations

import base64
import datetime
import itertools
import json
import time
from array import array
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from shardline.errors import AggregationError
from shardline.kpl._decode import decode_aggregate, is_aggregated
from shardline.kpl._identity import NO_CALLER_SCOPE

from .send import parse_payload

SEQUENCE_DIGITS = 129  # the event sink's zero-padding of sequence numbers in `sk`
ID_BATCH = 100  # BatchGetItem's limit on keys per call
EMPTY_CHUNKS = 3  # calls in a row that found no id end a poll that is not thorough


class SinkReader:
    """A run's records in an event sink: those without a client id read partition by partition from
    the last `sk` seen, those with one (an item keyed `id#<scoped id>`, as functions/event_sink
    writes them: `<caller scope>/i/<id>`, under each of `scopes` — the scope of the principal that
    sent the run, and "-" for records no caller was stamped on) by BatchGetItem of the run's ids
    not found yet, in the order they were sent: a poll stops
    after `EMPTY_CHUNKS` calls in a row found none (the consumers have not reached them: asking for
    every missing id on every poll would load the endpoint the consumers write to), and
    `poll(thorough=True)` asks for all of them.

    With `expected_id(seq)` (the id a record was sent with), an item whose id (`id_attribute`) is not
    its record's id (or is absent) is kept in `wrong_ids`. An item without the record's payload in
    `data` is known by its id alone (`seq_of_id`)."""

    def __init__(
        self,
        dynamodb: Any,
        table: str,
        stream_name: str,
        run_id: str,
        expected_id: Callable[[int], str | None] | None = None,
        *,
        id_attribute: str = "recordId",
        seq_of_id: dict[str, int] | None = None,
        scopes: tuple[str, ...] = (NO_CALLER_SCOPE,),
    ) -> None:
        self._scopes = scopes
        self._dynamodb, self._table, self._stream, self._run = dynamodb, table, stream_name, run_id
        self._expected_id = expected_id
        self._id_attribute, self._seq_of_id = id_attribute, seq_of_id or {}
        self.after: dict[str, str] = {}  # pk -> the last sk read (exclusive lower bound)
        self.positions: dict[int, list[str]] = {}  # seq -> every "pk|sk" it was found at
        self.wrong_ids: dict[int, list[str | None]] = {}  # seq -> `recordId`s not its id (None: absent)
        self.first_seen: dict[int, float] = {}
        self.queries = 0
        self.items_read = 0
        self._ids_found: set[str] = set()
        self._ids_in_order: list[str] | None = None  # the run's ids in the order sent, sorted once
        self._first_missing = 0  # every id before it in `_ids_in_order` was found

    def add_shard(self, shard_id: str, from_sequence: str | None = None) -> None:
        """Read `shard_id`'s partition from `from_sequence` (inclusive), or from its start."""
        # "0..seq" sorts just before "0..seq#000000"; " " before every key (DynamoDB refuses "")
        start = from_sequence.zfill(SEQUENCE_DIGITS) if from_sequence else " "
        self.after.setdefault(f"{self._stream}#{shard_id}", start)  # a partition's start is set once

    def poll(self, *, thorough: bool = False) -> None:
        """Query every partition for what is new since the last poll (`thorough`: and every id not
        found yet)."""
        now = time.time()
        for pk in list(self.after):
            query: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk AND sk > :after",
                "ExpressionAttributeValues": {":pk": {"S": pk}, ":after": {"S": self.after[pk]}},
                "ProjectionExpression": "sk, #data, #id",
                "ExpressionAttributeNames": {"#data": "data", "#id": self._id_attribute},
                "ConsistentRead": True,
            }
            while True:
                page = self._dynamodb.query(**query)
                self.queries += 1
                for item in page["Items"]:
                    self.items_read += 1
                    self.after[pk] = item["sk"]["S"]
                    found = item.get(self._id_attribute, {}).get("S")
                    fields = parse_payload(item.get("data", {}).get("B", b""))
                    if fields is not None and fields["run"] == self._run:
                        seq = fields["seq"]
                    elif fields is None and found in self._seq_of_id:
                        seq = self._seq_of_id[found]
                    else:
                        continue
                    self.positions.setdefault(seq, []).append(f"{pk}|{item['sk']['S']}")
                    if self._expected_id is not None and found != self._expected_id(seq):
                        self.wrong_ids.setdefault(seq, []).append(found)
                    self.first_seen.setdefault(seq, now)
                if "LastEvaluatedKey" not in page:
                    break
                query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self._poll_ids(now, thorough)

    def _poll_ids(self, now: float, thorough: bool) -> None:
        """The items keyed by the run's ids that were not there at the last poll."""
        if self._ids_in_order is None:
            self._ids_in_order = sorted(self._seq_of_id, key=self._seq_of_id.__getitem__)
        order, found = self._ids_in_order, self._ids_found
        while self._first_missing < len(order) and order[self._first_missing] in found:
            self._first_missing += 1
        missing = (i for i in itertools.islice(order, self._first_missing, None) if i not in found)
        empty = 0
        while empty < EMPTY_CHUNKS or thorough:
            chunk = list(itertools.islice(missing, ID_BATCH // len(self._scopes)))
            if not chunk:
                return
            known = len(found)
            keys = [
                {"pk": {"S": f"id#{scope}/i/{i}"}, "sk": {"S": "id"}} for i in chunk for scope in self._scopes
            ]
            request: dict[str, Any] = {
                self._table: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": "pk, sk, #id",
                    "ExpressionAttributeNames": {"#id": self._id_attribute},
                }
            }
            while request:
                page = self._dynamodb.batch_get_item(RequestItems=request)
                self.queries += 1
                for item in page.get("Responses", {}).get(self._table, []):
                    self.items_read += 1
                    record_id = item["pk"]["S"].removeprefix("id#").split("/", 2)[-1]  # the id past its scope
                    self._ids_found.add(record_id)
                    seq = self._seq_of_id[record_id]
                    self.positions.setdefault(seq, []).append(f"{item['pk']['S']}|{item['sk']['S']}")
                    held = item.get(self._id_attribute, {}).get("S")
                    if self._expected_id is not None and held != self._expected_id(seq):
                        self.wrong_ids.setdefault(seq, []).append(held)
                    self.first_seen.setdefault(seq, now)
                request = dict(page.get("UnprocessedKeys") or {})
            empty = 0 if len(found) > known else empty + 1


class ScanSinkReader:
    """A run's records in a records sink of any key schema, known by their ids: the table scanned
    whole (consistently) on each poll, each item whose `id_attribute` is one of the run's ids counted
    at its key. `positions` is the last scan's (seq -> every item key holding its id)."""

    def __init__(self, dynamodb: Any, table: str, id_attribute: str, seq_of_id: dict[str, int]) -> None:
        self._dynamodb, self._table, self._id, self._seq_of_id = dynamodb, table, id_attribute, seq_of_id
        self.positions: dict[int, list[str]] = {}
        self.first_seen: dict[int, float] = {}
        self.wrong_ids: dict[int, list[str | None]] = {}  # never: an item is the run's by its id
        self.queries = 0
        self.items_read = 0
        self._keys: list[str] | None = None

    def poll(self, *, thorough: bool = True) -> None:
        """Scan the table (every poll is thorough)."""
        now = time.time()
        if self._keys is None:
            schema = self._dynamodb.describe_table(TableName=self._table)["Table"]["KeySchema"]
            self._keys = [key["AttributeName"] for key in schema]
        positions: dict[int, list[str]] = {}
        request: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        while True:
            page = self._dynamodb.scan(**request)
            self.queries += 1
            for item in page["Items"]:
                self.items_read += 1
                seq = self._seq_of_id.get(item.get(self._id, {}).get("S", ""))
                if seq is None:
                    continue
                where = "|".join(str(next(iter(item[key].values()), "")) for key in self._keys if key in item)
                positions.setdefault(seq, []).append(where)
                self.first_seen.setdefault(seq, now)
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        self.positions = positions


def read_counts(
    dynamodb: Any,
    table: str,
    keys: Iterable[str],
    key_attribute: str = "partitionKey",
    count_attribute: str = "count",
) -> dict[str, int]:
    """A counts sink's count (`count_attribute`) for each of `keys` (`key_attribute`, strings; absent:
    0), by BatchGetItem."""
    counts: dict[str, int] = {}
    keys = list(keys)
    for start in range(0, len(keys), 100):
        request = {
            table: {
                "Keys": [{key_attribute: {"S": key}} for key in keys[start : start + 100]],
                "ConsistentRead": True,
            }
        }
        while request:
            answer = dynamodb.batch_get_item(RequestItems=request)
            for item in answer["Responses"].get(table, []):
                counts[item[key_attribute]["S"]] = int(item.get(count_attribute, {}).get("N", "0"))
            request = answer.get("UnprocessedKeys") or {}
    return counts


class DeadLetterReader:
    """The run's letters in a group's DLQ, read without consuming them (their visibility is restored).

    A letter is the run's when its data is `send`'s payload of the run, else when its `recordId` (the
    client id the record arrived with, which shardline's dead letters carry) is one of `seq_of_id`'s:
    a run of the user's payloads (a template, a file) is known by its ids alone. Letters of earlier
    runs are not kept (`letters`), only counted in the queue's `depth`."""

    def __init__(self, sqs: Any, url: str, run_id: str, seq_of_id: dict[str, int] | None = None) -> None:
        self._sqs, self._url, self._run = sqs, url, run_id
        self._seq_of_id = seq_of_id or {}
        self.depth = 0
        self.letters: dict[int, dict[str, Any]] = {}  # seq -> the letter (deduplicated by its id)
        self._read_at_depth = 0

    def poll(self) -> None:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        attributes = self._sqs.get_queue_attributes(QueueUrl=self._url, AttributeNames=names)["Attributes"]
        self.depth = sum(int(attributes.get(name, 0)) for name in names)
        if self.depth != self._read_at_depth:
            self._read_all()
            self._read_at_depth = self.depth

    def _read_all(self) -> None:
        handles: list[str] = []
        try:
            while True:
                messages = self._sqs.receive_message(
                    QueueUrl=self._url, MaxNumberOfMessages=10, VisibilityTimeout=20, WaitTimeSeconds=0
                ).get("Messages", [])
                if not messages:
                    break
                for message in messages:
                    handles.append(message["ReceiptHandle"])
                    self._keep(message["Body"])
        finally:
            for start in range(0, len(handles), 10):
                entries = [
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
                    for i, h in enumerate(handles[start : start + 10])
                ]
                self._sqs.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)

    def _keep(self, body: str) -> None:
        try:
            letter = json.loads(body)
            data = base64.b64decode(letter["data"]) if letter.get("data") else b""
        except (ValueError, TypeError, KeyError):
            return
        fields = parse_payload(data)
        if fields is not None and fields["run"] == self._run:
            self.letters.setdefault(fields["seq"], letter | {"_data": data})
        elif fields is None and letter.get("recordId") in self._seq_of_id:
            self.letters.setdefault(self._seq_of_id[letter["recordId"]], letter | {"_data": data})


class StreamCopies:
    """What the stream holds of a run: every copy of every record, told apart by aggregate id.

    A Kinesis record is a copy of an aggregate already seen when it carries the same aggregate id
    (the producer resent it after a lost reply, or re-routed it after a reshard); a user record
    reached the stream again through a client's re-post when a new aggregate holds it again."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.kinesis_records = 0  # Kinesis records holding at least one record of the run
        self.user_records = 0  # the run's user records, every copy
        self.without_aggregate_id = 0  # Kinesis records of the run with no aggregate id
        self.aggregate_copies = 0  # Kinesis records that repeat an aggregate id already seen
        self.records_in_aggregate_copies = 0  # the run's user records in those copies
        self.reposted_copies = 0  # copies of user records in an aggregate other than their first
        self.wrong_ids = 0  # user records in aggregates whose `sl.id` is not the id `send` gave them
        self.undecodable = 0  # Kinesis records that look aggregated but do not decode
        self.shards_read = 0
        self.copies = array("I", [0]) * count  # per seq: copies in the stream
        self.in_new_aggregates = array("I", [0]) * count  # per seq: distinct aggregates holding it
        self.backed = bytearray(count)  # per seq: a copy is at the position the API answered
        self.where: dict[int, list[str]] = {}  # watched seqs -> "shard@sequence#index agg=<id>" per copy

    def in_stream(self, seq: int) -> bool:
        return self.copies[seq] > 0

    @property
    def records_reposted(self) -> int:
        """User records the stream holds in more than one aggregate (client re-posts)."""
        return sum(1 for n in self.in_new_aggregates if n > 1)

    @property
    def records_twice(self) -> int:
        """User records the stream holds more than once, whatever the reason."""
        return sum(1 for n in self.copies if n > 1)


class StreamReader:
    """Reads every shard of a stream (the closed ones too) from `since` (epoch seconds) to its end,
    as an observer, and counts the copies of one run's records (`StreamCopies`).

    `positions` maps seq -> the (shard id, sequence number) the API answered for it, to check each
    accepted record is at its position; `expected_id(seq)` is the id it was sent with (None: none).
    A user record whose data is not `send`'s payload is the run's by its id in the KPL aggregate
    (`seq_of_id`): a run of the user's payloads; a plain Kinesis record carries no id to know it by."""

    def __init__(
        self,
        kinesis: Any,
        stream_name: str,
        run_id: str,
        count: int,
        positions: dict[int, tuple[str, str]],
        expected_id: Callable[[int], str | None],
        since: float | None = None,
        watch: Iterable[int] = (),
        seq_of_id: dict[str, int] | None = None,
    ) -> None:
        self._kinesis, self._stream, self._run = kinesis, stream_name, run_id
        self._seq_of_id = seq_of_id or {}
        self._positions, self._expected_id, self._since = positions, expected_id, since
        self._watch = frozenset(watch)  # seqs whose every copy is noted (`StreamCopies.where`)
        self.copies = StreamCopies(count)
        self._aggregates: set[str] = set()

    def read(self) -> StreamCopies:
        shards = []
        request: dict[str, Any] = {"StreamName": self._stream}
        while True:
            answer = self._call("list_shards", **request)
            shards += [shard["ShardId"] for shard in answer.get("Shards", [])]
            if not answer.get("NextToken"):
                break
            request = {"NextToken": answer["NextToken"]}
        for shard_id in shards:
            self._read_shard(shard_id)
            self.copies.shards_read += 1
        return self.copies

    def _call(self, operation: str, **kwargs: Any) -> Any:
        """The call, retried while the shard's read limits throttle it."""
        for attempt in range(60):
            try:
                return getattr(self._kinesis, operation)(**kwargs)
            except ClientError as error:
                code = error.response.get("Error", {}).get("Code", "")
                if code not in ("ProvisionedThroughputExceededException", "LimitExceededException"):
                    raise
                time.sleep(min(1.0, 0.2 * (attempt + 1)))
        return getattr(self._kinesis, operation)(**kwargs)

    def _iterator(self, shard_id: str) -> str:
        where = {"StreamName": self._stream, "ShardId": shard_id}
        if self._since is not None:
            moment = datetime.datetime.fromtimestamp(self._since, datetime.UTC)
            try:
                answer = self._call(
                    "get_shard_iterator", **where, ShardIteratorType="AT_TIMESTAMP", Timestamp=moment
                )
                return str(answer["ShardIterator"])
            except (ClientError, BotoCoreError):
                pass  # read it whole
        return str(
            self._call("get_shard_iterator", **where, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        )

    def _read_shard(self, shard_id: str) -> None:
        iterator: str | None = self._iterator(shard_id)
        while iterator:
            answer = self._call("get_records", ShardIterator=iterator, Limit=10_000)
            for record in answer["Records"]:
                self._take(shard_id, record)
            if not answer["Records"] and answer.get("MillisBehindLatest", 0) == 0:
                break
            iterator = answer.get("NextShardIterator")

    def _take(self, shard_id: str, record: dict[str, Any]) -> None:  # noqa: C901 -- over the gate before it existed; issue 26 cuts it
        data, sequence = record["Data"], record["SequenceNumber"]
        aggregate_id: str | None = None
        members: list[tuple[bytes, str | None]]
        aggregated = is_aggregated(data)
        if aggregated:
            try:
                users, aggregate_id = decode_aggregate(data)
            except AggregationError:
                self.copies.undecodable += 1
                return
            members = [(user.data, user.id) for user in users]
        else:
            members = [(data, None)]
        seqs: list[tuple[int, str | None]] = []
        for member, member_id in members:
            fields = parse_payload(member)
            if fields is not None and fields["run"] == self._run and 0 <= fields["seq"] < self.copies.count:
                seqs.append((fields["seq"], member_id))
            elif fields is None and member_id is not None and member_id in self._seq_of_id:
                seqs.append((self._seq_of_id[member_id], member_id))
        if not seqs:
            return
        copies = self.copies
        copies.kinesis_records += 1
        copy = aggregate_id is not None and aggregate_id in self._aggregates
        if aggregate_id is None:
            copies.without_aggregate_id += 1
        elif copy:
            copies.aggregate_copies += 1
            copies.records_in_aggregate_copies += len(seqs)
        else:
            self._aggregates.add(aggregate_id)
        for index, (seq, member_id) in enumerate(seqs):
            if seq in self._watch:
                note = f"{shard_id}@{sequence}#{index} aggregate={aggregate_id}{' (copy)' if copy else ''}"
                copies.where.setdefault(seq, []).append(note)
            copies.user_records += 1
            # Only a KPL aggregate carries a record's id (its tags); a plain Kinesis record, from a
            # producer that does not aggregate, is known by its payload alone.
            if aggregated and member_id != self._expected_id(seq):
                copies.wrong_ids += 1
            if self._positions.get(seq) == (shard_id, sequence):
                copies.backed[seq] = 1
            copies.copies[seq] += 1
            if not copy:  # a new aggregate (or a Kinesis record of its own) holds it
                copies.in_new_aggregates[seq] += 1
                copies.reposted_copies += copies.in_new_aggregates[seq] > 1
