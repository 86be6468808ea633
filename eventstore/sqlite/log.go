package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlstore"
	"github.com/duroq/duroq/internal/sqltext"
)

func (d *dialect) append(ctx context.Context, tx *sqlx.Tx, stream string, partition int64, events []eventstore.Event, now int64) error {
	size, err := d.insertEvents(ctx, tx, []eventstore.StreamCommit{{Stream: stream, Events: events, Update: eventstore.StreamUpdate{Partition: partition}}}, now)
	if err != nil {
		return err
	}
	if _, err := d.exec(ctx, tx, qAddPartitionCounts, stream, partition, now, len(events), size[0]); err != nil {
		return err
	}
	_, err = d.exec(ctx, tx, qTouchStreamOnAppend, stream, partition, now)
	return err
}

// insertEvents inserts the events of commits in INSERTs of up to insertChunk rows
// and returns each commit's bytes.
func (d *dialect) insertEvents(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit, now int64) ([]int64, error) {
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
			data, sum := sqlstore.Stored(*r.e)
			args = append(args, r.c.Stream, r.c.Update.Partition, r.e.Seq, r.e.Type, data, sum, now)
		}
		if _, err := d.exec(ctx, tx, sb.String(), args...); err != nil {
			if isDuplicate(err) {
				return nil, d.conflict(ctx, tx, commits)
			}
			return nil, fmt.Errorf("insert events: %w", err)
		}
	}
	return sizes, nil
}

// commitMany is CommitManyTx's write (sqlstore.Dialect.CommitMany): the events in
// one INSERT, then partitions and streams, each created where missing and updated
// from a VALUES table: five statements for any number of streams.
func (d *dialect) commitMany(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit, now int64) error {
	sizes, err := d.insertEvents(ctx, tx, commits, now)
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
		parts = append(parts, c.Stream, u.Partition, len(c.Events), sizes[i], status, ends, sqlstore.NullString(u.Output), sqlstore.NullString(u.PinnedVersion))
		streams = append(streams, c.Stream, u.Partition, sqlstore.NullString(u.Name), sqlstore.NullString(u.Version), u.Parent != nil, sqlstore.NullString(u.Parent))
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
		if _, err := d.exec(ctx, tx, st.query, st.args...); err != nil {
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
func (d *dialect) conflict(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit) error {
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
