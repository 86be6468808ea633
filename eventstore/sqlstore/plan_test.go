package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/duroq/duroq/eventstore"
	"github.com/duroq/duroq/eventstore/postgres"
	"github.com/duroq/duroq/eventstore/sqlite"
	"github.com/duroq/duroq/eventstore/sqlstore"
	"github.com/duroq/duroq/internal/pgtest"
	"github.com/duroq/duroq/internal/sqltx"
	"github.com/duroq/duroq/pgdb"
)

// planCase is a listing filter and the index a page of it must be read through,
// in id order (no sort of the selected streams): on SQLite and on PostgreSQL.
type planCase struct {
	name          string
	f             eventstore.StreamFilter
	sqlite, pgsql string
}

var planCases = []planCase{
	{"all", eventstore.StreamFilter{}, "sqlite_autoindex_es_streams_1", "es_streams_pkey"},
	{"deep page", eventstore.StreamFilter{After: "r015000"}, "sqlite_autoindex_es_streams_1", "es_streams_pkey"},
	{"id prefix", eventstore.StreamFilter{IDPrefix: "r0150"}, "sqlite_autoindex_es_streams_1", "es_streams_pkey"},
	{"status", eventstore.StreamFilter{Status: eventstore.StatusFailed}, "es_streams_status", "es_streams_status"},
	{"status, deep page", eventstore.StreamFilter{Status: eventstore.StatusFailed, After: "r015000"}, "es_streams_status", "es_streams_status"},
	{"name", eventstore.StreamFilter{Name: "Refund"}, "es_streams_name", "es_streams_name"},
	{"name, deep page", eventstore.StreamFilter{Name: "Refund", After: "r015000"}, "es_streams_name", "es_streams_name"},
	{"parent", eventstore.StreamFilter{Parent: "r000010"}, "es_streams_parent", "es_streams_parent"},
	{"roots", eventstore.StreamFilter{RootsOnly: true}, "es_streams_roots", "es_streams_roots"},
	{"roots, deep page", eventstore.StreamFilter{RootsOnly: true, After: "r015000"}, "es_streams_roots", "es_streams_roots"},
	// No index keeps a time range in id order: these filter a scan of the primary key
	// (the ranges select every stream, as a dashboard's "last day" does).
	{"created after", eventstore.StreamFilter{CreatedAfter: time.Now().Add(-time.Hour)}, "sqlite_autoindex_es_streams_1", "es_streams_pkey"},
	{"updated before", eventstore.StreamFilter{UpdatedBefore: time.Now().Add(time.Hour)}, "sqlite_autoindex_es_streams_1", "es_streams_pkey"},
}

// planStreams is how many root streams the plan tests store; every tenth root
// has three children. One in 50 has failed and one in 50 is named Refund: a value
// selected by a page's filter is rare enough that reading the streams in id order
// and skipping the others would cost more than its index, so a planner that does
// not use that index cannot.
const planStreams = 20000

// fillPlanStreams stores the streams the plan cases read, a thousand per
// transaction, and gives the planner statistics.
func fillPlanStreams(t *testing.T, s *sqlstore.Store) {
	t.Helper()
	var commits []eventstore.StreamCommit
	names := []string{"Checkout", "Report", "Onboarding", "Refund"}
	for i := range planStreams {
		status, name := eventstore.StatusCompleted, &names[i%3]
		switch i % 50 {
		case 0:
			status = eventstore.StatusFailed
		case 1, 2:
			status = eventstore.StatusRunning
		case 3:
			name = &names[3]
		}
		root := fmt.Sprintf("r%06d", i)
		commits = append(commits, eventstore.StreamCommit{Stream: root, Events: []eventstore.Event{{Seq: 1}},
			Update: eventstore.StreamUpdate{Partition: 1, Name: name, Status: &status}})
		if i%10 == 0 {
			for c := range 3 {
				commits = append(commits, eventstore.StreamCommit{Stream: fmt.Sprintf("%s-child-%d", root, c), Events: []eventstore.Event{{Seq: 1}},
					Update: eventstore.StreamUpdate{Partition: 1, Name: &names[0], Parent: &root}})
			}
		}
	}
	ctx := t.Context()
	for len(commits) > 0 {
		n := min(len(commits), 1000)
		if err := sqltx.Run(ctx, s.DB(), func(tx *sqlx.Tx) error { return s.CommitManyTx(ctx, tx, commits[:n]) }); err != nil {
			t.Fatal(err)
		}
		commits = commits[n:]
	}
	if _, err := s.DB().ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// checkPlans reads the plan of each case's page (explain turns a statement into its
// plan's lines) and checks that it is read through the case's index and has none of
// the steps of fullScan, the marks of a table read from its start. (PostgreSQL may
// read an index's range of the selected streams and sort it when it expects fewer
// of them than a page: a sort is no such mark.)
func checkPlans(t *testing.T, s *sqlstore.Store, explain func(ctx context.Context, query string, args []any) ([]string, error),
	index func(planCase) string, fullScan []string) {
	for _, c := range planCases {
		f := c.f
		f.Limit = 101
		query, args, err := sqlstore.StreamInfosQuery(s, f)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := explain(t.Context(), query, args)
		if err != nil {
			t.Fatalf("%s: explain: %v", c.name, err)
		}
		text := strings.Join(plan, "\n")
		t.Logf("%s:\n%s", c.name, text)
		if !strings.Contains(text, index(c)) {
			t.Errorf("%s: the plan does not use %s:\n%s", c.name, index(c), text)
		}
		for _, bad := range fullScan {
			if strings.Contains(text, bad) {
				t.Errorf("%s: the plan has %q:\n%s", c.name, bad, text)
			}
		}
	}
}

func TestListStreamInfosPlansSQLite(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "plan.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fillPlanStreams(t, s)
	checkPlans(t, s, func(ctx context.Context, query string, args []any) ([]string, error) {
		rows, err := s.DB().QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				return nil, err
			}
			plan = append(plan, detail)
		}
		return plan, rows.Err()
	}, func(c planCase) string { return c.sqlite }, []string{"TEMP B-TREE", "SCAN p"})
}

func TestListStreamInfosPlansPostgres(t *testing.T) {
	t.Parallel()
	dsn, schema := pgtest.Schema(t)
	s, err := postgres.Open(t.Context(), dsn, postgres.Options{DB: pgdb.Options{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fillPlanStreams(t, s)
	checkPlans(t, s, func(ctx context.Context, query string, args []any) ([]string, error) {
		var plan []string
		err := s.DB().SelectContext(ctx, &plan, "EXPLAIN "+query, args...)
		return plan, err
	}, func(c planCase) string { return c.pgsql }, []string{"Seq Scan", "Merge"})
}
