"""Wire formats of the OpenAI embeddings API: structs, input forms, vector encodings."""
