"""The README's examples, run."""
