-- Migration line "eventstore", version 3.
-- Listing root streams only (management: StreamFilter.RootsOnly), in id order so that
-- a page is one range of the index however many children the roots have; without
-- it such a page filters the primary key and reads every child it passes.
CREATE INDEX es_streams_roots ON es_streams (stream) WHERE parent IS NULL;
