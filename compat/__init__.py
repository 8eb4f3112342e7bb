"""The wire: OpenAI's, Cohere's, TEI's and Jina's request and response Structs, input forms, vector
encodings. Knows nothing of engines. Runs in the front ends (and the part processes, which encode
vectors)."""
