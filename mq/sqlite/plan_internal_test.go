package sqlite

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// TestStatementsUseTheirIndexes checks with EXPLAIN QUERY PLAN that the statements
// whose cost must not grow with the queue search an index instead of scanning
// mq_messages, on a database holding keyed, un-keyed, locked and prioritized
// messages (and no ANALYZE statistics, as in production).
func TestStatementsUseTheirIndexes(t *testing.T) {
	q, err := Open(filepath.Join(t.TempDir(), "plan.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := t.Context()
	var msgs []mq.Message
	for i := range 500 {
		msgs = append(msgs, mq.Message{Queue: "q", Payload: []byte("p")}, mq.Message{Queue: "q", RoutingKey: fmt.Sprint("k", i%50), Payload: []byte("p")})
		if i%10 == 0 {
			msgs = append(msgs, mq.Message{Queue: "q", Payload: []byte("p"), Priority: i%3 - 1})
		}
	}
	if err := q.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if _, err := q.DequeueBatches(ctx, "q", mq.DequeueOptions{LockTimeout: time.Minute}, 20); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, query string
		want        []string // each must appear in the plan
	}{
		// The pause check and the priority probes are subqueries SQLite runs once,
		// not one per message. Each priority phase reads its index in that index's
		// order (no sort); TestCandidateScanPlan checks the plain phase's whole plan.
		{"candidate scan", phaseSQL(plainPhase, "", false), []string{"SEARCH m USING INDEX mq_messages_ready (queue=? AND visible_at<?)",
			"SCALAR SUBQUERY", "SEARCH p USING PRIMARY KEY (queue=?)",
			"SEARCH u USING COVERING INDEX mq_messages_urgent (queue=? AND priority>?)",
			"SEARCH u USING COVERING INDEX mq_messages_deferred (queue=? AND priority<?)"}},
		{"candidate scan, sessions", phaseSQL(plainPhase, "", true), []string{"SEARCH m USING INDEX mq_messages_ready (queue=? AND visible_at<?)",
			"SCALAR SUBQUERY", "SEARCH p USING PRIMARY KEY (queue=?)"}},
		{"candidate scan, positive priorities", phaseSQL(urgentPhase, "", false), []string{"SEARCH m USING INDEX mq_messages_urgent (queue=? AND priority>?)",
			"SCALAR SUBQUERY", "SEARCH p USING PRIMARY KEY (queue=?)"}},
		{"candidate scan, negative priorities", phaseSQL(deferredPhase, "", false), []string{"SEARCH m USING INDEX mq_messages_deferred (queue=? AND priority<?)",
			"SCALAR SUBQUERY", "SEARCH p USING PRIMARY KEY (queue=?)"}},
		{"lock keys", lockKeysSQL(3, ""), []string{"SCAN t", "SEARCH m USING INDEX mq_messages_routing (queue=? AND routing_key=?)"}},
		{"lock ids", lockIDsSQL(3, true), []string{"USING INTEGER PRIMARY KEY (rowid=?)"}},
		{"more visible", moreVisibleSQL(3), []string{"SCAN t", "SEARCH m USING INDEX mq_messages_routing (queue=? AND routing_key=?)"}},
		{"held", heldSQL(3), []string{"USING INDEX mq_messages_token (lock_token=?)"}},
		{"held ids", heldIDsSQL(3), []string{"USING COVERING INDEX mq_messages_token (lock_token=?)"}},
		{"ack", ackSQL(3), []string{"mq_messages_token (lock_token=? AND rowid>? AND rowid<?)"}},
		{"dead letters", deadSQL(3), []string{"mq_messages_token (lock_token=? AND rowid>? AND rowid<?)", "INDEX mq_messages_key (queue=? AND message_key=?)"}},
		{"release", releaseSQL(3), []string{"mq_messages_token (lock_token=? AND rowid>? AND rowid<?)"}},
		{"peek", peekSQL(false, ""), []string{"USING INDEX mq_messages_queue (queue=? AND id>?)"}},
		{"peek key", peekSQL(true, ""), []string{"USING INDEX mq_messages_routing (queue=? AND routing_key=? AND id>?)"}},
		{"peek locked", peekSQL(false, mq.StateLocked), []string{"(queue=? AND id>?)"}},
		{"peek key ready", peekSQL(true, mq.StateReady), []string{"(queue=? AND routing_key=? AND id>?)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := explain(t, q, c.query)
			for _, w := range c.want {
				if !strings.Contains(plan, w) {
					t.Errorf("the plan does not contain %q:\n%s", w, plan)
				}
			}
			for _, line := range strings.Split(plan, "\n") {
				if strings.Contains(line, "SCAN mq_messages") || strings.Contains(line, "SCAN m ") || strings.HasSuffix(line, "SCAN m") {
					t.Errorf("the plan scans the messages: %q in\n%s", line, plan)
				}
				if strings.Contains(line, "CORRELATED") && strings.Contains(c.name, "candidate") {
					t.Errorf("the scan runs a subquery per message: %q in\n%s", line, plan)
				}
				if strings.Contains(line, "TEMP B-TREE") && strings.Contains(c.name, "candidate") {
					t.Errorf("the scan sorts instead of reading its indexes in order: %q in\n%s", line, plan)
				}
			}
		})
	}
}

// TestCandidateScanPlan checks that the plain phase of the candidate scan, all a
// queue without priorities reads, has the very plan the scan had before
// priorities (one range of mq_messages_ready, the pause and key-lock probes), plus
// the two priority probes, each one search of a partial index run once.
func TestCandidateScanPlan(t *testing.T) {
	q, err := Open(filepath.Join(t.TempDir(), "plan.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const sessionCond = " AND (m.session IS NULL OR s.session IS NULL OR s.locked_until <= ? OR s.owner = ?)"
	got := explain(t, q, phaseSQL(plainPhase, sessionCond, true))
	want := strings.Join([]string{
		"SEARCH m USING INDEX mq_messages_ready (queue=? AND visible_at<?)",
		"SCALAR SUBQUERY 4",
		"SEARCH p USING PRIMARY KEY (queue=?)",
		"SEARCH k USING PRIMARY KEY (queue=? AND routing_key=?) LEFT-JOIN",
		"SEARCH s USING PRIMARY KEY (queue=? AND session=?) LEFT-JOIN",
		"SCALAR SUBQUERY 1",
		"SEARCH u USING COVERING INDEX mq_messages_urgent (queue=? AND priority>?)",
		"SCALAR SUBQUERY 2",
		"SEARCH u USING COVERING INDEX mq_messages_deferred (queue=? AND priority<?)",
		"SCALAR SUBQUERY 3",
		"SEARCH l USING PRIMARY KEY (queue=?)",
	}, "\n")
	if got != want {
		t.Errorf("the plan of the plain phase changed:\n%s\nwant\n%s", got, want)
	}
}

func explain(t *testing.T, q *Queue, query string) string {
	t.Helper()
	// The plan does not depend on the parameters: bind NULLs.
	rows, err := q.db.Query("EXPLAIN QUERY PLAN "+query, make([]any, strings.Count(query, "?"))...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", query, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
