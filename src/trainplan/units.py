"""Unit conversions, done once at the edges. Inside trainplan: bytes, seconds, FLOP, FLOP/s, bytes/s."""

GiB = 1024**3
GB = 1000**3
TFLOPS = 1e12
GBPS_TO_BYTES_PER_S = 1e9 / 8  # one gigabit per second, in bytes per second

