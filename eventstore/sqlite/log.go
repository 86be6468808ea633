package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/internal/essql"
	"github.com/duroq/duroq/internal/sqltext"
	"github.com/jmoiron/sqlx"
)

// Append implements eventstore.Log: the events in one INSERT (the primary key
// rejects a duplicate), then the partition's counters and the stream's current partition are
// bumped in place. No stored event is read.
func (s *Store) Append(ctx context.Context, stream string, partition int64, events []eventstore.Event) error {
	return s.c.Append(ctx, stream, partition, events)
}

// AppendTx is Append inside tx.
func (s *Store) AppendTx(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event) error {
	return s.c.AppendTx(ctx, tx, stream, partition, events)
}

func (s *Store) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event, now int64) error {
	size, err := s.insertEvents(ctx, tx, []eventstore.StreamCommit{{Stream: stream, Events: events, Update: eventstore.StreamUpdate{Partition: partition}}}, now)
	if err != nil {
		return err
	}
	if _, err := s.exec(ctx, tx, qAddPartitionCounts, stream, partition, now, len(events), size[0]); err != nil {
		return err
	}
	_, err = s.exec(ctx, tx, qTouchStreamOnAppend, stream, partition, now)
	return err
}

// insertEvents inserts the events of commits in INSERTs of up to insertChunk rows
// and returns each commit's bytes.
func (s *Store) insertEvents(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit, now int64) ([]int64, error) {
	type row struct {
		c *eventstore.StreamCommit
		e *eventstore.Event
	}
	var rows []row
	sizes := make([]int64, len(commits))
	for i := range commits {
		c := &commits[i]
		for j := range c.Events {
			rows = append(rows, row{c, &c.Events[j]})
			sizes[i] += int64(len(c.Events[j].Data))
		}
	}
	for chunk := range slices.Chunk(rows, insertChunk) {
		var sb strings.Builder
		sb.WriteString(qInsertEvents)
		args := make([]any, 0, len(chunk)*7)
		for i, r := range chunk {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			data, sum := essql.Stored(*r.e)
			args = append(args, r.c.Stream, r.c.Update.Partition, r.e.Seq, r.e.Type, data, sum, now)
		}
		if _, err := s.exec(ctx, tx, sb.String(), args...); err != nil {
			if isDuplicate(err) {
				return nil, s.conflict(ctx, tx, commits)
			}
			return nil, fmt.Errorf("insert events: %w", err)
		}
	}
	return sizes, nil
}

// commitMany is CommitManyTx's write (essql.Dialect.CommitMany): the events in
// one INSERT, then partitions and streams, each created where missing and updated
// from a VALUES table: five statements for any number of streams.
func (s *Store) commitMany(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit, now int64) error {
	sizes, err := s.insertEvents(ctx, tx, commits, now)
	if err != nil {
		return err
	}
	var created, parts, streams []any
	for i, c := range commits {
		u := c.Update
		var status any
		ends := false
		if u.Status != nil {
			status, ends = string(*u.Status), u.Status.EndsPartition()
		}
		created = append(created, c.Stream, u.Partition)
		parts = append(parts, c.Stream, u.Partition, len(c.Events), sizes[i], status, ends, essql.NullString(u.Output), essql.NullString(u.PinnedVersion))
		streams = append(streams, c.Stream, u.Partition, essql.NullString(u.Name), essql.NullString(u.Version), u.Parent != nil, essql.NullString(u.Parent))
	}
	n := len(commits)
	for _, st := range []struct {
		query string
		args  []any
	}{
		{`INSERT INTO es_partitions (stream, partition, status, started_at)
			SELECT column1, column2, 'Running', ? FROM (VALUES ` + sqltext.Rows(n, 2) + `) WHERE true
			ON CONFLICT (stream, partition) DO NOTHING`, append([]any{now}, created...)},
		{`WITH t(s, p, n, b, st, ends, out, pin) AS (VALUES ` + sqltext.Rows(n, 8) + `)
			UPDATE es_partitions SET
				event_count = event_count + t.n,
				bytes = bytes + t.b,
				status = COALESCE(t.st, status),
				completed_at = CASE WHEN t.st IS NULL THEN completed_at WHEN t.ends THEN ? ELSE NULL END,
				output = COALESCE(t.out, output),
				pinned_version = COALESCE(t.pin, pinned_version)
			FROM t WHERE es_partitions.stream = t.s AND es_partitions.partition = t.p`, append(parts, now)},
		{`INSERT INTO es_streams (stream, status, current_partition, created_at, updated_at)
			SELECT column1, 'Running', column2, ?, ? FROM (VALUES ` + sqltext.Rows(n, 2) + `) WHERE true
			ON CONFLICT (stream) DO NOTHING`, append([]any{now, now}, created...)},
		// The stream's status follows its current partition, the higher of the old
		// current partition and t.p (SET sees the row's old values).
		{`WITH t(s, p, nm, ver, setparent, par) AS (VALUES ` + sqltext.Rows(n, 6) + `)
			UPDATE es_streams SET
				name = COALESCE(t.nm, name),
				version = COALESCE(t.ver, version),
				parent = CASE WHEN t.setparent THEN NULLIF(t.par, '') ELSE parent END,
				current_partition = MAX(current_partition, t.p),
				status = (SELECT p.status FROM es_partitions p
					WHERE p.stream = es_streams.stream AND p.partition = MAX(es_streams.current_partition, t.p)),
				updated_at = ?
			FROM t WHERE es_streams.stream = t.s`, append(streams, now)},
	} {
		if _, err := s.exec(ctx, tx, st.query, st.args...); err != nil {
			return err
		}
	}
	return nil
}

// insertChunk bounds the events of one INSERT (7 parameters each) well below
// SQLite's parameter limit.
const insertChunk = 256

// conflict names the first event of commits whose sequence number is already
// stored: the primary key, not a read per append, rejects duplicates, so only a
// failed insert pays for finding which one it was.
func (s *Store) conflict(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error {
	for _, c := range commits {
		for _, e := range c.Events {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM es_events WHERE stream = ? AND partition = ? AND seq = ?`, c.Stream, c.Update.Partition, e.Seq).Scan(&one)
			if err == nil {
				return &eventstore.ConflictError{Stream: c.Stream, Partition: c.Update.Partition, Seq: e.Seq}
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
	}
	for _, c := range commits {
		if len(c.Events) > 0 {
			return &eventstore.ConflictError{Stream: c.Stream, Partition: c.Update.Partition, Seq: c.Events[0].Seq}
		}
	}
	return errors.New("duplicate event") // unreachable: only an insert of events conflicts
}

// CommitManyTx appends and updates many streams inside tx, as AppendTx then UpdateTx
// for each would, in a constant number of statements (the events in one INSERT,
// partitions and streams updated from VALUES tables). Streams must be distinct. On
// error nothing of it is written.
func (s *Store) CommitManyTx(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error {
	return s.c.CommitManyTx(ctx, tx, commits)
}

// Read implements eventstore.Log.
func (s *Store) Read(ctx context.Context, stream string, partition int64) ([]eventstore.Event, error) {
	return s.c.Read(ctx, stream, partition)
}

// ReadTx is Read through q (a *sqlx.Tx to read inside a transaction).
func (s *Store) ReadTx(ctx context.Context, q sqlx.QueryerContext, stream string, partition int64) ([]eventstore.Event, error) {
	return s.c.ReadTx(ctx, q, stream, partition)
}

// ReadLatest implements eventstore.Log.
func (s *Store) ReadLatest(ctx context.Context, stream string) (int64, []eventstore.Event, error) {
	return s.c.ReadLatest(ctx, stream)
}

// ReadLatestTx is ReadLatest through q. Outside a transaction the partition and its
// events are read by two statements; a partition that starts between them is seen
// by the next read.
func (s *Store) ReadLatestTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, []eventstore.Event, error) {
	return s.c.ReadLatestTx(ctx, q, stream)
}

// LatestPartition implements eventstore.Log.
func (s *Store) LatestPartition(ctx context.Context, stream string) (int64, error) {
	return s.c.LatestPartition(ctx, stream)
}

// LatestPartitionTx is LatestPartition through q.
func (s *Store) LatestPartitionTx(ctx context.Context, q sqlx.QueryerContext, stream string) (int64, error) {
	return s.c.LatestPartitionTx(ctx, q, stream)
}

// Partitions implements eventstore.Log.
func (s *Store) Partitions(ctx context.Context, stream string) ([]eventstore.PartitionInfo, error) {
	return s.c.Partitions(ctx, stream)
}

// PartitionsTx is Partitions through q.
func (s *Store) PartitionsTx(ctx context.Context, q sqlx.QueryerContext, stream string) ([]eventstore.PartitionInfo, error) {
	return s.c.PartitionsTx(ctx, q, stream)
}
