"""The eight checks, in the contract's order. Each run(ctx) returns (status, reason, numbers)."""
from . import chunking, latency, limits, negative, overcap, positive, stability, vram

CHECKS = {
    1: ("positive_control", "Positive control", positive.run),
    2: ("negative_control", "Negative control (descriptions rotated)", negative.run),
    3: ("stability", "A-vs-A stability", stability.run),
    4: ("latency", "Latency at our shapes", latency.run),
    5: ("vram", "Resident and peak VRAM", vram.run),
    6: ("over_cap", "Over-cap request", overcap.run),
    7: ("chunking", "Chunking equals chunk by chunk", chunking.run),
    8: ("auth_and_queue", "401 without the token, 429 past the queue", limits.run),
}
