-- The text part of search_facts.sql (Okapi BM25; k1 and b from settings): only the candidates
-- that share a stem with the query are unnested, and each query stem's document frequency is
-- counted among those, which are all of the candidates that have it.
WITH hits AS (
    SELECT c.id, u.lexeme, coalesce(array_length(u.positions, 1), 1)::float8 AS tf,
           length(c.search)::float8 AS dl
      FROM cand c,
           unnest(ts_filter(setweight(c.search, 'A',
                                      tsvector_to_array(to_tsvector('english', %(query)s))),
                            '{a}')) u
     WHERE c.search @@ to_tsquery('english', %(tsquery)s)
), df AS (
    SELECT lexeme, count(*)::float8 AS df FROM hits GROUP BY lexeme
), stats AS (
    SELECT count(*)::float8 AS n, greatest(avg(length(search)), 1)::float8 AS avgdl FROM cand
)
SELECT h.id,
       sum(ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5))
           * h.tf * (%(k1)s + 1)
           / (h.tf + %(k1)s * (1 - %(b)s + %(b)s * h.dl / s.avgdl))) AS tscore
  FROM hits h JOIN df d ON d.lexeme = h.lexeme CROSS JOIN stats s
 GROUP BY h.id
