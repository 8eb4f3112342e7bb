"""Images to the pixels a vision tower takes: decoding and the checkpoint's preprocessing, without
torch. Runs in the front ends, as engine/text/ does for texts.
"""
