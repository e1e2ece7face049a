-- Another live fact of the same subject and category this close in meaning is the same fact.
SELECT id FROM memory_memoryfact
 WHERE tenant_id = %s AND subject_id = %s AND category = %s AND valid_until IS NULL
   AND id <> %s AND lineage <> %s AND embedding_model = %s
   AND (key = '' OR key = %s) AND created_at < %s
   AND 1 - (embedding <=> %s::vector) >= %s
 ORDER BY created_at LIMIT 1
