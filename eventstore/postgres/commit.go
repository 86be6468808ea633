package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/sqlstore"
)

// qCommit is commitMany's statement. c holds the commits ($1-$12, arrays parallel
// to the streams); the events are $13-$17 (the commit each belongs to, from 1, then
// sequence number, type, data and checksum) and $18 is the time. It writes each
// stream and partition row once, so that a turn adds one row version to each, not
// two: st creates the missing streams and updates the others with the commit
// applied, locking them in stream order (the order of every writer that locks
// several); ev inserts the events (the primary key decides every sequence number)
// once the streams are locked; pt creates the missing partitions and updates the
// others. A stream's status follows its current partition, the higher of the old
// current partition and the commit's: the commit's status, else the stream's own
// for the same partition (it is that partition's, as every writer keeps it) or
// Running for a new one. The updates read the stream and partition rows they lock,
// in their newest versions, and the commit from c, never another table, which this
// statement's snapshot could show older than the rows it waited for. It returns
// the first event, in call order, whose number was already stored: the caller then
// rolls back (CommitManyTx runs under a savepoint).
const qCommit = `WITH c AS MATERIALIZED (
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::boolean[], $5::text[], $6::text[],
		$7::text[], $8::text[], $9::boolean[], $10::text[], $11::bigint[], $12::bigint[])
		WITH ORDINALITY AS c(stream, partition, status, ends, output, pin, name, version, setparent, parent, n, bytes, commit)
),
st AS (
	INSERT INTO es_streams AS s (stream, name, version, parent, status, current_partition, created_at, updated_at)
	SELECT c.stream, COALESCE(c.name, ''), COALESCE(c.version, ''), CASE WHEN c.setparent THEN NULLIF(c.parent, '') END,
		COALESCE(c.status, 'Running'), c.partition, $18::bigint, $18::bigint
	FROM c ORDER BY c.stream
	ON CONFLICT (stream) DO UPDATE SET (name, version, parent, status, current_partition, updated_at) = (
		SELECT COALESCE(c.name, s.name), COALESCE(c.version, s.version),
			CASE WHEN c.setparent THEN NULLIF(c.parent, '') ELSE s.parent END,
			CASE WHEN c.partition > s.current_partition THEN COALESCE(c.status, 'Running')
				WHEN c.partition = s.current_partition THEN COALESCE(c.status, s.status)
				ELSE s.status END,
			GREATEST(s.current_partition, c.partition), $18::bigint
		FROM c WHERE c.stream = EXCLUDED.stream)
	RETURNING s.stream
),
locked AS MATERIALIZED (SELECT count(*) AS n FROM st),
ev AS (
	INSERT INTO es_events (stream, partition, seq, type, data, checksum, created_at)
	SELECT c.stream, c.partition, e.seq, e.type, e.data, e.checksum, $18::bigint
	FROM unnest($13::int[], $14::bigint[], $15::text[], $16::bytea[], $17::bigint[]) AS e(commit, seq, type, data, checksum)
	JOIN c ON c.commit = e.commit, locked
	WHERE locked.n >= 0
	ON CONFLICT (stream, partition, seq) DO NOTHING
	RETURNING stream, seq
),
pt AS (
	INSERT INTO es_partitions AS p (stream, partition, status, output, pinned_version, started_at, completed_at, event_count, bytes)
	SELECT c.stream, c.partition, COALESCE(c.status, 'Running'), c.output, c.pin, $18::bigint,
		CASE WHEN c.status IS NOT NULL AND c.ends THEN $18::bigint END, c.n, c.bytes
	FROM c, locked WHERE locked.n >= 0
	ORDER BY c.stream
	ON CONFLICT (stream, partition) DO UPDATE SET
		event_count = p.event_count + EXCLUDED.event_count,
		bytes = p.bytes + EXCLUDED.bytes,
		output = COALESCE(EXCLUDED.output, p.output),
		pinned_version = COALESCE(EXCLUDED.pinned_version, p.pinned_version),
		(status, completed_at) = (
			SELECT COALESCE(c.status, p.status), CASE WHEN c.status IS NULL THEN p.completed_at WHEN c.ends THEN $18::bigint END
			FROM c WHERE c.stream = EXCLUDED.stream)
)
SELECT c.stream, e.seq
FROM unnest($13::int[], $14::bigint[]) WITH ORDINALITY AS e(commit, seq, ord)
JOIN c ON c.commit = e.commit
LEFT JOIN ev ON ev.stream = c.stream AND ev.seq = e.seq
WHERE ev.seq IS NULL
ORDER BY e.ord
LIMIT 1`

// commitMany is CommitManyTx's write (sqlstore.Dialect.CommitMany): qCommit, its
// arguments arrays, so that it is prepared once.
func (d *dialect) commitMany(ctx context.Context, tx *sqlx.Tx, commits []eventstore.StreamCommit, now int64) error {
	n := len(commits)
	var (
		streams, statuses, outputs, pins = make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		names, versions, parents         = make([]*string, n), make([]*string, n), make([]*string, n)
		partitions, counts, sizes        = make([]int64, n), make([]int64, n), make([]int64, n)
		ends, setParent                  = make([]bool, n), make([]bool, n)
		owners                           []int32 // the commit (from 1) of each event
		seqs, sums                       []int64
		types                            []string
		datas                            [][]byte
	)
	for i, c := range commits {
		u := c.Update
		streams[i], partitions[i] = c.Stream, u.Partition
		if u.Status != nil {
			st := string(*u.Status)
			statuses[i], ends[i] = &st, u.Status.EndsPartition()
		}
		outputs[i], pins[i], names[i], versions[i] = u.Output, u.PinnedVersion, u.Name, u.Version
		setParent[i], parents[i] = u.Parent != nil, u.Parent
		counts[i] = int64(len(c.Events))
		for _, e := range c.Events {
			data, sum := sqlstore.Stored(e)
			owners, seqs, types, datas, sums = append(owners, int32(i+1)), append(seqs, e.Seq), append(types, e.Type), append(datas, data), append(sums, sum)
			sizes[i] += int64(len(data))
		}
	}
	var (
		conflictStream sql.NullString
		conflictSeq    sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, qCommit, streams, partitions, statuses, ends, outputs, pins,
		names, versions, setParent, parents, counts, sizes, owners, seqs, types, datas, sums, now).Scan(&conflictStream, &conflictSeq)
	switch {
	case err == nil:
		for _, c := range commits {
			if c.Stream == conflictStream.String {
				return &eventstore.ConflictError{Stream: c.Stream, Partition: c.Update.Partition, Seq: conflictSeq.Int64}
			}
		}
		return fmt.Errorf("commit: conflict on unknown stream %q", conflictStream.String)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
