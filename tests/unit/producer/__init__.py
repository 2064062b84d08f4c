"""The producer in process: a real `Producer`, its collector and its dispatcher on `InMemoryKinesis`."""
