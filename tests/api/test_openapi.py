"""The OpenAPI document Litestar serves describes every route as it really behaves (fake engine, in process)."""

from __future__ import annotations

import re

import msgspec
import pytest

from rose_embed.compat.cohere_embed import CohereEmbedRequest
from rose_embed.compat.contextualized import ContextualizedEmbeddingRequest
from rose_embed.compat.openai import EmbeddingRequest
from rose_embed.compat.tei_embed import TeiEmbedRequest
from tests.support.client_support import API_KEYS
from tests.support.fake_engine import FakeEngine, fake_config, serve

OPERATIONS = [
    ("/v1/embeddings", "post"), ("/embeddings", "post"), ("/v1/models", "get"), ("/models", "get"),
    ("/v1/models/{model_id}", "get"), ("/models/{model_id}", "get"), ("/health", "get"),
    ("/v2/embed", "post"), ("/v1/embed", "post"), ("/embed", "post"),
]
# Each route that decodes its body itself, and the Struct it decodes it with.
DECODED_BODIES = [
    ("/v1/embeddings", EmbeddingRequest), ("/embeddings", EmbeddingRequest),
    ("/v1/contextualizedembeddings", ContextualizedEmbeddingRequest),
    ("/contextualizedembeddings", ContextualizedEmbeddingRequest),
    ("/v2/embed", CohereEmbedRequest), ("/v1/embed", CohereEmbedRequest), ("/embed", TeiEmbedRequest),
]


@pytest.fixture(scope="module")
def client():
    with serve(FakeEngine()) as client:
        yield client


@pytest.fixture(scope="module")
def schema(client) -> dict:
    r = client.get("/docs/openapi.json")
    assert r.status_code == 200
    return r.json()


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embeddings"])
def test_embeddings_request_and_response(schema, path):
    operation = schema["paths"][path]["post"]
    body = operation["requestBody"]
    assert body["required"] is True
    request = _resolve(schema, body["content"]["application/json"]["schema"])
    assert {"input", "model", "encoding_format", "dimensions", "user", "prompt_name", "long_inputs"} <= set(
        request["properties"])
    assert request["required"] == ["input"]
    assert request["properties"]["dimensions"]["minimum"] == 1
    assert "truncate" in request["properties"]["long_inputs"]["description"]
    forms = request["properties"]["input"]["oneOf"]
    # OpenAI's four forms, then a CLIP model's: an image item, alone or beside texts (docs/images.md).
    assert [f["type"] for f in forms] == ["string", "array", "array", "array", "object", "array"]
    assert forms[4]["properties"]["type"]["enum"] == ["image_url"] and forms[5]["contains"] == forms[4]
    assert request["properties"]["encoding_format"]["enum"] == ["float", "base64"]
    response = _resolve(schema, operation["responses"]["200"]["content"]["application/json"]["schema"])
    assert set(response["properties"]) == {"data", "model", "usage", "object"}


def _request_schema(schema: dict, path: str) -> dict:
    return _resolve(schema, schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"])


@pytest.mark.parametrize("path,struct", DECODED_BODIES)
def test_every_field_the_server_decodes_is_in_the_document(schema, path, struct):
    """Generated clients can send whatever the server accepts: each decoded field, described."""
    properties = _request_schema(schema, path)["properties"]
    assert list(properties) == list(struct.__struct_fields__)
    described = [name for name, field in properties.items() if not field.get("description")]
    assert not described, f"{path}: fields without a description: {described}"


@pytest.mark.parametrize("path,struct", DECODED_BODIES)
def test_required_fields_match_the_struct(schema, path, struct):
    required = [field.name for field in msgspec.structs.fields(struct) if field.required]
    assert _request_schema(schema, path).get("required", []) == required


def test_contextualized_documents_shape(schema):
    properties = _request_schema(schema, "/v1/contextualizedembeddings")["properties"]
    for name in ("input", "inputs"):
        assert properties[name]["type"] == "array"
        assert properties[name]["items"]["items"] == {"type": "string", "minLength": 1}
    assert "ubinary" in properties["output_dtype"]["enum"]


@pytest.mark.parametrize("path,method", OPERATIONS)
def test_errors_use_openai_envelope(schema, path, method):
    responses = schema["paths"][path][method]["responses"]
    assert "200" in responses
    for status, response in responses.items():
        if status.startswith(("4", "5")):
            envelope = _resolve(schema, response["content"]["application/json"]["schema"])
            assert set(envelope["properties"]) == {"error"}, (path, status)  # not Litestar's own 400 shape
            detail = _resolve(schema, envelope["properties"]["error"])
            assert set(detail["properties"]) == {"message", "type", "param", "code"}


def test_schema_matches_live_responses(client, schema):
    """Field names the document promises are the ones a real answer carries."""
    answer = client.post("/v1/embeddings", json={"input": "hi"}).json()
    promised = _resolve(schema, schema["paths"]["/v1/embeddings"]["post"]["responses"]["200"]["content"]
                        ["application/json"]["schema"])
    assert set(answer) == set(promised["properties"])
    models = client.get("/v1/models").json()
    promised = _resolve(schema, schema["paths"]["/v1/models"]["get"]["responses"]["200"]["content"]
                        ["application/json"]["schema"])
    assert set(models) == set(promised["properties"])


def test_cohere_embed_answer_is_documented_with_cohere_type_names(schema):
    answers = schema["paths"]["/v2/embed"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    by_type = [_resolve(schema, s) for s in answers["oneOf"] if "response_type" in _resolve(schema, s)["properties"]]
    embeddings = [_resolve(schema, a["properties"]["embeddings"]) for a in by_type]
    assert {"float", "int8", "uint8", "binary", "ubinary", "base64"} in [set(e.get("properties", ())) for e in embeddings]


def test_docs_page_needs_no_network(client, schema):
    """Swagger UI's files come from this server (an installed package), not from a CDN."""
    r = client.get("/docs")
    assert r.status_code == 200
    assert "text/html" in r.headers["content-type"] and "SwaggerUIBundle" in r.text
    links = re.findall(r"""(?:src|href)=['"]([^'"]+)""", r.text)
    assert len(links) >= 3 and all(link.startswith("/docs/assets/") for link in links), links  # no http(s)://
    for link in links:
        asset = client.get(link)
        assert asset.status_code == 200 and asset.content, link
    assert not [path for path in schema["paths"] if path.startswith("/docs")]


def test_security_scheme_declared_with_keys():
    with serve(FakeEngine(), fake_config(api_keys=API_KEYS)) as client:
        schema = client.get("/docs/openapi.json").json()
    assert schema["components"]["securitySchemes"]["BearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert schema["security"] == [{"BearerAuth": []}]


def test_request_schema_follows_openais_contract(schema):
    """The shared contract is OpenAI's own description: ours has its fields first, as they are (it may
    relax `model`), then the server's own (prompts, long inputs); `input` takes OpenAI's forms first, then
    a CLIP model's image items."""
    import yaml
    from tests.conftest import REPO

    contract = yaml.safe_load((REPO / "tests" / "data" / "openai-embeddings.openapi.yaml").read_text())
    theirs = contract["components"]["schemas"]["CreateEmbeddingRequest"]
    ours = _resolve(schema, schema["paths"]["/v1/embeddings"]["post"]["requestBody"]["content"]["application/json"]
                    ["schema"])
    assert list(ours["properties"])[:len(theirs["properties"])] == list(theirs["properties"])
    assert ours["properties"]["encoding_format"]["enum"] == theirs["properties"]["encoding_format"]["enum"]
    forms = [(f["type"], f.get("items", {}).get("type")) for f in theirs["properties"]["input"]["oneOf"]]
    ours_forms = [(f["type"], f.get("items", {}).get("type")) for f in ours["properties"]["input"]["oneOf"]]
    assert ours_forms[:len(forms)] == forms and ours_forms[len(forms):] == [("object", None), ("array", None)]
