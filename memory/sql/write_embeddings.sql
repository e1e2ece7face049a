-- Store computed vectors of one tenant's facts (tenant or system context), each only if its
-- fact is still live with the text that was embedded and still lacks a vector of this model:
-- an edit, supersede or delete that happened meanwhile wins. Rows another transaction has
-- locked are skipped, not waited for (a writer that holds the person's facts and waits for
-- one of these would deadlock with us); the caller writes those again a moment later.
-- Answers the ids written.
WITH computed AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(texts)s::text[], %(vectors)s::text[])
        AS c(id, text, embedding)
), free AS (
    SELECT f.id FROM memory_memoryfact f JOIN computed c ON c.id = f.id AND c.text = f.text
     WHERE f.tenant_id = %(tenant)s
       AND f.valid_until IS NULL
       AND (f.embedding IS NULL OR f.embedding_model <> %(model)s)
       FOR UPDATE OF f SKIP LOCKED
)
UPDATE memory_memoryfact f
   SET embedding = c.embedding::vector, embedding_model = %(model)s
  FROM free, computed c
 WHERE f.tenant_id = %(tenant)s AND f.id = free.id AND c.id = free.id
RETURNING f.id
