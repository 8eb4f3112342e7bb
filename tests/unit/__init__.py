"""Unit tests: one module or function of the code at a time, no app and no real model (fast tier; a
few slow ones load tiny or real checkpoints)."""
