-- Hybrid retrieval, a template: memory.retrieval.build_sql fills {vscore}, {tscore},
-- {subject} and {keep} for each combination of filters and signals. The candidate rows come
-- from the (tenant, subject) B-tree; every score is computed on them.
SELECT id, category, key, text, valid_from, source_kind, source_session_id, pinned,
       vscore, tscore,
       (CASE WHEN vscore IS NULL THEN tscore / (tscore + 0.1)
             ELSE %(wv)s * vscore + (1 - %(wv)s) * tscore / (tscore + 0.1) END)
       * COALESCE((%(weights)s::jsonb ->> category)::float8, 1.0)
       * (1 - %(wr)s + %(wr)s * exp(-extract(epoch FROM now() - valid_from) / %(halflife)s))
       * (0.7 + 0.3 * confidence)
       + CASE WHEN pinned THEN 0.05 ELSE 0 END AS score
  FROM (
    SELECT f.id, f.category, f.key, f.text, f.valid_from, f.source_kind, f.source_session_id,
           f.pinned, f.confidence,
           {vscore} AS vscore,
           {tscore} AS tscore
      FROM memory_memoryfact f
     WHERE f.tenant_id = %(tenant)s {subject}
       AND f.valid_until IS NULL
       AND (f.expires_at IS NULL OR f.expires_at > now())
  ) scored
 WHERE {keep}
 ORDER BY score DESC, valid_from DESC
 LIMIT %(limit)s
