"""Faster paths through moto's (5.2.5) DynamoDB for the endpoint, each giving the same answers and
refusals as moto's own: what an event sink's, a counter's and a lease table's writes spend CPU on.

`apply()` (idempotent; `local.endpoint.dynamodb.apply()` calls it) patches:
- `Item.__init__`: moto's `LimitedSizeDict` re-sums the whole item's size on every attribute it
  stores, so building an item cost O(attributes²) `DynamoType.size()` calls (a 7-attribute sink
  Put: 35 of the put's 48 µs). The item is built with one running sum instead, raising
  `ItemSizeTooLarge` at the same attribute, as the sum only grows. And its key attributes are its
  `hash_key` and `range_key` objects, not equal copies of them: moto built the same `DynamoType`
  twice for each key (88 bytes each, for as long as the item is stored: 176 of a sink item's
  ~2,100 bytes, and of a ~300-character guard item's ~1,450). A key's type (S, N, B) is never
  changed in place (moto replaces such an attribute's value; a key attribute is never updated),
  so sharing it changes nothing an item answers or how it is copied (`copy.deepcopy` keeps the
  sharing in the copy);
- `UpdateExpressionParser.make`: an UpdateExpression was tokenized and parsed twice per Update
  (once to validate the request, once to apply it). Its AST depends on the expression's text
  alone and nobody mutates it: the validator works on a deep copy (`Validator.__init__`), the
  request's checks only read it. Parsed once per distinct text (a bounded cache; an expression
  that fails to parse is not cached and fails again the same way);
- `DepthFirstTraverser.traverse`: the ten validators of an UpdateExpression each walked the AST
  asking, at every node, for a freshly built processing map, its keys as a tuple, and an ABC
  `isinstance`. Each walk now builds the map once and decides per node class once; the order of
  visits, the hooks (`pre_processing_of_child`) and the processor chosen are moto's;
- `Node.__deepcopy__`: the AST's copy went through `copy`'s generic `__reduce_ex__` path; it copies
  the node's `__dict__` directly, memo first as `copy` does (parents point back into the copy);
- `create_condition_expression_parser` (ConditionExpressions and FilterExpressions): moto lexed
  and parsed an expression twice for every item it guards (once to validate the request, once to
  apply it) — a transaction of 99 guarded Puts parsed `attribute_not_exists(pk)` 198 times, a
  quarter of the endpoint's busy CPU in a drain. The parsed condition and the names and values it
  uses depend on the expression, its names and its values alone, and evaluating it only reads it
  (no node assigns to itself outside `__init__`): parsed once per distinct (expression, names,
  values), a bounded cache keyed by their JSON, each caller getting lists of its own; values that
  JSON cannot spell (B) and expressions that fail to parse (not cached: raised at `parse()` as
  before) take moto's parse every time;
- `copy.deepcopy` of an Item inside moto's `update_item`: that copy (`orig_item`) only feeds the
  table's stream (`stream_shard.add(orig_item, item)`); for a table without a stream it is skipped.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Callable
from typing import Any

from moto.dynamodb import comparisons
from moto.dynamodb import responses as dynamodb_responses
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.utilities import bytesize
from moto.dynamodb.parsing import ast_nodes as _ast_nodes
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

#: moto's limit on an item's size (`LimitedSizeDict.__setitem__`): between AWS's measured 409 and 410 KB
ITEM_SIZE_LIMIT = 405000
_EXPRESSIONS_CACHED = 4096
#: A key's types: moto never changes a value of these in place (it replaces the attribute's value).
_KEY_TYPES = frozenset(("S", "N", "B"))
ast_nodes: Any = _ast_nodes  # a module moto marks `type: ignore` whole
_UPDATE = threading.local()  # .no_stream: the update this thread runs is on a table without a stream
_APPLIED = False


def _item_init(self: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: dict[str, Any]) -> None:
    """moto's `Item.__init__`, its size checked with a running sum, its key attributes its keys
    (see the module's docstring)."""
    self.hash_key = hash_key
    self.range_key = range_key
    self.attrs = LimitedSizeDict()
    # the keys an attribute may be: one whose `{type: value}` holds the key's very value object
    keys = [k for k in (hash_key, range_key) if type(k) is DynamoType and k.type in _KEY_TYPES]
    size = 0
    for key, value in attrs.items():
        typed = None
        if keys and type(value) is dict and len(value) == 1:
            for candidate in keys:
                if value.get(candidate.type) is candidate.value:
                    typed = candidate
                    break
        if typed is None:
            typed = DynamoType(value)
        size += bytesize(str(key)) + typed.size()
        if size > ITEM_SIZE_LIMIT:
            raise ItemSizeTooLarge
        dict.__setitem__(self.attrs, key, typed)


def _cached_make(original: Callable[..., Any]) -> Any:
    @functools.lru_cache(maxsize=_EXPRESSIONS_CACHED)
    def parsed(expression: str) -> Any:
        return original(UpdateExpressionParser, expression)

    def make(cls: type, expression: Any) -> Any:
        if cls is UpdateExpressionParser and type(expression) is str:
            return parsed(expression)
        return original(cls, expression)

    return classmethod(make)


#: A parsed condition, and the expression attribute names and values it uses.
Parsed = tuple[Any, tuple[str, ...], tuple[str, ...]]


class _ConditionParser:
    """moto's `ConditionExpressionParser` as its callers use it (`parse()`, then the names and values
    it found), answered from `_parsed_condition`: the found lists are this parser's own, as callers
    extend them."""

    def __init__(self, expression: Any, names: Any, values: Any) -> None:
        self._arguments = expression, names, values
        self.expr_attr_names_found: list[str] = []
        self.expr_attr_values_found: list[str] = []

    def parse(self) -> Any:
        condition, names_found, values_found = _parsed_condition(*self._arguments)
        self.expr_attr_names_found.extend(names_found)
        self.expr_attr_values_found.extend(values_found)
        return condition


def _parsed_condition(expression: Any, names: Any, values: Any) -> Parsed:
    """(the condition, the names and values it uses), parsed by moto once per distinct arguments."""
    try:
        key = json.dumps(names), json.dumps(values)
    except (TypeError, ValueError):  # bytes among the values: not spelled, not cached
        return _parse_condition(expression, names, values)
    if type(expression) is not str:
        return _parse_condition(expression, names, values)
    return _parse_condition_spelled(expression, *key)


@functools.lru_cache(maxsize=_EXPRESSIONS_CACHED)
def _parse_condition_spelled(expression: str, names: str, values: str) -> Parsed:
    return _parse_condition(expression, json.loads(names), json.loads(values))


def _parse_condition(expression: Any, names: Any, values: Any) -> Parsed:
    parser = comparisons.ConditionExpressionParser(expression, names, values)
    condition = parser.parse()
    return condition, tuple(parser.expr_attr_names_found), tuple(parser.expr_attr_values_found)


#: Per node class: whether it is a moto AST `Node` (an ABC: `isinstance` on it is slow).
_IS_NODE: dict[type, bool] = {}
#: Per (a processing map's keys, node class): the first key the class is a subclass of, or None.
_CHOSEN: dict[tuple[tuple[type, ...], type], type | None] = {}


def _traverse(self: Any, root: Any) -> Any:
    """moto's `traverse_node_recursively` from `root`, with its per-node look-ups done once per class."""
    processing = self._processing_map()
    keys = tuple(processing)
    pre_processing_of_child = self.pre_processing_of_child

    def walk(node: Any, child_id: int) -> Any:
        kind = type(node)
        is_node = _IS_NODE.get(kind)
        if is_node is None:
            is_node = _IS_NODE[kind] = issubclass(kind, ast_nodes.Node)
        if not is_node:
            return node
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                pre_processing_of_child(node, i)
                walk(child_node, i)
        try:
            key = _CHOSEN[keys, kind]
        except KeyError:  # the first key the node is an instance of, as moto's `process` picks it
            key = _CHOSEN[keys, kind] = next((k for k in keys if issubclass(kind, k)), None)
        if key is not None:
            node = processing[key](node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
        return node

    return walk(root, -1)


def _node_deepcopy(self: Any, memo: dict[int, Any]) -> Any:
    copied = memo.get(id(self))
    if copied is not None:
        return copied
    result = object.__new__(type(self))
    memo[id(self)] = result
    state = result.__dict__
    for name, value in self.__dict__.items():
        state[name] = copy.deepcopy(value, memo)
    return result


class _ModelsCopy:
    """Stands in for the `copy` module inside moto's DynamoDB models (`local.endpoint.dynamodb` puts
    it there): an Item is not copied by an update on a table without a stream."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        if type(value) is Item and getattr(_UPDATE, "no_stream", False):
            return value
        return self.inner.deepcopy(value, memo)


def _update_item(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def update_item(self: DynamoDBBackend, table_name: str, *args: Any, **kwargs: Any) -> Any:
        table = self.tables.get(table_name)
        previous = getattr(_UPDATE, "no_stream", False)
        _UPDATE.no_stream = table is not None and table.stream_shard is None
        try:
            return original(self, table_name, *args, **kwargs)
        finally:
            _UPDATE.no_stream = previous

    return update_item


def apply(models: Any) -> None:
    """Patch moto's DynamoDB in this process; `models` is `moto.dynamodb.models`, its `copy` to wrap."""
    global _APPLIED
    if _APPLIED:
        return
    Item.__init__ = _item_init  # type: ignore[method-assign]
    UpdateExpressionParser.make = _cached_make(UpdateExpressionParser.make.__func__)
    ast_nodes.DepthFirstTraverser.traverse = _traverse
    ast_nodes.Node.__deepcopy__ = _node_deepcopy
    models.copy = _ModelsCopy(models.copy)
    DynamoDBBackend.update_item = _update_item(DynamoDBBackend.update_item)  # type: ignore[method-assign]
    # `get_filter_expression` looks its parser up in its own module at each call
    holders: tuple[Any, ...] = (comparisons, models, dynamodb_responses)  # moto's imports, not exports
    for module in holders:
        module.create_condition_expression_parser = _ConditionParser
    _APPLIED = True
