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

// qCommitInsert is the first statement of commitMany: it creates the missing
// streams and locks the others in stream order (the order of every writer that
// locks several), inserts the events (the primary key decides every sequence
// number) and creates the missing partitions, Running and empty. It returns the
// first event, in call order, whose number was already stored.
const qCommitInsert = `WITH st AS (
	INSERT INTO es_streams AS s (stream, status, current_partition, created_at, updated_at)
	SELECT c.stream, 'Running', c.partition, $7::bigint, $7::bigint
	FROM unnest($1::text[], $2::bigint[]) AS c(stream, partition) ORDER BY c.stream
	ON CONFLICT (stream) DO UPDATE SET updated_at = EXCLUDED.updated_at
	RETURNING s.stream
),
locked AS MATERIALIZED (SELECT count(*) AS n FROM st),
ev AS (
	INSERT INTO es_events (stream, partition, seq, type, data, checksum, created_at)
	SELECT c.stream, c.partition, e.seq, e.type, e.data, e.checksum, $7::bigint
	FROM unnest($8::int[], $3::bigint[], $4::text[], $5::bytea[], $6::bigint[]) AS e(commit, seq, type, data, checksum)
	JOIN unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS c(stream, partition, commit) ON c.commit = e.commit,
	locked WHERE locked.n >= 0
	ON CONFLICT (stream, partition, seq) DO NOTHING
	RETURNING stream, seq
),
pt AS (
	INSERT INTO es_partitions AS p (stream, partition, status, started_at, event_count, bytes)
	SELECT c.stream, c.partition, 'Running', $7::bigint, 0, 0
	FROM unnest($1::text[], $2::bigint[]) AS c(stream, partition), locked WHERE locked.n >= 0
	ORDER BY c.stream
	ON CONFLICT (stream, partition) DO NOTHING
)
SELECT c.stream, e.seq
FROM unnest($8::int[], $3::bigint[]) WITH ORDINALITY AS e(commit, seq, ord)
JOIN unnest($1::text[]) WITH ORDINALITY AS c(stream, commit) ON c.commit = e.commit
LEFT JOIN ev ON ev.stream = c.stream AND ev.seq = e.seq
WHERE ev.seq IS NULL
ORDER BY e.ord
LIMIT 1`

// qCommitUpdate is the second statement of commitMany: it adds each commit's events
// to its partition and applies the update to the partition, then to the stream,
// whose status follows its current partition: the higher of the old current
// partition and the commit's (SET sees the row's old values).
const qCommitUpdate = `WITH c AS MATERIALIZED (
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::boolean[], $5::text[], $6::text[],
		$7::text[], $8::text[], $9::boolean[], $10::text[], $11::bigint[], $12::bigint[])
		AS c(stream, partition, status, ends, output, pin, name, version, setparent, parent, n, bytes)
),
pu AS (
	UPDATE es_partitions p SET
		event_count = p.event_count + c.n,
		bytes = p.bytes + c.bytes,
		status = COALESCE(c.status, p.status),
		completed_at = CASE WHEN c.status IS NULL THEN p.completed_at WHEN c.ends THEN $13::bigint ELSE NULL END,
		output = COALESCE(c.output, p.output),
		pinned_version = COALESCE(c.pin, p.pinned_version)
	FROM c WHERE p.stream = c.stream AND p.partition = c.partition
	RETURNING p.stream, p.status
)
UPDATE es_streams s SET
	name = COALESCE(c.name, s.name),
	version = COALESCE(c.version, s.version),
	parent = CASE WHEN c.setparent THEN NULLIF(c.parent, '') ELSE s.parent END,
	status = CASE WHEN c.partition >= s.current_partition THEN pu.status ELSE s.status END,
	current_partition = GREATEST(s.current_partition, c.partition),
	updated_at = $13::bigint
FROM c JOIN pu ON pu.stream = c.stream
WHERE s.stream = c.stream`

// commitMany is CommitManyTx's write (sqlstore.Dialect.CommitMany): qCommitInsert, then
// qCommitUpdate, their arguments arrays, so that each is prepared once.
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
	err := tx.QueryRowContext(ctx, qCommitInsert, streams, partitions, seqs, types, datas, sums, now, owners).Scan(&conflictStream, &conflictSeq)
	switch {
	case err == nil:
		for _, c := range commits {
			if c.Stream == conflictStream.String {
				return &eventstore.ConflictError{Stream: c.Stream, Partition: c.Update.Partition, Seq: conflictSeq.Int64}
			}
		}
		return fmt.Errorf("insert events: conflict on unknown stream %q", conflictStream.String)
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("insert events: %w", err)
	}
	if _, err := tx.ExecContext(ctx, qCommitUpdate, streams, partitions, statuses, ends, outputs, pins,
		names, versions, setParent, parents, counts, sizes, now); err != nil {
		return fmt.Errorf("update streams: %w", err)
	}
	return nil
}
