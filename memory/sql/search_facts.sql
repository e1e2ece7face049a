-- Hybrid retrieval, a template: memory.retrieval.build_sql fills {vscore}, {subject}, {text}
-- and {keep} for each combination of filters and signals. Filter first: the candidates are
-- one subject's live facts (the (tenant, subject) B-tree), and every score is computed on them.
--
-- text    Okapi BM25 over the facts' `search` tsvectors (English stems, no stop words), with the
--         term statistics of these candidates: a word every fact has (the person's name) counts
--         for next to nothing, a rare one for a lot. Normalized by the best match (0..1).
-- vector  cosine similarity with the query's embedding, min-max normalized over the candidates.
-- fused   (1 - wv)·text + wv·vector, then weighted by category, recency (when it was learned),
--         confidence and, for a question about time, when it happened (`occurred_at`).
WITH cand AS (
    SELECT f.id, f.category, f.valid_from, f.pinned, f.confidence, f.search,
           coalesce(f.occurred_at, f.valid_from) AS occurred_at,
           {vscore} AS vscore
      FROM memory_memoryfact f
     WHERE f.tenant_id = %(tenant)s {subject}
       AND f.valid_until IS NULL
       AND (f.expires_at IS NULL OR f.expires_at > now())
), bm25 AS (
    {text}
), scored AS (
    SELECT c.*, coalesce(b.tscore, 0)::float8 AS tscore,
           max(coalesce(b.tscore, 0)) OVER () AS tmax,
           min(c.vscore) OVER () AS vmin, max(c.vscore) OVER () AS vmax,
           percent_rank() OVER (ORDER BY c.occurred_at) AS age_rank
      FROM cand c LEFT JOIN bm25 b ON b.id = c.id
), parts AS (
    SELECT id, category, valid_from, occurred_at, pinned, vscore, tscore,
           CASE WHEN tmax > 0 THEN tscore / tmax ELSE 0 END AS p_text,
           CASE WHEN vscore IS NULL THEN NULL
                WHEN vmax > vmin THEN (vscore - vmin) / (vmax - vmin) ELSE 1 END AS p_vector,
           coalesce((%(weights)s::jsonb ->> category)::float8, 1.0) AS p_category,
           1 - %(wr)s + %(wr)s * exp(-date_part('epoch', now() - valid_from) / %(halflife)s)
               AS p_recency,
           0.7 + 0.3 * confidence AS p_confidence,
           CASE %(when)s
                WHEN 'latest' THEN 1 + %(wt)s * age_rank
                WHEN 'earliest' THEN 1 + %(wt)s * (1 - age_rank)
                WHEN 'between' THEN CASE WHEN occurred_at >= %(since)s AND occurred_at < %(until)s
                                         THEN 1 + %(wt)s ELSE 1 END
                ELSE 1 END AS p_time
      FROM scored
), top AS (
    SELECT id, vscore, tscore,
           (CASE WHEN p_vector IS NULL THEN p_text
                 ELSE (1 - %(wv)s) * p_text + %(wv)s * p_vector END)
           * p_category * p_recency * p_confidence * p_time
           + CASE WHEN pinned THEN 0.05::float8 ELSE 0 END AS score,
           occurred_at, p_text, p_vector, p_category, p_recency, p_confidence, p_time
      FROM parts
     WHERE {keep}
     ORDER BY score DESC, occurred_at DESC
     LIMIT %(limit)s
)
-- Only the few rows returned carry their text: the ranking above moves narrow rows.
SELECT t.id, f.category, f.key, f.text, f.valid_from, f.source_kind, f.source_session_id,
       f.pinned, t.vscore, t.tscore, t.score,
       t.occurred_at, t.p_text, t.p_vector, t.p_category, t.p_recency, t.p_confidence, t.p_time
  FROM top t JOIN memory_memoryfact f ON f.id = t.id
 ORDER BY t.score DESC, t.occurred_at DESC
