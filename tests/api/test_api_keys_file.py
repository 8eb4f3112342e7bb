"""`--api-keys-file`: keys with an optional weight each (docs/queue.md), accepted as keys, their
weights reaching the requests that carry them."""

from __future__ import annotations

import pytest

from rose_embed.server.cli.main import build_parser, config_from_args
from rose_embed.server.cli.api_keys import keys_from_file
from tests.support.fake_engine import FakeEngine, fake_config, serve


def test_a_keys_file_gives_keys_and_weights(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("# the application\nsk-app\n\n  sk-indexer   0.25\nsk-urgent 4\n")
    assert keys_from_file(str(path)) == [("sk-app", 1.0), ("sk-indexer", 0.25), ("sk-urgent", 4.0)]
    args = build_parser().parse_args(["serve", "--api-key", "sk-cli", "--api-keys-file", str(path)])
    config = config_from_args(args)
    assert config.api_keys == ("sk-cli", "sk-app", "sk-indexer", "sk-urgent")
    assert dict(config.api_key_weights) == {"sk-indexer": 0.25, "sk-urgent": 4.0}


@pytest.mark.parametrize("text, message", [
    ("k 0\n", "line 1: the weight must be a positive number, got '0'"),
    ("k1\nk2 soon\n", "line 2: the weight must be a positive number, got 'soon'"),
    ("k 1 2\n", "line 1: expected a key and at most a weight, got 3 fields"),
    ("# only a comment\n", "holds no key"),
])
def test_a_wrong_keys_file_is_refused_naming_its_line(tmp_path, text, message):
    path = tmp_path / "keys.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        keys_from_file(str(path))
    with pytest.raises(ValueError, match="cannot read"):
        keys_from_file(str(tmp_path / "missing.txt"))


def test_a_request_carries_its_keys_weight_and_other_keys_are_refused(monkeypatch):
    weights = []
    open_request = None

    def spy(self, model=0, cost=0.0, weight=1.0):
        weights.append(weight)
        return open_request(self, model, cost, weight)

    from rose_embed.server.links.engine_links import EngineLinks

    open_request = EngineLinks.open_request
    monkeypatch.setattr(EngineLinks, "open_request", spy)
    config = fake_config(api_keys=("sk-app", "sk-indexer"), api_key_weights=(("sk-indexer", 0.25),))
    with serve(FakeEngine(), config) as client:
        for key in ("sk-app", "sk-indexer"):
            assert client.post("/v1/embeddings", json={"input": "a"},
                               headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert client.post("/v1/embeddings", json={"input": "a"}, headers={"Authorization": "Bearer sk-indexer",
                                                                           "X-Priority": "-1"}).status_code == 200
        assert client.post("/v1/embeddings", json={"input": "a"},
                           headers={"Authorization": "Bearer other"}).status_code == 401
    assert weights == [1.0, 0.25, 0.5]  # the key's weight times the priority's
