"""`shardline.cdk.Monitoring` on its own (issue 28, item 1): alarms to its own encrypted topic and/or
the team's alarm actions, switched off entirely if the team alarms its own way (the dashboard
stays), for whatever it is given; and the settings that would page nobody are refused."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import Stack
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_sns as sns

from shardline.cdk import Layers, Monitoring, Stream
from tests.support.cdk import ORDERS_ARN, alone, resources

PAGER = "arn:aws:sns:us-east-1:111122223333:pager"


def monitoring_in(stack: Stack, **props: Any) -> Monitoring:
    stream = Stream.from_stream_arn(stack, "Orders", ORDERS_ARN)
    if props.pop("pager", False):
        props["alarm_actions"] = [actions.SnsAction(sns.Topic.from_topic_arn(stack, "Pager", PAGER))]
    return Monitoring(stack, "Monitoring", streams=[stream], dashboard_name="orders", **props)


def test_by_default_alarms_go_to_its_own_encrypted_topic():
    template = alone(monitoring_in)
    [(topic_id, topic)] = resources(template, "AWS::SNS::Topic").items()
    assert "KmsMasterKeyId" in topic["Properties"]
    [alarm] = resources(template, "AWS::CloudWatch::Alarm").values()
    assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
    assert alarm["Properties"]["OKActions"] == [{"Ref": topic_id}]
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == "orders"


def test_the_team_s_alarm_actions_go_beside_its_topic_or_instead_of_it():
    beside = alone(lambda stack: monitoring_in(stack, pager=True))
    [topic_id] = resources(beside, "AWS::SNS::Topic")
    [alarm] = resources(beside, "AWS::CloudWatch::Alarm").values()
    assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}, PAGER]
    instead = alone(lambda stack: monitoring_in(stack, pager=True, alarm_topic=False))
    assert resources(instead, "AWS::SNS::Topic") == {} and resources(instead, "AWS::KMS::Key") == {}
    [alarm] = resources(instead, "AWS::CloudWatch::Alarm").values()
    assert alarm["Properties"]["AlarmActions"] == [PAGER]


def test_alarms_can_be_switched_off_the_dashboard_stays():
    template = alone(lambda stack: monitoring_in(stack, alarms_enabled=False))
    assert resources(template, "AWS::CloudWatch::Alarm") == {}
    assert resources(template, "AWS::SNS::Topic") == {}
    assert len(resources(template, "AWS::CloudWatch::Dashboard")) == 1


def test_tags_reach_the_topic():
    template = alone(lambda stack: monitoring_in(stack, tags={"team": "orders"}))
    [topic] = resources(template, "AWS::SNS::Topic").values()
    assert {"Key": "team", "Value": "orders"} in topic["Properties"]["Tags"]


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"alarms_enabled": False, "pager": True}, r"alarms_enabled: false, yet alarm_actions"),
        ({"alarms_enabled": False, "emails": ["ops@example.com"]}, r"alarms_enabled: false, yet"),
        ({"alarm_topic": False}, r"alarm_topic: false and no alarm_actions"),
        ({"alarm_topic": False, "pager": True, "emails": ["ops@example.com"]}, r"emails: they subscribe"),
    ],
)
def test_monitoring_that_would_page_nobody_is_refused(props, message):
    with pytest.raises(ValueError, match=rf"^Monitoring 'Monitoring': {message}"):
        alone(lambda stack: monitoring_in(stack, **props), nag=False)


def test_layers_are_nag_clean_alone():
    template = alone(lambda stack: Layers(stack, "Layers"))
    assert len(resources(template, "AWS::Lambda::LayerVersion")) == 1
