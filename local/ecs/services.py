"""The app's ECS services as local processes: each worker consumer group's `shardline worker` tasks.

    services = WorkerServices(app.workers, endpoint_url=..., log_dir=...).start()
    services.stats()       # per service: its tasks (pid, alive, started, replaced), as `status` shows
    services.kill_one()    # chaos: SIGKILL one task at random; the service replaces it
    services.stop()        # SIGTERM, then SIGKILL after the container's StopTimeout

Each service keeps `desired_count` tasks running, as ECS does: a task that exits (a crash, a kill) is
replaced after `REPLACE_AFTER_S`, under a new task id (a new worker name in the lease table, as a new
ECS task has). A task is the image's code run natively (`model.WorkerService`: the handler's folder as
its working folder, the shardline its image installs: the staged wheel, imported from the zip), on
the interpreter and packages of the runtime's Python functions (`local.lambda_.runtimes`: the
runtime's boto3 and the Powertools layer, which the image installs at the same pins), with the
container's environment, the endpoint's address and
the local credentials, sandboxed (`local.lambda_.sandbox`: a private /tmp, the rest read-only, no power
to remount or mount; where the machine refuses, `note` says so). Its output — JSON logs and EMF lines —
goes to `<log_dir>/<group>-<n>.log`, which the dashboard reads as the container's log group; each
service's RunningTaskCount and DesiredTaskCount are published as Container Insights does (`publish`).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..app import model
from ..iam.principals import session_credentials
from ..lambda_ import runtimes, sandbox

__all__ = ["REPLACE_AFTER_S", "WorkerServices"]

#: How soon a stopped task is replaced (ECS takes longer; the tests and the chaos want it soon).
REPLACE_AFTER_S = 1.0
#: Longest wait for a task to stop after SIGTERM before SIGKILL, whatever its StopTimeout says.
MAX_STOP_WAIT_S = 30.0
PYTHON_RUNTIME = "python3.12"  # the worker image's PYTHON_VERSION (shardline/cdk/worker_image/Dockerfile)
#: The task's private /tmp: Fargate's default ephemeral storage, 20 GiB (tmpfs: memory as written).
TASK_TMP_MB = 20 * 1024
#: How often the task counts are published (Container Insights: once a minute).
PUBLISH_EVERY_S = 5.0
#: (namespace, name, dimensions, value): `local.cloudwatch.monitor.Monitor.publish`.
Publish = Callable[[str, str, Mapping[str, str], float], None]


@dataclass
class _Task:
    slot: int
    task_id: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float = field(default_factory=time.time)


@dataclass
class _Service:
    spec: model.WorkerService
    tasks: dict[int, _Task] = field(default_factory=dict)
    replaced: int = 0
    killed: int = 0
    exited_at: dict[int, float] = field(default_factory=dict)


class WorkerServices:
    """Every worker service of the app, its tasks kept running (see the module docstring)."""

    def __init__(
        self,
        services: tuple[model.WorkerService, ...],
        *,
        endpoint_url: str,
        log_dir: Path,
        kill_every_s: float = 0.0,
        seed: int | None = None,
        publish: Publish | None = None,
    ) -> None:
        self._services = [_Service(spec) for spec in services]
        self._publish = publish
        self.endpoint_url = endpoint_url
        self.log_dir = Path(log_dir)
        self.kill_every_s = kill_every_s
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        interpreter = runtimes.find_interpreter(PYTHON_RUNTIME)
        # Else this runtime's own interpreter, as a function without its runtime's gets: a path, for
        # the sandbox execs it without a PATH search (a bare "python3" failed every task there).
        self.interpreter = interpreter or sys.executable
        running_on = f"Python {sys.version_info[0]}.{sys.version_info[1]}"
        notes = [
            None if interpreter else f"no {PYTHON_RUNTIME} interpreter: the workers run on {running_on}",
            (refusal := sandbox.refused()) and f"not sandboxed: {refusal}",
        ]
        self.note = "; ".join(filter(None, notes)) or None
        self._packages = [
            str(folder)
            for folder in (runtimes.powertools_layer_dir(), runtimes.site_dir(PYTHON_RUNTIME))
            if folder is not None and folder.exists()
        ]

    def start(self) -> WorkerServices:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for service in self._services:
                for slot in range(service.spec.desired_count):
                    self._launch(service, slot)
        if self._services:
            self._thread = threading.Thread(target=self._watch, name="local-ecs", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """SIGTERM every task (it finishes its batch and hands its leases back), then SIGKILL what
        is still running after its StopTimeout (at most `MAX_STOP_WAIT_S`)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            tasks = [(service, task) for service in self._services for task in service.tasks.values()]
            for _, task in tasks:
                if task.process.poll() is None:
                    task.process.send_signal(signal.SIGCONT)
                    task.process.terminate()
            for service, task in tasks:
                try:
                    task.process.wait(timeout=min(service.spec.stop_timeout_seconds, MAX_STOP_WAIT_S))
                except subprocess.TimeoutExpired:
                    task.process.kill()
                    task.process.wait()
                task.log.close()
            for service in self._services:
                service.tasks.clear()

    def kill_one(self) -> str | None:
        """SIGKILL one running task at random (chaos); its task id, or None when none runs."""
        with self._lock:
            running = [
                (service, task)
                for service in self._services
                for task in service.tasks.values()
                if task.process.poll() is None
            ]
            if not running:
                return None
            service, task = self._random.choice(running)
            task.process.kill()
            service.killed += 1
            return task.task_id

    def stats(self) -> dict[str, Any]:
        """Per service: its tasks and how many were replaced or killed."""
        with self._lock:
            return {
                service.spec.name: {
                    "desired": service.spec.desired_count,
                    "running": sum(1 for t in service.tasks.values() if t.process.poll() is None),
                    "replaced": service.replaced,
                    "killed": service.killed,
                    "not_as_deployed": self.note,
                    "lease_table": service.spec.lease_table,
                    "stream": service.spec.stream_name,
                    "tasks": [
                        {
                            "task": task.task_id,
                            "pid": task.process.pid,
                            "alive": task.process.poll() is None,
                            "started": round(task.started, 3),
                        }
                        for task in service.tasks.values()
                    ],
                }
                for service in self._services
            }

    # -- keeping the desired count ---------------------------------------------------------------

    def _watch(self) -> None:
        next_kill = time.monotonic() + self.kill_every_s if self.kill_every_s else None
        next_publish = time.monotonic()
        while not self._stopping.wait(0.2):
            if self._publish is not None and time.monotonic() >= next_publish:
                self._publish_counts()
                next_publish = time.monotonic() + PUBLISH_EVERY_S
            now = time.time()
            with self._lock:
                for service in self._services:
                    for slot, task in list(service.tasks.items()):
                        if task.process.poll() is None:
                            continue
                        exited = service.exited_at.setdefault(slot, now)
                        if now - exited >= REPLACE_AFTER_S and not self._stopping.is_set():
                            task.log.close()
                            service.exited_at.pop(slot)
                            service.replaced += 1
                            self._launch(service, slot)
            if next_kill is not None and time.monotonic() >= next_kill:
                self.kill_one()
                next_kill = time.monotonic() + self.kill_every_s

    def _publish_counts(self) -> None:
        """Container Insights' task counts of each service, which its alarm and widgets read."""
        assert self._publish is not None
        for name, stats in self.stats().items():
            spec = next(service.spec for service in self._services if service.spec.name == name)
            dimensions = {"ClusterName": spec.cluster_name, "ServiceName": spec.service_name}
            self._publish("ECS/ContainerInsights", "RunningTaskCount", dimensions, stats["running"])
            self._publish("ECS/ContainerInsights", "DesiredTaskCount", dimensions, stats["desired"])

    def _launch(self, service: _Service, slot: int) -> None:
        spec = service.spec
        task_id = f"{spec.name}-{slot}-{uuid.uuid4().hex[:8]}"
        path = [str(spec.code_dir.resolve()), str(spec.library_dir.resolve()), *self._packages]
        access_key, secret = session_credentials(spec.task_role_arn, spec.name)
        env = {
            "PATH": os.environ.get("PATH", ""),
            **spec.environment,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": access_key,  # the task role's, in the group's session (`local.iam`)
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": model.REGION,
            "AWS_REGION": model.REGION,
            "PYTHONPATH": os.pathsep.join(path),
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "WORKER_ID": task_id,
        }
        arguments = list(spec.command[2:])  # after `shardline worker`
        # The sandbox keeps folders visible: a wheel on the path (a zip) by its folder.
        keep = [entry if os.path.isdir(entry) else os.path.dirname(entry) for entry in path]
        command = sandbox.wrap(
            [self.interpreter, "-S", "-m", "shardline._cli", "worker", *arguments],
            tmp_mb=TASK_TMP_MB,
            keep=keep,
            cwd=str(spec.code_dir.resolve()),
            shm=True,  # a container has its /dev/shm
        )
        log = open(spec.log_files(self.log_dir)[slot], "ab")  # noqa: SIM115 -- closed with the task
        process = subprocess.Popen(
            command, cwd=spec.code_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        service.tasks[slot] = _Task(slot, task_id, process, log)
