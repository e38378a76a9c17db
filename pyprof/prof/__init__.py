"""Stage 3: `python -m pyprof.prof` turns parse's records into one row per kernel with its op,
shapes, FLOPs, bytes, Tensor Core use and distance from the GPU's peaks (docs/prof.md)."""
