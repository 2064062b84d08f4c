"""A team that alarms its own way turns shardline's alarms off (issue 28, item 1): no alarm and no
alarm topic, the dashboard kept; and it may not name whom to page while doing so."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from app import build
from shardline.cdk import ConfigError, load_config
from tests.support.cdk import default_context, resources


def test_alarms_off_means_no_alarm_and_no_topic_but_the_dashboard_stays(template):
    context = default_context()
    context["shardline"]["alarms"] = {"enabled": False}
    app, stack = build(context)
    app.synth()  # cdk-nag too
    off = Template.from_stack(stack)
    assert resources(template, "AWS::CloudWatch::Alarm"), "the default app alarms"
    assert resources(off, "AWS::CloudWatch::Alarm") == {}
    assert resources(off, "AWS::SNS::Topic") == {}
    assert len(resources(off, "AWS::CloudWatch::Dashboard")) == 1


def test_alarms_off_with_someone_to_page_is_refused():
    context = default_context()["shardline"]
    context["alarms"] = {"enabled": False, "emails": ["ops@example.com"]}
    with pytest.raises(ConfigError, match=r"^shardline\.alarms\.enabled: false, yet emails"):
        load_config(context)
