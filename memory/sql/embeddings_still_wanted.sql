-- Of these computed vectors of one tenant's facts, the ones whose fact still wants them
-- (live, same text, no vector of this model): after a write that skipped locked rows, those
-- are the ones to retry.
SELECT f.id FROM memory_memoryfact f
  JOIN unnest(%(ids)s::uuid[], %(texts)s::text[]) AS c(id, text) ON c.id = f.id AND c.text = f.text
 WHERE f.tenant_id = %(tenant)s
   AND f.valid_until IS NULL AND (f.embedding IS NULL OR f.embedding_model <> %(model)s)
