"""The CDK app of this repository: `app.py` composes `shardline.cdk`'s public constructs from cdk.json
(the constructs themselves live in the library, for any team's app; see infra/README.md)."""
