"""A test function that holds `event["mb"]` MiB (touched) while it runs."""


def handler(event, context):
    held = [bytearray(b"\x01" * (1 << 20)) for _ in range(event["mb"])]
    return {"held_mb": len(held)}
