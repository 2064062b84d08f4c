"""The CDK app of shardline: one construct per concern, composed by `stack.PipelineStack`."""
