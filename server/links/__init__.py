"""A front end's links to the engines: one per engine process, through the contract's arena, board
and messages (engine/contract/); admission, and telling a restarted or wedged engine. Runs in the
front ends.
"""
