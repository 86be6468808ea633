package sqlite_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/mq/sqlite"
)

const crashChildEnv = "DUROQ_MQ_CRASH_CHILD_DB"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	os.Exit(m.Run())
}

// crashChild is the process that gets killed: it enqueues, takes locks and acks in a
// loop, reporting on stdout each step only after it committed, until it is killed.
func crashChild(path string) {
	q, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...); out.Flush() }
	for i := 0; ; i++ {
		var msgs []mq.Message
		for j := range 5 {
			key := ""
			if j%2 == 0 {
				key = fmt.Sprintf("key-%d", (i+j)%7)
			}
			msgs = append(msgs, mq.Message{Queue: "crash", RoutingKey: key, Payload: fmt.Appendf(nil, "m-%d-%d", i, j)})
		}
		if err := q.Enqueue(ctx, msgs...); err != nil {
			say("error %v", err)
			os.Exit(2)
		}
		for _, m := range msgs {
			say("enqueued %s", m.Payload)
		}
		// Hold one batch locked (never settled) and ack another.
		if _, err := q.DequeueBatch(ctx, "crash", mq.DequeueOptions{LockTimeout: 300 * time.Millisecond}); err != nil {
			say("error %v", err)
			os.Exit(2)
		}
		b, err := q.DequeueBatch(ctx, "crash", mq.DequeueOptions{LockTimeout: 300 * time.Millisecond})
		if err != nil {
			say("error %v", err)
			os.Exit(2)
		}
		if b == nil {
			continue
		}
		for _, d := range b.Messages {
			say("acking %s", d.Payload)
		}
		if err := q.Ack(ctx, b.Token); err != nil {
			say("error %v", err)
			os.Exit(2)
		}
		for _, d := range b.Messages {
			say("acked %s", d.Payload)
		}
	}
}

// TestKillDashNineLosesNoMessage kills (SIGKILL) a process in the middle of enqueueing,
// holding locks and acking, then checks from a fresh process that every message it
// had committed and not acked is still delivered, and nothing acked comes back.
func TestKillDashNineLosesNoMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	enqueued, acking, acked := map[string]bool{}, map[string]bool{}, map[string]bool{}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && len(acked) < 200 {
		verb, payload, _ := strings.Cut(lines.Text(), " ")
		switch verb {
		case "enqueued":
			enqueued[payload] = true
		case "acking":
			acking[payload] = true
		case "acked":
			acked[payload] = true
		default:
			t.Fatalf("child: %s", lines.Text())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // the child is killed: its exit status is the signal
	// Lines the child wrote before dying are still in the pipe: read them too.
	for lines.Scan() {
		verb, payload, _ := strings.Cut(lines.Text(), " ")
		switch verb {
		case "enqueued":
			enqueued[payload] = true
		case "acking":
			acking[payload] = true
		case "acked":
			acked[payload] = true
		}
	}
	if len(acked) < 200 {
		t.Fatalf("the child acked only %d messages before the kill", len(acked))
	}

	q := openQueue(t, path)
	defer q.Close()
	// The dead process's locks (300 ms) lapse; drain until nothing comes for well
	// after that, so a wall clock adjusted meanwhile cannot end the drain early.
	quietUntil := time.Now().Add(2 * time.Second)
	delivered := map[string]int{}
	for {
		b, err := q.DequeueBatch(t.Context(), "crash", mq.DequeueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			if time.Now().After(quietUntil) {
				break
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, d := range b.Messages {
			delivered[string(d.Payload)]++
		}
		if err := q.Ack(t.Context(), b.Token); err != nil {
			t.Fatal(err)
		}
	}
	missing := 0
	for p := range enqueued {
		if !acking[p] && delivered[p] != 1 {
			t.Errorf("message %s was committed and never acked, but was delivered %d times after the crash", p, delivered[p])
			missing++
		}
	}
	if missing > 0 { // say why: still stored (and then what holds it), or gone
		var left []struct {
			Payload     string  `db:"payload"`
			RoutingKey  *string `db:"routing_key"`
			VisibleAt   int64   `db:"visible_at"`
			KeyLockedTo *int64  `db:"key_locked_until"`
		}
		err := q.DB().Select(&left, `SELECT CAST(m.payload AS TEXT) AS payload, m.routing_key, m.visible_at, k.locked_until AS key_locked_until
			FROM mq_messages m LEFT JOIN mq_keys k ON k.queue = m.queue AND k.routing_key = m.routing_key LIMIT 20`)
		t.Logf("now %d µs; %d messages still stored (%v), first ones: %+v", time.Now().UnixMicro(), len(left), err, left)
	}
	for p, n := range delivered {
		if acked[p] {
			t.Errorf("message %s was acked before the crash but came back", p)
		}
		if n != 1 {
			t.Errorf("message %s delivered %d times in one drain", p, n)
		}
		if !strings.HasPrefix(p, "m-") {
			t.Errorf("unexpected payload %q", p)
		}
	}
	t.Logf("child committed %d messages and acked %d before SIGKILL; %d recovered", len(enqueued), len(acked), len(delivered))
}
