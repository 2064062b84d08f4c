"""Lambda on one machine: functions in warm worker processes, and the Kinesis event-source mappings.

- `workers`: `Functions`, each function's workers, one invocation at a time each.
- `runtimes`: what a Lambda runtime gives a function here (its Python, its packages, public layers).
- `process`: one execution environment seen from the runtime (its process and log lines).
- `worker`: the main of a worker process (standard library only; run by path, isolated).
- `redrive_worker`: the main of a process that redrives a group's on-failure messages.
- `chaos`: which invocations a chaos profile's worker faults strike.
- `esm`: the event-source mappings, as Lambda polls shards.
"""
