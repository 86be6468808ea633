package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// recordedRun is testdata/replay's whole run of referenceOrchestration, ended as the
// runtime records it.
func recordedRun(t *testing.T) []provider.Event {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "replay", "03-whole-run-completes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ History []provider.Event }
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	return append(c.History, provider.Event{Kind: provider.EventOrchestrationCompleted, EventID: uint64(len(c.History)) + 1,
		Output: "done:rb:yes"})
}

func registryWith(t *testing.T, fn runtime.Orchestration) *runtime.Registry {
	t.Helper()
	reg := runtime.NewRegistry()
	if err := reg.RegisterOrchestration("Reference", fn); err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestReplayFlagsChangedCode replays recorded histories against the recorded code and
// against changed code: nil for the same code, ErrNondeterminism naming the
// difference for a change that would break a running instance or alter how an ended
// one ended.
func TestReplayFlagsChangedCode(t *testing.T) {
	full := recordedRun(t)
	running := full[:8] // B scheduled, its completion not yet recorded
	cases := []struct {
		name    string
		history []provider.Event
		code    runtime.Orchestration
		want    error  // nil: replay agrees
		mention string // a phrase the error must contain
	}{
		{"same code, ended run", full, referenceOrchestration, nil, ""},
		{"same code, running", running, referenceOrchestration, nil, ""},
		{"activity renamed", full, func(ctx *runtime.Context, in string) (string, error) {
			a, _ := ctx.ScheduleActivity("A2", in).Get()
			return a, nil
		}, runtime.ErrNondeterminism, `"A2"`},
		{"different output", full, func(ctx *runtime.Context, in string) (string, error) {
			out, err := referenceOrchestration(ctx, in)
			return strings.ToUpper(out), err
		}, runtime.ErrNondeterminism, `"DONE:RB:YES"`},
		{"one more step before the end", full, func(ctx *runtime.Context, in string) (string, error) {
			out, err := referenceOrchestration(ctx, in)
			if err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Audit", out).Get()
		}, runtime.ErrNondeterminism, "ActivityScheduled where history recorded OrchestrationCompleted"},
		{"a decision the running instance did not take", running, func(ctx *runtime.Context, in string) (string, error) {
			a, _ := ctx.ScheduleActivity("A", in).Get()
			ctx.CreateTimer(time.Second).Get()
			ok, _ := ctx.WaitForEvent("approve").Get()
			b := ctx.ScheduleActivity("B", a)
			ctx.ScheduleActivity("Extra", a) // now started beside B
			r, err := b.Get()
			return r + ok, err
		}, runtime.ErrNondeterminism, `ActivityScheduled "Extra"`},
		{"fails where it completed", full, func(ctx *runtime.Context, in string) (string, error) {
			if _, err := referenceOrchestration(ctx, in); err != nil {
				return "", err
			}
			return "", errors.New("refused")
		}, runtime.ErrNondeterminism, "OrchestrationFailed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := runtime.Replay(t.Context(), registryWith(t, c.code), c.history)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Replay of the recorded code: %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Replay = %v; want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("Replay error %q does not mention %s", err, c.mention)
			}
		})
	}
}

// TestReplayRejectsWhatCannotBeReplayed: histories that are not an execution's, code
// that is not registered, and code that blocks end with a clear error, not a hang.
func TestReplayRejectsWhatCannotBeReplayed(t *testing.T) {
	full := recordedRun(t)
	reg := registryWith(t, referenceOrchestration)
	for _, c := range []struct {
		name    string
		reg     *runtime.Registry
		history []provider.Event
		want    error
	}{
		{"empty", reg, nil, provider.ErrInvalid},
		{"without its start", reg, full[1:], provider.ErrInvalid},
		{"events after the end", reg, append(append([]provider.Event{}, full...), full[1]), provider.ErrInvalid},
		{"orchestration not registered", runtime.NewRegistry(), full, provider.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := runtime.Replay(t.Context(), c.reg, c.history); !errors.Is(err, c.want) {
				t.Fatalf("Replay = %v; want %v", err, c.want)
			}
		})
	}
	t.Run("code that blocks", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		blocking := registryWith(t, func(*runtime.Context, string) (string, error) { <-release; return "", nil })
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := runtime.Replay(ctx, blocking, full); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Replay of blocking code = %v; want the context's deadline", err)
		}
	})
}
