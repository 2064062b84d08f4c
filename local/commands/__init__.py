"""The commands that talk to a running app over the wire, as any client would.

- `status`: what the app holds (shards, groups, DLQs, functions, faults injected).
- `send` (+ `send_http`, `send_shapes`): load through the REST API, every answer counted.
- `verify`: the end of `send`: waits until every consumer group has processed the run, then says
  where every record went (`verify_groups`: which groups, checked how — from what each declares its
  sinks hold; `verify_readers`: reading sinks, DLQs and the stream; `verify_lag`: checkpoints and
  on-failure messages of a group checked by lag; `verify_verdict`: the verdict as data;
  `verify_render`: the verdict for a person).
- `redrive`: a group's on-failure messages back through its own code.
"""
