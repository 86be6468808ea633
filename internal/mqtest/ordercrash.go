package mqtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/duroq/duroq/mq"
)

// orderCrashEnv names the scenario a child process of KilledHolderKeepsKeyOrder runs.
const orderCrashEnv = "DUROQ_MQ_ORDER_CRASH"

// heldLine prefixes the line a child writes once it holds its batch.
const heldLine = "order-crash-held"

const (
	crashQueue = "order"
	// crashHold is how long the killed holder's batch keeps its key: long enough for
	// the parent to check the key is held, short for the test.
	crashHold = 3 * time.Second
)

// The scenarios of a killed holder.
const (
	scenarioLapse = "lapse" // killed while holding a batch, which then lapses
	scenarioDelay = "delay" // killed after abandoning its batch with a delay
)

// Store opens a fresh store for KilledHolderKeepsKeyOrder: the queue the test uses
// and the environment (KEY=value) a child process needs to open the same store.
type Store func(t *testing.T) (q mq.MessageQueue, env []string)

// KilledHolderKeepsKeyOrder shows per-key order surviving the crash of a consumer
// process: a child process takes a keyed batch of the oldest two of three messages
// and is killed (SIGKILL) holding it, or after abandoning it with a delay. While
// its lock or delay lasts, a later message of the key is not delivered; once it
// ends, the next batches are the child's messages, then the rest, in enqueue order.
//
// child names the test function that calls OrderCrashChild in the same test
// binary; it is run in the child process.
func KilledHolderKeepsKeyOrder(t *testing.T, child string, fresh Store) {
	for _, scenario := range []string{scenarioLapse, scenarioDelay} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			q, env := fresh(t)
			ctx := t.Context()
			if err := q.Enqueue(ctx, keyed("a1"), keyed("a2"), keyed("a3")); err != nil {
				t.Fatal(err)
			}
			held, from, until := runChild(t, child, scenario, env)
			if want := []string{"a1", "a2"}; !slices.Equal(held, want) {
				t.Fatalf("the child held %q, want %q (MaxMessages 2)", held, want)
			}
			if err := q.Enqueue(ctx, keyed("a4"), mq.Message{Queue: crashQueue, RoutingKey: "L", Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
			first, second := dequeue(t, q), dequeue(t, q)
			if time.Now().After(from) {
				t.Fatalf("inconclusive: the checks while key K was held ended after its hold of %v (the machine is too slow)", crashHold)
			}
			if first == nil || first.RoutingKey != "L" {
				t.Fatalf("after the kill the first batch is %q, want key L's: key K is still held by the dead process", payloads(first))
			}
			if second != nil {
				t.Fatalf("key K was delivered (%q) while the dead process's %s still held it", payloads(second), scenario)
			}
			time.Sleep(time.Until(until) + 250*time.Millisecond) // the database may round times
			for _, want := range [][]string{{"a1", "a2"}, {"a3", "a4"}} {
				b := dequeue(t, q)
				if got := payloads(b); !slices.Equal(got, want) {
					t.Fatalf("after the %s the next batch of key K is %q, want %q: the dead process's messages first, in order", scenario, got, want)
				}
				wantAttempt := 1
				if want[0] == "a1" {
					wantAttempt = 2 // the killed fetch counted
				}
				for _, d := range b.Messages {
					if d.Attempt != wantAttempt {
						t.Errorf("message %s has attempt %d, want %d", d.Payload, d.Attempt, wantAttempt)
					}
				}
				if err := q.Ack(ctx, b.Token); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func keyed(payload string) mq.Message {
	return mq.Message{Queue: crashQueue, RoutingKey: "K", Payload: []byte(payload)}
}

func dequeue(t *testing.T, q mq.MessageQueue) *mq.Batch {
	t.Helper()
	b, err := q.DequeueBatch(t.Context(), crashQueue, mq.DequeueOptions{MaxMessages: 2})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func payloads(b *mq.Batch) []string {
	if b == nil {
		return nil
	}
	var out []string
	for _, d := range b.Messages {
		out = append(out, string(d.Payload))
	}
	return out
}

// runChild starts the child process of scenario, waits until it holds its batch,
// kills it and returns the payloads it held and the interval in which its hold of
// the key ends.
func runChild(t *testing.T, child, scenario string, env []string) (held []string, from, until time.Time) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$")
	cmd.Env = append(append(os.Environ(), env...), orderCrashEnv+"="+scenario)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for lines := bufio.NewScanner(stdout); lines.Scan(); {
		var payloads string
		var fromNanos, untilNanos int64
		if _, err := fmt.Sscanf(lines.Text(), heldLine+" %s %d %d", &payloads, &fromNanos, &untilNanos); err != nil {
			out = append(out, lines.Text())
			continue
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait() // killed: its exit status is the signal
		return strings.Split(payloads, ","), time.Unix(0, fromNanos), time.Unix(0, untilNanos)
	}
	cmd.Wait()
	t.Fatalf("the child exited without holding a batch; stdout:\n%s\nstderr:\n%s", strings.Join(out, "\n"), stderr.String())
	return nil, time.Time{}, time.Time{}
}

// OrderCrashChild is the child process of KilledHolderKeepsKeyOrder: it takes the
// batch, says so and waits to be killed. open opens the store the parent passed in
// the environment. Outside that child it skips t.
func OrderCrashChild(t *testing.T, open func() (mq.MessageQueue, error)) {
	scenario := os.Getenv(orderCrashEnv)
	if scenario == "" {
		t.Skip("the child process of KilledHolderKeepsKeyOrder; it runs only inside that test")
	}
	q, err := open()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lock := crashHold
	if scenario == scenarioDelay {
		lock = time.Minute
	}
	// The hold starts inside the call that takes it, between start and end.
	start := time.Now()
	b, err := q.DequeueBatch(ctx, crashQueue, mq.DequeueOptions{LockTimeout: lock, MaxMessages: 2})
	if err != nil || b == nil {
		t.Fatalf("DequeueBatch = %v, %v", b, err)
	}
	if scenario == scenarioDelay {
		start = time.Now()
		if err := q.Abandon(ctx, b.Token, mq.AbandonOptions{Delay: crashHold, Reason: "about to crash"}); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now()
	fmt.Printf("%s %s %d %d\n", heldLine, strings.Join(payloads(b), ","), start.Add(crashHold).UnixNano(), end.Add(crashHold).UnixNano())
	time.Sleep(time.Minute) // until the parent kills the process
	t.Fatal("the parent did not kill the child")
}
