"""The app in process on a fake engine (tests/support/fake_engine.py): routes, wire contracts, errors,
the request pipeline (fast tier)."""
