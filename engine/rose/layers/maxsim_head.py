"""Token states -> a ColBERT model's rows: each kept token's vector, or each document's MaxSim score.

A ColBERT model's batch is one of two classes (the queue never mixes them, engine/queue/piece_queue.py):

  texts        every kept token is a segment of its own, its row the token's vector: the sentence
               head (engine/rose/layers/head.py: the Dense modules, L2 normalisation), as for
               /v1/embeddings
  rerank       groups of a query followed by its documents (engine/contract/batch.py): the query's
               tokens carry QUERY_TOKEN and pool into no row, each document's kept tokens pool into its
               row, and the row holds [score, 0, ...], the score PyLate's colbert_scores:

                   score(d) = sum over the query's vectors q of  max over d's kept vectors t of  q . t

The host knows which class a batch is (its first token is a query's or not: `mode_of`), so each class
has its own CUDA graphs (engine/rose/graphs.py keys them by the head's mode) and a batch computes only
the rows it holds: a batch of texts, the sentence head's vectors, bit for bit, and nothing of the
scores. For the scores, every token's vector is computed (the sentence head's modules on its state,
normalised); token t's query is the one whose run of QUERY_TOKENs last
began at or before t, and its i-th vector lies i tokens after that start. The dot products are taken
a block of query positions at a time ([T, block, dim] float32 at most), their max per document row is
a scatter of amax (exact, so graph replays and eager runs agree bit for bit), and the positions a
shorter query (one without expansion) lacks count nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rose_embed.engine.contract.batch import QUERY_TOKEN, PackedBatch
from rose_embed.engine.rose.layers.head import SentenceHead
from rose_embed.engine.rose.layers.pooling import normalize

# Query positions whose dot products are taken at once: [T, block, dim] float32 stays within a few
# dozen MB at the largest token budgets, and a query of 32 takes four steps.
QUERY_BLOCK = 8
# The head's modes: a batch of texts (each kept token's vector) or of rerank groups (each document's score).
TEXTS, RERANK = 0, 1


class MaxSimHead(nn.Module):
    """hidden [T, H], segment_ids [T] -> [num_segments, dim] float32: token vectors, or MaxSim scores in
    column 0 where the batch holds queries and their documents."""

    def __init__(self, sentence: SentenceHead, query_length: int):
        super().__init__()
        self.sentence = sentence
        self.pooling = sentence.pooling  # what the runner reads of a head
        self.query_length = query_length

    num_modes = 2  # TEXTS and RERANK: the runner asks `mode_of` each batch and passes it to forward

    @staticmethod
    def mode_of(batch: PackedBatch) -> int:
        return RERANK if batch.is_late_interaction else TEXTS

    def forward(self, hidden: torch.Tensor, segment_ids: torch.Tensor, num_segments: int,
                mode: int = TEXTS) -> torch.Tensor:
        if mode == TEXTS:
            return self.sentence(hidden, segment_ids, num_segments)
        tokens = self.token_vectors(hidden)
        scores = self.scores(tokens, segment_ids, num_segments)  # [S]
        return F.pad(scores.unsqueeze(1), (0, tokens.shape[1] - 1))

    def token_vectors(self, hidden: torch.Tensor) -> torch.Tensor:
        """[T, dim] float32: every token's vector, as the sentence head gives a one-token segment's."""
        vectors = hidden.float()
        for step in self.sentence.steps:
            vectors = step(vectors)
        return normalize(vectors)

    def scores(self, tokens: torch.Tensor, segment_ids: torch.Tensor, num_segments: int) -> torch.Tensor:
        """tokens [T, dim] (`token_vectors`) -> [num_segments] float32: each document row's MaxSim against its
        query (0 for rows of no document)."""
        num_tokens = tokens.shape[0]
        ids = segment_ids.long()
        is_query = ids == QUERY_TOKEN
        after_query = torch.cat([is_query.new_zeros(1), is_query[:-1]])
        arange = torch.arange(num_tokens, device=tokens.device)
        # [T]: the first token of the query each token's group opened with (0 before any query).
        query_start = torch.cummax(torch.where(is_query & ~after_query, arange, 0), dim=0).values
        rows = torch.where(ids >= 0, ids, num_segments)  # documents' kept tokens; the rest into a spare row
        blocks = []
        for lo in range(0, self.query_length, QUERY_BLOCK):
            positions = torch.arange(lo, min(lo + QUERY_BLOCK, self.query_length), device=tokens.device)
            index = (query_start.unsqueeze(1) + positions).clamp(max=num_tokens - 1)  # [T, block]
            # Position i is the query's while the run that began at query_start is still going.
            is_real = is_query[index] & (query_start[index] == query_start.unsqueeze(1))
            sims = torch.bmm(tokens[index], tokens.unsqueeze(2)).squeeze(2)  # [T, block]
            sims = sims.masked_fill(~is_real, float("-inf"))
            best = sims.new_full((num_segments + 1, len(positions)), float("-inf"))
            blocks.append(best.scatter_reduce_(0, rows.unsqueeze(1).expand_as(sims), sims, reduce="amax",
                                               include_self=True))
        best = torch.cat(blocks, dim=1)[:num_segments]  # [S, query_length]: -inf where nothing was compared
        return torch.where(torch.isneginf(best), 0.0, best).sum(dim=1)
