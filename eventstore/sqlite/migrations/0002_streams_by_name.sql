-- Migration line "eventstore", version 2.
-- Listing by orchestration name (management: StreamFilter.Name), in id order so that
-- a page is one range of the index whatever the number of streams.
CREATE INDEX es_streams_name ON es_streams (name, stream);
