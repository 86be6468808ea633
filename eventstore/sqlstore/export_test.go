package sqlstore

import "github.com/duroq/duroq/eventstore"

// StreamInfosQuery returns the statement ListStreamInfos runs for f and its
// arguments, for tests that read its plan.
func StreamInfosQuery(s *Store, f eventstore.StreamFilter) (string, []any, error) {
	return s.streamInfosQuery(f)
}
