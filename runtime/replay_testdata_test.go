package runtime_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// replayCase is one file of testdata/replay: a hand-built (or deliberately broken)
// history of the Reference orchestration and what replaying it must decide.
type replayCase struct {
	About    string              `json:"about"`
	History  []provider.Event    `json:"history"`
	Messages []provider.WorkItem `json:"messages"`
	Want     struct {
		Status            string   `json:"status"`
		Output            string   `json:"output"`
		NewEvents         []string `json:"new_events"`   // kinds, in order; nil: not checked
		WorkerItems       []string `json:"worker_items"` // activity names; nil: not checked
		FailureKind       string   `json:"failure_kind"`
		FailureConfigKind string   `json:"failure_config_kind"`
		FailureContains   string   `json:"failure_contains"`
	} `json:"want"`
}

// referenceOrchestration is the code the testdata histories were recorded against:
// activity A, a one-second timer, the event "approve", activity B.
func referenceOrchestration(ctx *runtime.Context, in string) (string, error) {
	a, err := ctx.ScheduleActivity("A", in).Get()
	if err != nil {
		return "", err
	}
	if _, err := ctx.CreateTimer(time.Second).Get(); err != nil {
		return "", err
	}
	approval, err := ctx.WaitForEvent("approve").Get()
	if err != nil {
		return "", err
	}
	b, err := ctx.ScheduleActivity("B", a).Get()
	if err != nil {
		return "", err
	}
	return "done:" + b + ":" + approval, nil
}

// TestReplayOfRecordedHistories replays every history in testdata/replay against
// referenceOrchestration: the right next decision for good histories, a failure with
// its reason (never a panic) for changed code and corrupted histories.
func TestReplayOfRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "replay", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no histories in testdata/replay (%v)", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var c replayCase
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			res := runtime.RunTurn(runtime.Turn{Instance: "recorded", ExecutionID: 1, History: c.History, Messages: c.Messages,
				Now: time.UnixMilli(1_700_000_010_000)}, referenceOrchestration)
			w := c.Want
			if res.Status != w.Status {
				t.Fatalf("%s\nstatus %s (failure %+v); want %s", c.About, res.Status, res.Failure, w.Status)
			}
			if w.Output != "" && res.Output != w.Output {
				t.Errorf("output %q; want %q", res.Output, w.Output)
			}
			if w.NewEvents != nil {
				var got []string
				for _, e := range res.NewEvents {
					got = append(got, string(e.Kind))
				}
				if !slices.Equal(got, w.NewEvents) {
					t.Errorf("new events %v; want %v", got, w.NewEvents)
				}
			}
			if w.WorkerItems != nil {
				var got []string
				for _, item := range res.WorkerItems {
					got = append(got, item.Name)
				}
				if !slices.Equal(got, w.WorkerItems) {
					t.Errorf("scheduled activities %v; want %v", got, w.WorkerItems)
				}
			}
			if res.Status != provider.StatusFailed {
				return
			}
			f := res.Failure
			if f == nil || f.Message == "" {
				t.Fatalf("failed without saying why: %+v", f)
			}
			if w.FailureKind != "" && string(f.Kind) != w.FailureKind {
				t.Errorf("failure kind %s (%+v); want %s", f.Kind, f, w.FailureKind)
			}
			if w.FailureConfigKind != "" && f.ConfigKind != w.FailureConfigKind {
				t.Errorf("failure config kind %q (%+v); want %q", f.ConfigKind, f, w.FailureConfigKind)
			}
			if w.FailureContains != "" && !strings.Contains(f.Message, w.FailureContains) {
				t.Errorf("failure message %q; want it to mention %q", f.Message, w.FailureContains)
			}
		})
	}
}
