-- Recall searches the full-text index on every call. With GIN's default
-- fast update, new rows wait in a pending list that every search scans
-- linearly until a vacuum merges it: on 100,000 freshly written memories
-- (`slm bench --postgres`) recall took 8.7-9.0 ms (median) with the list,
-- 5.7 ms without. Rows now go straight into the index (a bulk insert takes
-- about twice as long), and whatever is pending is merged now.
ALTER INDEX memories_fts SET (fastupdate = off);
SELECT gin_clean_pending_list('memories_fts'::regclass);
