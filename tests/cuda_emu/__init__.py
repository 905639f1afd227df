"""CPU emulation of the CUDA kernels (DESIGN.md section 4) and shared test helpers."""
