"""The pages and the README: their commands, flags and figures hold."""
