"""The synthesized CDK app: its template, cdk-nag, and a deploy on moto."""
