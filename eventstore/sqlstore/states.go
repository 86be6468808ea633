package sqlstore

import (
	"context"
	"errors"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/sqltext"
	"github.com/jmoiron/sqlx"
)

// StreamColumns selects what a streamRow scans, from es_streams s joined with its
// current partition p: Queries.Stream adds the condition.
const StreamColumns = streamFields + `
FROM es_streams s
` + joinCurrentPartition

// streamFields are the columns a streamRow scans, of a stream s and its current
// partition p.
const streamFields = `s.name, s.version, COALESCE(s.parent, ''), s.status, s.current_partition,
	s.custom_status, s.custom_status_version, s.created_at, s.updated_at,
	p.status, p.output, p.pinned_version, p.completed_at`

// joinCurrentPartition joins to the streams s their current partitions p.
const joinCurrentPartition = `LEFT JOIN es_partitions p ON p.stream = s.stream AND p.partition = s.current_partition`

// ReadStatesTx reads through q, for each of streams that exists, what StreamTx,
// ReadTx of its current partition and KVSnapshotTx would: three statements for any
// number of streams. A missing stream is absent from the result; a corrupt event is
// reported in its stream's state.
func (s *Store) ReadStatesTx(ctx context.Context, q sqlx.QueryerContext, streams []string) (map[string]*eventstore.StreamState, error) {
	const op = "read states"
	if err := s.usableWith(ctx, op, q); err != nil {
		return nil, err
	}
	args := make([]any, len(streams))
	for i, st := range streams {
		if err := eventstore.CheckStream(op, st); err != nil {
			return nil, err
		}
		args[i] = st
	}
	states := map[string]*eventstore.StreamState{}
	if len(streams) == 0 {
		return states, nil
	}
	// The streams' condition: an array where the dialect has them, so that the
	// statements' text does not depend on how many streams they read (prepared
	// once, planned once).
	in := "IN (" + sqltext.Params(len(streams)) + ")"
	if s.d.Arrays {
		in, args = "= ANY(?)", []any{streams}
	}
	err := s.readStates(ctx, q, op, in, args, states)
	return states, s.wrap(op, streams[0], err)
}

func (s *Store) readStates(ctx context.Context, q sqlx.QueryerContext, op, in string, args []any, states map[string]*eventstore.StreamState) error {
	rows, err := s.d.Query(ctx, q, sqlx.Rebind(s.d.Bind, "SELECT s.stream, "+StreamColumns+" WHERE s.stream "+in), args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var stream string
		var r streamRow
		if err := rows.Scan(append([]any{&stream}, r.dest()...)...); err != nil {
			rows.Close()
			return err
		}
		states[stream] = &eventstore.StreamState{Info: r.info(stream), Events: []eventstore.Event{}, KV: map[string]eventstore.KVEntry{}}
	}
	if err := rows.Close(); err != nil {
		return err
	}

	rows, err = s.d.Query(ctx, q, sqlx.Rebind(s.d.Bind, `SELECT e.stream, e.seq, e.type, e.data, e.checksum, e.created_at
		FROM es_streams s JOIN es_events e ON e.stream = s.stream AND e.partition = s.current_partition
		WHERE s.stream `+in+` ORDER BY e.stream, e.seq`), args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var stream string
		var r eventRow
		if err := rows.Scan(&stream, &r.seq, &r.typ, &r.data, &r.sum, &r.created); err != nil {
			rows.Close()
			return err
		}
		st := states[stream]
		if st == nil || st.Corrupt != nil {
			continue
		}
		e, err := r.event(op, stream, st.Info.CurrentPartition)
		if errors.Is(err, eventstore.ErrCorrupt) {
			st.Events, st.Corrupt = nil, err
			continue
		}
		if err != nil {
			rows.Close()
			return err
		}
		st.Events = append(st.Events, e)
	}
	if err := rows.Close(); err != nil {
		return err
	}

	rows, err = s.d.Query(ctx, q, sqlx.Rebind(s.d.Bind, `SELECT stream, key, value, partition, updated_at FROM es_kv_store WHERE stream `+in), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			stream, key string
			e           eventstore.KVEntry
			updated     int64
		)
		if err := rows.Scan(&stream, &key, &e.Value, &e.Partition, &updated); err != nil {
			return err
		}
		e.UpdatedAt = fromMicros(updated)
		if st := states[stream]; st != nil {
			st.KV[key] = e
		}
	}
	return rows.Err()
}
