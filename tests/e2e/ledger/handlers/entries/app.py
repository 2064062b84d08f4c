"""Worker group `ledger-entries`: each ledger entry, parsed and checked, once, as an item of the
entries table, keyed by account and entry id (the caller's record id).

An entry is JSON: {"account": "acc-...", "amount": "12.50", "currency": "EUR"}. One that does not
parse, or whose amount is not a decimal, or whose currency is not three capitals, fails: after
MAX_ATTEMPTS it is in the group's dead-letter queue, whole, with the error's type and message (the
field and why: the same words for the same fault, so a verdict groups them) as its cause. Each
attempt is logged as an error (Powertools' JSON lines: the dashboard's "Recent errors").
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from functools import partial
from typing import Any

from aws_lambda_powertools import Logger

from shardline.aws_lambda import ConsumerFunction
from shardline.consumer import ConsumedRecord

CURRENCY = re.compile(r"[A-Z]{3}")
logger = Logger(service="ledger-entries")  # JSON lines with their level: the dashboard's "Recent errors"


class InvalidEntry(ValueError):
    """An entry the ledger refuses: the field and why."""


def parse(record: ConsumedRecord) -> dict[str, Any]:
    try:
        entry = json.loads(record.data)
    except ValueError as error:
        raise InvalidEntry(f"not JSON ({error})") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("account"), str):
        raise InvalidEntry("account: missing")
    try:
        amount = Decimal(str(entry.get("amount")))
    except InvalidOperation:
        raise InvalidEntry(f"amount: {entry.get('amount')!r} is not a decimal") from None
    if not amount.is_finite():
        raise InvalidEntry(f"amount: {amount} is not finite")
    if not isinstance(entry.get("currency"), str) or not CURRENCY.fullmatch(entry["currency"]):
        raise InvalidEntry(f"currency: {entry.get('currency')!r} is not three capitals")
    return {"account": entry["account"], "amount": amount, "currency": entry["currency"]}


def entry_item(table: str, record: ConsumedRecord) -> list[dict[str, Any]]:
    if record.id is None:
        raise InvalidEntry(f"record {record.sequence_number}: an entry needs its id as the record id")
    try:
        entry = parse(record)
    except InvalidEntry as error:
        logger.error("invalid ledger entry", extra={"entry": record.id, "reason": str(error)})
        raise
    item = {
        "account": {"S": entry["account"]},
        "entry": {"S": record.id},
        "amount": {"N": str(entry["amount"])},
        "currency": {"S": entry["currency"]},
    }
    return [{"Put": {"TableName": table, "Item": item}}]


function = ConsumerFunction(lambda table: partial(entry_item, table))
