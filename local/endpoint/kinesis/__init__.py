"""Kinesis on the local endpoint: `fixes` corrects moto's models and enforces the shard limits;
`responses` answers the actions moto's responses get wrong (installed after `fixes.apply`);
`control` answers the control plane as Kinesis does (reshards UPDATING, record sizes, limits);
`writes` answers PutRecord(s) under the record size and the shards' write budgets;
`subscribe` answers SubscribeToShard (enhanced fan-out) with an event stream (`eventstream`).
"""
