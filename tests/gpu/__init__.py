"""GPU tests, marked `gpu` and skipped without CUDA (bench/gpu_session.sh tests runs them on a lent card)."""
