"""Issue 42, 1: `up` shows every step the runtime reports. A step it had no label for (`workers`,
which only an app with a worker group reports) stopped it with `could not start: KeyError: 'workers'`."""

from __future__ import annotations

import pytest

from local.__main__ import STEP_LABELS
from local.runtime import STEPS, Runtime, Settings


def test_1_up_has_a_label_for_every_step_the_runtime_reports():
    assert set(STEP_LABELS) == set(STEPS)


def test_a_step_missing_from_steps_fails_where_it_is_reported_not_in_ups_printing(tmp_path):
    runtime = Runtime(Settings(cdk_out=tmp_path), on_step=lambda name, detail: None)
    runtime._on_step("workers", "1 worker group(s), 2 tasks")  # a known step passes through
    with pytest.raises(AssertionError, match="'queues' is not in STEPS"):
        runtime._on_step("queues", "?")
