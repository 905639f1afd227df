"""CPU emulation of the CUDA kernels (docs/design.md) and shared test helpers."""
