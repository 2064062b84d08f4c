"""This app's template, in substance, against the one committed before the constructs moved into the
library (issue 28): the same resources under the same logical ids, with the same properties and
policies. A difference that is meant is listed in EXPLAINED with its reason; anything else fails.

To accept a change on purpose: `python -m tests.support.template_substance_baseline` rewrites the
baseline, and the diff of tests/infra/baselines/ goes into the commit for review."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.template_substance import differences, load_template, substance

BASELINE = Path(__file__).with_name("baselines") / "shardline-dev.substance.json"

#: Differences from the baseline that are meant, each with why.
EXPLAINED: dict[str, str] = {
    "changed GroupeventsinkFunctionBE67E9F1 (AWS::Lambda::Function): Environment": "SHARDLINE_SINKS added: "
    "the events sink declares that it holds records (idAttribute recordId), for the local runtime's verdict.",
    "changed GroupkeycounterFunctionDD4D08B2 (AWS::Lambda::Function): Environment": "SHARDLINE_SINKS added: "
    "the counter sink declares that it holds counts (keyAttribute partitionKey, countAttribute count).",
    "added ProducerIds4033DF6F (AWS::DynamoDB::Table)": "issue 39, property 3: the producer API's "
    "idempotency table (each written id's payload hash: a re-used id with another body answers 422).",
    "added ProducerIdsKey6EBDDA9E (AWS::KMS::Key)": "issue 39: the idempotency table's own key.",
    "added ProducerIdsKeyAlias2E7BF007 (AWS::KMS::Alias)": "issue 39: every key has an alias (api/ids).",
    "changed ProducerFunction209DD675 (AWS::Lambda::Function): Environment": "issue 39: IDEMPOTENCY_TABLE "
    "and IDEMPOTENCY_TTL_SECONDS (as long as the consumers' guards); issue 40: PER_CALLER_RATE (each IAM "
    "caller's share, half the stage's rate by default).",
    "changed ProducerFunctionServiceRoleDefaultPolicyEABB9ACE (AWS::IAM::Policy): PolicyDocument": ""
    "issue 39: BatchGetItem and BatchWriteItem on the idempotency table, kms:Decrypt on its key via DDB; "
    "issue 40: UpdateItem on it, for the per-caller counters.",
    "added MonitoringeventsinkDedupLanesEvictedECE27431 (AWS::CloudWatch::Alarm)": "issue 39, 8: lanes "
    "evicted from a shard's dedup state past its bound page (records without ids may apply twice).",
    "added MonitoringkeycounterDedupLanesEvicted564650E1 (AWS::CloudWatch::Alarm)": "issue 39, 8: as above.",
    "changed MonitoringDashboard0C3675C6 (AWS::CloudWatch::Dashboard): DashboardBody": "issue 39, 8: each "
    "group's 'copies and client ids skipped' widget draws DedupLanesEvicted too.",
    "changed GroupeventsinkFunctionServiceRoleDefaultPolicy13F9E42C (AWS::IAM::Policy): PolicyDocument": ""
    "issue 40, 6: the events sink is granted what its idempotent puts call (BatchWriteItem, PutItem, "
    "DescribeTable), no longer UpdateItem or ConditionCheckItem, which it never calls.",
    "changed GroupkeycounterFunctionServiceRoleDefaultPolicyBF06FE2C (AWS::IAM::Policy): PolicyDocument": ""
    "issue 40, 6: the counter sink is granted what its Updates and once guards call (UpdateItem, PutItem, "
    "DescribeTable), no longer ConditionCheckItem, which it never calls.",
    "changed ProducerApiCloudWatchRoleC4AEE341 (AWS::IAM::Role): ManagedPolicyArns, Policies": "issue 40: no "
    "AWS-managed policy: API Gateway's logging role gets the log writes it makes, inline, on this account "
    "and region's log groups (AmazonAPIGatewayPushToCloudWatchLogs gave reads too, on '*').",
    "removed ProducerApiRecordsBCD5CCF9 (AWS::ApiGateway::Model)": "issue 42, 4: no request model: its "
    "refusal named no record and no field; the function validates every record and names both.",
    "changed ProducerApistreamsstreamrecordsPOST8817251C (AWS::ApiGateway::Method): RequestModels": "issue "
    "42, 4: as above.",
    "changed ProducerApiValidator87650BCB (AWS::ApiGateway::RequestValidator): ValidateRequestBody": "issue "
    "42, 4: the validator checks the parameters only.",
    "removed ProducerApiDeployment6AD08EFFede011dfc4c2f515d3bcf5de14b86ae5 (AWS::ApiGateway::Deployment)": ""
    "a new deployment of the API (its logical id hashes the API's definition): issue 42, 4.",
    "added ProducerApiDeployment6AD08EFF054b30395629a6a2eb27d63d854724bd (AWS::ApiGateway::Deployment)": ""
    "the same.",
    "changed ProducerApiDeploymentStagev1523C3B2D (AWS::ApiGateway::Stage): DeploymentId": "the same.",
    **{
        f"changed {key} (AWS::KMS::Key): KeyPolicy": "issue 40: the key's policy names its key users (the "
        "roles granted it, with their actions, through their service), beside the root's statement."
        for key in ("GroupeventsinkKey3B271586", "GroupkeycounterKey17254F08", "StreameventsKeyAED2B7CF")
    },
}


def test_the_apps_template_is_unchanged_in_substance(cdk_out):
    before = json.loads(BASELINE.read_text())
    after = substance(load_template(cdk_out))
    unexplained = [line for line in differences(before, after) if line not in EXPLAINED]
    assert unexplained == [], "\n".join(unexplained)
    assert len(after["Resources"]) > 50, "the check compares the whole app"


def test_the_comparison_names_what_a_move_would_change():
    before = json.loads(BASELINE.read_text())
    after = json.loads(json.dumps(before))
    lid, resource = next(
        (lid, r) for lid, r in after["Resources"].items() if r["Type"] == "AWS::Lambda::Function"
    )
    resource["Properties"]["MemorySize"] = 4096
    renamed = after["Resources"].pop(next(iter(after["Resources"])))
    after["Resources"]["RenamedByAMove"] = renamed
    found = differences(before, after)
    assert f"changed {lid} (AWS::Lambda::Function): MemorySize" in found
    assert any(line.startswith("removed ") for line in found) and any(
        line.startswith("added RenamedByAMove") for line in found
    )
