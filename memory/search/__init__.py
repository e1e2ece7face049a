"""Finding what is remembered: the embedding models, the vectors of facts (indexing) and of
questions, and the ranking that answers a search."""
