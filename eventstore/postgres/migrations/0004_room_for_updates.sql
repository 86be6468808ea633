-- Migration line "eventstore", version 4.
-- Every turn rewrites its stream's row (updated_at) and its partition's (event
-- counts). With full pages the new version goes to another page, with an entry
-- in each of the table's indexes (five on es_streams); with room on the page it
-- is a heap-only update that touches no index. New pages keep a fifth free.
ALTER TABLE es_streams SET (fillfactor = 80);
ALTER TABLE es_partitions SET (fillfactor = 80);
