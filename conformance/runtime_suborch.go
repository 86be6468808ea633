package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

func init() {
	registerRuntimeGroup(runtimeGroup{name: "SubOrchestrations", cases: []runtimeCase{
		{"Basic", rtSubBasic},
		{"FanOut", rtSubFanOut},
		{"Chained", rtSubChained},
		{"ExplicitInstanceID", rtSubExplicitInstanceID},
		{"VersionedChild", rtSubVersionedChild},
		{"ChildFailureIsHandledByParent", rtSubChildFailureHandled},
		{"UnhandledChildFailureFailsParent", rtSubChildFailureUnhandled},
		{"DetachedStart", rtSubDetachedStart},
		{"DetachedStartWhenParentCompletesSameTurn", rtSubDetachedSameTurn},
		{"AutoIDsUniqueAcrossContinueAsNew", rtSubAutoIDsAcrossCAN},
		{"ExplicitIDCollidesWithRunningInstance", rtSubCollisionRunning},
		{"ExplicitIDCollidesWithCompletedInstance", rtSubCollisionCompleted},
		{"CancelParentCascadesToChildren", rtSubCancelParentCascades},
		{"CancelChildDirectlySignalsParent", rtSubCancelChildDirectly},
		{"SelectLoserChildIsCancelled", rtSubSelectLoserCancelled},
		{"ParentEndingCancelsUnawaitedChild", rtSubParentEndCancelsChild},
		{"ChildContinueAsNewDeliversFinalResult", rtSubChildContinueAsNew},
	}})
}

// subAdmin returns the management API, or nil (logged) when the provider has none.
func subAdmin(t *testing.T, r *rig) provider.ProviderAdmin {
	t.Helper()
	a, err := r.C.Admin()
	if errors.Is(err, runtime.ErrManagementUnavailable) {
		t.Logf("provider has no management API: parent/child admin checks skipped")
		return nil
	}
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	return a
}

// subFind returns the events of kind k.
func subFind(evs []provider.Event, k provider.EventKind) []provider.Event {
	var out []provider.Event
	for _, e := range evs {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// subStarted returns the OrchestrationStarted event of an execution's history.
func subStarted(t *testing.T, evs []provider.Event) provider.Event {
	t.Helper()
	if len(evs) == 0 || evs[0].Kind != provider.EventOrchestrationStarted {
		t.Fatalf("history does not start with OrchestrationStarted: %+v", evs)
	}
	return evs[0]
}

// subParentLink asserts the parent link recorded in a child's OrchestrationStarted.
func subParentLink(t *testing.T, evs []provider.Event, parent string, parentID, parentExec uint64) {
	t.Helper()
	s := subStarted(t, evs)
	if s.ParentInstance != parent || s.ParentID != parentID || s.ParentExecutionID != parentExec {
		t.Fatalf("child started with parent %q id %d execution %d, want %q id %d execution %d",
			s.ParentInstance, s.ParentID, s.ParentExecutionID, parent, parentID, parentExec)
	}
}

// subCancelled asserts st failed as cancelled, with reason when reason is not empty.
func subCancelled(t *testing.T, what string, st runtime.OrchestrationStatus, reason string) {
	t.Helper()
	if st.State != runtime.StateFailed || st.Failure == nil {
		t.Fatalf("%s: status %s output %q, want Failed (cancelled)", what, st.State, st.Output)
	}
	d := st.Failure
	if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppCancelled || (reason != "" && d.Reason != reason) {
		t.Fatalf("%s: failure %+v, want Application/Cancelled reason %q", what, d, reason)
	}
}

// subWaitSubscribed waits until instance has run the turn that subscribes to an
// external event (so it is running and parked).
func subWaitSubscribed(t *testing.T, r *rig, instance string) {
	t.Helper()
	eventually(t, instance+" to subscribe to its event", func() bool {
		return countKind(r.history(instance), provider.EventExternalSubscribed) > 0
	})
}

// subChildren lists instance's children through the admin API, sorted.
func subChildren(t *testing.T, a provider.ProviderAdmin, instance string) []string {
	t.Helper()
	ids, err := a.ListChildren(context.Background(), instance)
	if err != nil {
		t.Fatalf("list children of %s: %v", instance, err)
	}
	slices.Sort(ids)
	return ids
}

// subParent reads instance's parent through the admin API.
func subParent(t *testing.T, a provider.ProviderAdmin, instance string) string {
	t.Helper()
	p, err := a.GetParentID(context.Background(), instance)
	if err != nil {
		t.Fatalf("parent of %s: %v", instance, err)
	}
	return p
}

// subWaitingChild is a child that parks on an event nobody raises.
func subWaitingChild(ctx *runtime.Context, _ string) (string, error) {
	if _, err := ctx.WaitForEvent("NeverComes").Get(); err != nil {
		return "", err
	}
	return "child_completed", nil
}

// Port of e2e_samples.rs sample_sub_orchestration_basic_fs, plus the parent link in
// the child's history and the admin view of it.
func rtSubBasic(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Upper", func(_ *runtime.ActivityContext, in string) (string, error) { return strings.ToUpper(in), nil }).
		orch("ChildUpper", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Upper", in).Get()
		}).
		orch("Parent", func(ctx *runtime.Context, in string) (string, error) {
			v, err := ctx.ScheduleSubOrchestration("ChildUpper", in).Get()
			if err != nil {
				return "", err
			}
			return "parent:" + v, nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-sub-basic", "Parent", "hi"), "parent:HI")

	// The default child id is {parent}::sub::{scheduling event id}.
	const child = "inst-sub-basic::sub::2"
	cst := r.wait(child)
	completed(t, cst, "HI")
	if cst.Name != "ChildUpper" || cst.Version != runtime.DefaultVersion || cst.ExecutionID != 1 {
		t.Fatalf("child status name %q version %q execution %d", cst.Name, cst.Version, cst.ExecutionID)
	}

	ph := r.history("inst-sub-basic")
	want := []provider.EventKind{provider.EventOrchestrationStarted, provider.EventSubOrchestrationScheduled,
		provider.EventSubOrchestrationCompleted, provider.EventOrchestrationCompleted}
	if len(ph) != len(want) {
		t.Fatalf("parent history has %d events, want %d: %+v", len(ph), len(want), ph)
	}
	for i, k := range want {
		if ph[i].Kind != k {
			t.Fatalf("parent event %d is %s, want %s", i, ph[i].Kind, k)
		}
	}
	if s := ph[1]; s.EventID != 2 || s.Name != "ChildUpper" || s.Instance != child || s.Input != "hi" {
		t.Fatalf("SubOrchestrationScheduled %+v", s)
	}
	if c := ph[2]; c.SourceEventID != 2 || c.Result != "HI" {
		t.Fatalf("SubOrchestrationCompleted %+v", c)
	}

	ch := r.history(child)
	subParentLink(t, ch, "inst-sub-basic", 2, 1)
	if s := ch[0]; s.Name != "ChildUpper" || s.Input != "hi" {
		t.Fatalf("child OrchestrationStarted %+v", s)
	}

	if a := subAdmin(t, r); a != nil {
		if p := subParent(t, a, child); p != "inst-sub-basic" {
			t.Fatalf("GetParentID(child) = %q", p)
		}
		if p := subParent(t, a, "inst-sub-basic"); p != "" {
			t.Fatalf("GetParentID(root) = %q, want none", p)
		}
		if got := subChildren(t, a, "inst-sub-basic"); !slices.Equal(got, []string{child}) {
			t.Fatalf("ListChildren(root) = %q, want [%s]", got, child)
		}
		if got := subChildren(t, a, child); len(got) != 0 {
			t.Fatalf("ListChildren(child) = %q, want none", got)
		}
		info, err := a.GetInstanceInfo(context.Background(), child)
		if err != nil || info.ParentInstanceID != "inst-sub-basic" || info.OrchestrationName != "ChildUpper" {
			t.Fatalf("GetInstanceInfo(child) = %+v, %v", info, err)
		}
	}
}

// Port of e2e_samples.rs sample_sub_orchestration_fanout_fs (five children instead
// of two).
func rtSubFanOut(t *testing.T, e renv) {
	r := e.rig(t)
	const n = 5
	reg := newRegistry(t).
		act("Add", func(_ *runtime.ActivityContext, in string) (string, error) {
			a, b, _ := strings.Cut(in, ",")
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(b)
			return strconv.Itoa(x + y), errors.Join(err1, err2)
		}).
		orch("ChildSum", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("Add", in).Get()
		}).
		orch("ParentFan", func(ctx *runtime.Context, _ string) (string, error) {
			fs := make([]*runtime.Future, n)
			for i := range fs {
				fs[i] = ctx.ScheduleSubOrchestration("ChildSum", fmt.Sprintf("%d,%d", i, i+1))
			}
			total := 0
			for i, err := range ctx.Join(fs...) {
				if err != nil {
					return "", err
				}
				v, _ := fs[i].Get()
				x, err := strconv.Atoi(v)
				if err != nil {
					return "", err
				}
				total += x
			}
			return fmt.Sprintf("total=%d", total), nil
		})
	r.startFast(reg.Registry, func(o *runtime.Options) { o.OrchestrationConcurrency = 4 })
	completed(t, r.run("inst-sub-fan", "ParentFan", ""), "total=25") // sum of 2i+1 for i < 5

	ph := r.history("inst-sub-fan")
	scheduled := subFind(ph, provider.EventSubOrchestrationScheduled)
	if len(scheduled) != n || countKind(ph, provider.EventSubOrchestrationCompleted) != n {
		t.Fatalf("parent history: %d scheduled, %d completed, want %d each", len(scheduled),
			countKind(ph, provider.EventSubOrchestrationCompleted), n)
	}
	var ids []string
	for i, s := range scheduled {
		want := fmt.Sprintf("inst-sub-fan::sub::%d", s.EventID)
		if s.Instance != want {
			t.Fatalf("child %d has id %q, want %q", i, s.Instance, want)
		}
		ids = append(ids, s.Instance)
		completed(t, r.wait(s.Instance), strconv.Itoa(2*i+1))
		subParentLink(t, r.history(s.Instance), "inst-sub-fan", s.EventID, 1)
	}
	if a := subAdmin(t, r); a != nil {
		slices.Sort(ids)
		if got := subChildren(t, a, "inst-sub-fan"); !slices.Equal(got, ids) {
			t.Fatalf("ListChildren = %q, want %q", got, ids)
		}
	}
}

// Port of e2e_samples.rs sample_sub_orchestration_chained_fs: root -> mid -> leaf.
func rtSubChained(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("AppendX", func(_ *runtime.ActivityContext, in string) (string, error) { return in + "x", nil }).
		orch("Leaf", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleActivity("AppendX", in).Get()
		}).
		orch("Mid", func(ctx *runtime.Context, in string) (string, error) {
			v, err := ctx.ScheduleSubOrchestration("Leaf", in).Get()
			return v + "-mid", err
		}).
		orch("Root", func(ctx *runtime.Context, in string) (string, error) {
			v, err := ctx.ScheduleSubOrchestration("Mid", in).Get()
			return "root:" + v, err
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-sub-chain", "Root", "a"), "root:ax-mid")

	const mid, leaf = "inst-sub-chain::sub::2", "inst-sub-chain::sub::2::sub::2"
	completed(t, r.wait(mid), "ax-mid")
	completed(t, r.wait(leaf), "ax")
	subParentLink(t, r.history(mid), "inst-sub-chain", 2, 1)
	subParentLink(t, r.history(leaf), mid, 2, 1)

	if a := subAdmin(t, r); a != nil {
		if p := subParent(t, a, leaf); p != mid {
			t.Fatalf("GetParentID(leaf) = %q, want %q", p, mid)
		}
		if got := subChildren(t, a, mid); !slices.Equal(got, []string{leaf}) {
			t.Fatalf("ListChildren(mid) = %q", got)
		}
		tree, err := a.GetInstanceTree(context.Background(), "inst-sub-chain")
		if err != nil {
			t.Fatalf("GetInstanceTree: %v", err)
		}
		if len(tree.AllIDs) != 3 || tree.AllIDs[0] != "inst-sub-chain" || !slices.Contains(tree.AllIDs, mid) || !slices.Contains(tree.AllIDs, leaf) {
			t.Fatalf("instance tree %+v, want the root first then %s and %s", tree, mid, leaf)
		}
	}
}

// Port of cancellation_tests.rs select2_loser_sub_orchestration_explicit_id_cancelled
// (its id part): an explicit child id is used verbatim, with the parent link.
func rtSubExplicitInstanceID(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Named", func(ctx *runtime.Context, in string) (string, error) { return ctx.InstanceID() + ":" + in, nil }).
		orch("Parent", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleSubOrchestration("Named", in, runtime.WithInstanceID("my-explicit-child")).Get()
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-explicit", "Parent", "p"), "my-explicit-child:p")
	completed(t, r.wait("my-explicit-child"), "my-explicit-child:p")
	subParentLink(t, r.history("my-explicit-child"), "inst-explicit", 2, 1)
	if s := subFind(r.history("inst-explicit"), provider.EventSubOrchestrationScheduled); len(s) != 1 || s[0].Instance != "my-explicit-child" {
		t.Fatalf("parent recorded %+v, want one child my-explicit-child", s)
	}
	if st, err := r.C.Status(context.Background(), "inst-explicit::sub::2"); err != nil || st.State != runtime.StateNotFound {
		t.Fatalf("an auto-named child exists as well: %+v, %v", st, err)
	}
	if a := subAdmin(t, r); a != nil {
		if got := subChildren(t, a, "inst-explicit"); !slices.Equal(got, []string{"my-explicit-child"}) {
			t.Fatalf("ListChildren = %q", got)
		}
		if p := subParent(t, a, "my-explicit-child"); p != "inst-explicit" {
			t.Fatalf("GetParentID = %q", p)
		}
	}
}

// Port of e2e_samples.rs sample_versioning_sub_orchestration_explicit_vs_policy_fs and
// versioning_tests.rs sub_orchestration_versioned_explicit_and_policy /
// sub_orchestration_uses_latest_by_default_and_pinned_when_set.
func rtSubVersionedChild(t *testing.T, e renv) {
	build := func() registry {
		return newRegistry(t).
			orchV("Child", "1.0.0", func(ctx *runtime.Context, in string) (string, error) { return "c1@" + ctx.Version(), nil }).
			orchV("Child", "2.0.0", func(ctx *runtime.Context, in string) (string, error) { return "c2@" + ctx.Version(), nil }).
			orch("ParentVers", func(ctx *runtime.Context, _ string) (string, error) {
				a, err := ctx.ScheduleSubOrchestration("Child", "exp", runtime.WithVersion("1.0.0")).Get()
				if err != nil {
					return "", err
				}
				b, err := ctx.ScheduleSubOrchestration("Child", "pol").Get()
				if err != nil {
					return "", err
				}
				c, err := ctx.ScheduleSubOrchestration("Child", "exp2", runtime.WithVersion("2.0.0")).Get()
				return a + "|" + b + "|" + c, err
			})
	}

	// Default policy (latest): the unversioned call runs 2.0.0.
	r := e.rig(t)
	r.startFast(build().Registry)
	completed(t, r.run("inst-sub-vers", "ParentVers", ""), "c1@1.0.0|c2@2.0.0|c2@2.0.0")
	sched := subFind(r.history("inst-sub-vers"), provider.EventSubOrchestrationScheduled)
	if len(sched) != 3 {
		t.Fatalf("%d children scheduled, want 3", len(sched))
	}
	for i, want := range []string{"1.0.0", "2.0.0", "2.0.0"} {
		st := r.wait(sched[i].Instance)
		if st.State != runtime.StateCompleted || st.Version != want || st.Name != "Child" {
			t.Fatalf("child %s: %s %s@%s, want Completed Child@%s", sched[i].Instance, st.State, st.Name, st.Version, want)
		}
		if v := subStarted(t, r.history(sched[i].Instance)).Version; v != want {
			t.Fatalf("child %s history records version %q, want %q", sched[i].Instance, v, want)
		}
	}

	// Policy pinned to 1.0.0: the unversioned call follows it, explicit versions win.
	r2 := e.rig(t)
	reg2 := build()
	if err := reg2.SetVersionPolicy("Child", runtime.VersionPolicy{Exact: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	r2.startFast(reg2.Registry)
	completed(t, r2.run("inst-sub-pinned", "ParentVers", ""), "c1@1.0.0|c1@1.0.0|c2@2.0.0")
}

// Port of the replay-engine case failure_handling.rs sub_orch_app_error_propagates
// end to end (and e2e_samples.rs sample_error_handling_fs's compensation pattern
// with a child): the failure reaches the parent as a *SubOrchestrationError with
// the child's details, and the parent recovers.
func rtSubChildFailureHandled(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Compensate", func(_ *runtime.ActivityContext, in string) (string, error) { return "compensated " + in, nil }).
		orch("FailingChild", func(ctx *runtime.Context, in string) (string, error) {
			return "", errors.New("child exploded on " + in)
		}).
		orch("PanickyChild", func(ctx *runtime.Context, in string) (string, error) { panic("child panic " + in) }).
		orch("Parent", func(ctx *runtime.Context, in string) (string, error) {
			f1 := ctx.ScheduleSubOrchestration("FailingChild", in)
			f2 := ctx.ScheduleSubOrchestration("PanickyChild", in)
			var parts []string
			for i, err := range ctx.Join(f1, f2) {
				var se *runtime.SubOrchestrationError
				if !errors.As(err, &se) || se.Details == nil {
					return "", fmt.Errorf("child %d: want a *SubOrchestrationError, got %T %v", i, err, err)
				}
				if want := fmt.Sprintf("%s::sub::%d", ctx.InstanceID(), i+2); se.Instance != want {
					return "", fmt.Errorf("child %d: error names instance %q, want %q", i, se.Instance, want)
				}
				if se.Details.Kind != provider.ErrorApplication {
					return "", fmt.Errorf("child %d: details kind %s", i, se.Details.Kind)
				}
				parts = append(parts, se.Details.AppKind+":"+se.Details.Message)
			}
			c, err := ctx.ScheduleActivity("Compensate", in).Get()
			return strings.Join(parts, "|") + "|" + c, err
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-sub-fail", "Parent", "x"),
		"OrchestrationFailed:child exploded on x|Panicked:child panic x|compensated x")

	d := failed(t, r.wait("inst-sub-fail::sub::2"))
	if d.AppKind != provider.AppOrchestrationFailed || d.Message != "child exploded on x" {
		t.Fatalf("failing child's failure %+v", d)
	}
	if d := failed(t, r.wait("inst-sub-fail::sub::3")); d.AppKind != provider.AppPanicked {
		t.Fatalf("panicking child's failure %+v", d)
	}
	ph := r.history("inst-sub-fail")
	fails := subFind(ph, provider.EventSubOrchestrationFailed)
	if len(fails) != 2 {
		t.Fatalf("parent history has %d SubOrchestrationFailed, want 2", len(fails))
	}
	for _, f := range fails {
		if (f.SourceEventID != 2 && f.SourceEventID != 3) || f.Details == nil {
			t.Fatalf("SubOrchestrationFailed %+v", f)
		}
		if f.SourceEventID == 2 && f.Details.Message != "child exploded on x" {
			t.Fatalf("SubOrchestrationFailed for event 2 carries %+v", f.Details)
		}
	}
}

// A child failure the parent does not handle fails the parent with the child's
// message (e2e_samples.rs sample_sub_orchestration_basic_fs's error arm).
func rtSubChildFailureUnhandled(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("FailingChild", func(ctx *runtime.Context, in string) (string, error) { return "", errors.New("disk full") }).
		orch("Parent", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleSubOrchestration("FailingChild", in).Get()
		}).
		orch("GrandParent", func(ctx *runtime.Context, in string) (string, error) {
			return ctx.ScheduleSubOrchestration("Parent", in).Get()
		})
	r.startFast(reg.Registry)
	d := failed(t, r.run("inst-unhandled", "GrandParent", ""))
	if d.Kind != provider.ErrorApplication || d.AppKind != provider.AppOrchestrationFailed || !strings.Contains(d.Message, "disk full") {
		t.Fatalf("grandparent failure %+v", d)
	}
	// The failure travelled up two levels, each naming the child that failed.
	if !strings.Contains(d.Message, "inst-unhandled::sub::2") {
		t.Fatalf("grandparent failure %q does not name the failed child", d.Message)
	}
	md := failed(t, r.wait("inst-unhandled::sub::2"))
	if !strings.Contains(md.Message, "inst-unhandled::sub::2::sub::2") || !strings.Contains(md.Message, "disk full") {
		t.Fatalf("middle failure %+v", md)
	}
	if ld := failed(t, r.wait("inst-unhandled::sub::2::sub::2")); ld.Message != "disk full" {
		t.Fatalf("leaf failure %+v", ld)
	}
}

// Port of e2e_samples.rs sample_detached_orchestration_scheduling_fs and
// sample_detached_then_activity_fs: detached starts are independent roots, recorded
// in history so later decisions replay.
func rtSubDetachedStart(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Echo", echo).
		orch("Chained", func(ctx *runtime.Context, in string) (string, error) {
			if _, err := ctx.CreateTimer(5 * time.Millisecond).Get(); err != nil {
				return "", err
			}
			return ctx.ScheduleActivity("Echo", in).Get()
		}).
		orch("Coordinator", func(ctx *runtime.Context, _ string) (string, error) {
			ctx.StartOrchestration("Chained", "W1", "A")
			ctx.StartOrchestration("Chained", "W2", "B")
			return ctx.ScheduleActivity("Echo", "hello").Get()
		})
	r.startFast(reg.Registry)
	completed(t, r.run("CoordinatorRoot", "Coordinator", ""), "hello")
	completed(t, r.wait("W1"), "A")
	completed(t, r.wait("W2"), "B")

	ph := r.history("CoordinatorRoot")
	chained := subFind(ph, provider.EventOrchestrationChained)
	if len(chained) != 2 || chained[0].Instance != "W1" || chained[1].Instance != "W2" || chained[0].Name != "Chained" || chained[1].Input != "B" {
		t.Fatalf("OrchestrationChained events %+v", chained)
	}
	if n := countKind(ph, provider.EventSubOrchestrationScheduled) + countKind(ph, provider.EventSubOrchestrationCompleted); n != 0 {
		t.Fatalf("detached starts recorded %d sub-orchestration events", n)
	}
	for _, w := range []string{"W1", "W2"} {
		subParentLink(t, r.history(w), "", 0, 0)
	}
	if a := subAdmin(t, r); a != nil {
		if got := subChildren(t, a, "CoordinatorRoot"); len(got) != 0 {
			t.Fatalf("ListChildren(coordinator) = %q, want none", got)
		}
		if p := subParent(t, a, "W1"); p != "" {
			t.Fatalf("GetParentID(W1) = %q, want none", p)
		}
	}
}

// A detached start decided in the turn that completes the parent still happens;
// without a version it follows the registry policy, WithVersion picks one
// (versioning_tests.rs detached_versioned_uses_policy_latest).
func rtSubDetachedSameTurn(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orchV("Leaf", "1.0.0", func(ctx *runtime.Context, in string) (string, error) { return "l1:" + in, nil }).
		orchV("Leaf", "2.0.0", func(ctx *runtime.Context, in string) (string, error) { return "l2:" + in, nil }).
		orch("Parent", func(ctx *runtime.Context, _ string) (string, error) {
			ctx.StartOrchestration("Leaf", "d-latest", "a")
			ctx.StartOrchestration("Leaf", "d-v1", "b", runtime.WithVersion("1.0.0"))
			return "ok", nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-detach-end", "Parent", ""), "ok")
	ph := r.history("inst-detach-end")
	want := []provider.EventKind{provider.EventOrchestrationStarted, provider.EventOrchestrationChained,
		provider.EventOrchestrationChained, provider.EventOrchestrationCompleted}
	if len(ph) != len(want) {
		t.Fatalf("parent history %+v, want %v", ph, want)
	}
	for i, k := range want {
		if ph[i].Kind != k {
			t.Fatalf("parent event %d is %s, want %s", i, ph[i].Kind, k)
		}
	}
	st := r.wait("d-latest")
	completed(t, st, "l2:a")
	if st.Version != "2.0.0" {
		t.Fatalf("d-latest ran version %q, want 2.0.0", st.Version)
	}
	st = r.wait("d-v1")
	completed(t, st, "l1:b")
	if st.Version != "1.0.0" {
		t.Fatalf("d-v1 ran version %q, want 1.0.0", st.Version)
	}
	subParentLink(t, r.history("d-latest"), "", 0, 0)
	subParentLink(t, r.history("d-v1"), "", 0, 0)
}

// duroxide issue #32 (fixed by PR #28): auto child ids derived from event ids must
// not repeat across continue-as-new generations (event ids restart per execution);
// issue #30: each child's completion must reach the execution that started it.
func rtSubAutoIDsAcrossCAN(t *testing.T, e renv) {
	r := e.rig(t)
	const generations = 3
	reg := newRegistry(t).
		orch("WhoAmI", func(ctx *runtime.Context, in string) (string, error) { return ctx.InstanceID(), nil }).
		orch("Gen", func(ctx *runtime.Context, in string) (string, error) {
			n, ids, _ := strings.Cut(in, "|")
			gen, err := strconv.Atoi(n)
			if err != nil {
				return "", err
			}
			id, err := ctx.ScheduleSubOrchestration("WhoAmI", n).Get()
			if err != nil {
				return "", err
			}
			if ids != "" {
				ids += ","
			}
			ids += id
			if gen < generations {
				return "", ctx.ContinueAsNew(fmt.Sprintf("%d|%s", gen+1, ids))
			}
			return ids, nil
		})
	r.startFast(reg.Registry)
	st := r.run("inst-can-subs", "Gen", "1|")
	if st.State != runtime.StateCompleted || st.ExecutionID != generations {
		t.Fatalf("parent %s at execution %d (output %q, failure %s), want Completed at execution %d",
			st.State, st.ExecutionID, st.Output, st.Failure.DisplayMessage(), generations)
	}
	ids := strings.Split(st.Output, ",")
	if len(ids) != generations || ids[0] != "inst-can-subs::sub::2" {
		t.Fatalf("children %q, want %d with the first inst-can-subs::sub::2", ids, generations)
	}
	seen := map[string]bool{}
	for g, id := range ids {
		if seen[id] || !strings.HasPrefix(id, "inst-can-subs::") {
			t.Fatalf("child ids %q are not distinct children of the parent", ids)
		}
		seen[id] = true
		completed(t, r.wait(id), id)
		subParentLink(t, r.history(id), "inst-can-subs", 2, uint64(g+1))
	}
	if a := subAdmin(t, r); a != nil {
		want := slices.Clone(ids)
		slices.Sort(want)
		if got := subChildren(t, a, "inst-can-subs"); !slices.Equal(got, want) {
			t.Fatalf("ListChildren = %q, want %q", got, want)
		}
	}
}

// duroxide issue #40: an explicit child id that names a running instance (not
// started by this parent) must fail the parent's future at once instead of hanging
// it, and leave the running instance alone.
func rtSubCollisionRunning(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Busy", func(ctx *runtime.Context, in string) (string, error) {
			v, err := ctx.WaitForEvent("Go").Get()
			return "busy:" + v, err
		}).
		orch("Grabber", func(ctx *runtime.Context, _ string) (string, error) {
			_, err := ctx.ScheduleSubOrchestration("Busy", "stolen", runtime.WithInstanceID("busy")).Get()
			var se *runtime.SubOrchestrationError
			if !errors.As(err, &se) || se.Details == nil {
				return "", fmt.Errorf("want a *SubOrchestrationError for the colliding child, got %T %v", err, err)
			}
			return "told:" + se.Instance + ":" + se.Details.Message, nil
		})
	r.startFast(reg.Registry)
	r.startOrch("busy", "Busy", "")
	subWaitSubscribed(t, r, "busy")
	before := len(r.history("busy"))

	st := r.run("grabber", "Grabber", "")
	if st.State != runtime.StateCompleted || !strings.HasPrefix(st.Output, "told:busy:") || !strings.Contains(st.Output, "already exists") {
		t.Fatalf("grabber: %s %q (failure %s), want it told that busy already exists", st.State, st.Output, st.Failure.DisplayMessage())
	}
	// The running instance is untouched: same history, no parent, still waiting.
	bh := r.history("busy")
	if len(bh) != before {
		t.Fatalf("the colliding start changed busy's history: %d events, had %d: %+v", len(bh), before, bh)
	}
	subParentLink(t, bh, "", 0, 0)
	if bs, err := r.C.Status(context.Background(), "busy"); err != nil || bs.State != runtime.StateRunning {
		t.Fatalf("busy after the collision: %+v, %v", bs, err)
	}
	if err := r.C.RaiseEvent(context.Background(), "busy", "Go", "go"); err != nil {
		t.Fatal(err)
	}
	completed(t, r.wait("busy"), "busy:go")
	if a := subAdmin(t, r); a != nil {
		if got := subChildren(t, a, "grabber"); len(got) != 0 {
			t.Fatalf("ListChildren(grabber) = %q, want none", got)
		}
	}
}

// duroxide issue #40 (terminal collisions): an explicit child id that names an
// instance that already completed — another parent's child or a client-started
// root — fails the new parent's future; the old instance keeps its result.
func rtSubCollisionCompleted(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("Child", func(ctx *runtime.Context, in string) (string, error) { return "child-of:" + in, nil }).
		orch("Claimer", func(ctx *runtime.Context, id string) (string, error) {
			v, err := ctx.ScheduleSubOrchestration("Child", ctx.InstanceID(), runtime.WithInstanceID(id)).Get()
			if err == nil {
				return "got:" + v, nil
			}
			var se *runtime.SubOrchestrationError
			if !errors.As(err, &se) || se.Details == nil {
				return "", fmt.Errorf("want a *SubOrchestrationError, got %T %v", err, err)
			}
			return "told:" + se.Instance + ":" + se.Details.Message, nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("first", "Claimer", "shared"), "got:child-of:first")
	sharedLen := len(r.history("shared"))

	st := r.run("second", "Claimer", "shared")
	if st.State != runtime.StateCompleted || !strings.HasPrefix(st.Output, "told:shared:") || !strings.Contains(st.Output, "already exists") {
		t.Fatalf("second: %s %q (failure %s), want it told that shared already exists", st.State, st.Output, st.Failure.DisplayMessage())
	}
	completed(t, r.wait("shared"), "child-of:first")
	sh := r.history("shared")
	if len(sh) != sharedLen {
		t.Fatalf("the colliding start changed shared's history: %+v", sh)
	}
	subParentLink(t, sh, "first", 2, 1)

	// A completed root started by a client collides the same way.
	completed(t, r.run("root-done", "Child", "client"), "child-of:client")
	st = r.run("third", "Claimer", "root-done")
	if st.State != runtime.StateCompleted || !strings.HasPrefix(st.Output, "told:root-done:") || !strings.Contains(st.Output, "already exists") {
		t.Fatalf("third: %s %q, want it told that root-done already exists", st.State, st.Output)
	}
	completed(t, r.wait("root-done"), "child-of:client")
	subParentLink(t, r.history("root-done"), "", 0, 0)

	if a := subAdmin(t, r); a != nil {
		if p := subParent(t, a, "shared"); p != "first" {
			t.Fatalf("GetParentID(shared) = %q, want first", p)
		}
		if got := subChildren(t, a, "second"); len(got) != 0 {
			t.Fatalf("ListChildren(second) = %q, want none", got)
		}
	}
}

// Port of cancellation_tests.rs cancel_parent_down_propagates_to_child,
// cancel_parent_with_multiple_children and e2e_samples.rs
// sample_cancellation_parent_cascades_to_children_fs.
func rtSubCancelParentCascades(t *testing.T, e renv) {
	r := e.rig(t)
	const n = 3
	reg := newRegistry(t).
		orch("Child", func(ctx *runtime.Context, _ string) (string, error) {
			_, err := ctx.WaitForEvent("Go").Get()
			return "done", err
		}).
		orch("Parent", func(ctx *runtime.Context, _ string) (string, error) {
			fs := make([]*runtime.Future, n)
			for i := range fs {
				fs[i] = ctx.ScheduleSubOrchestration("Child", strconv.Itoa(i))
			}
			for _, err := range ctx.Join(fs...) {
				if err != nil {
					return "", err
				}
			}
			return "parent_done", nil
		})
	r.startFast(reg.Registry)
	r.startOrch("inst-cancel", "Parent", "")
	children := make([]string, n)
	for i := range children {
		children[i] = fmt.Sprintf("inst-cancel::sub::%d", i+2)
		subWaitSubscribed(t, r, children[i])
	}
	if err := r.C.CancelInstance(context.Background(), "inst-cancel", "by_test"); err != nil {
		t.Fatal(err)
	}
	subCancelled(t, "parent", r.wait("inst-cancel"), "by_test")
	ph := r.history("inst-cancel")
	if c := subFind(ph, provider.EventOrchestrationCancelRequested); len(c) != 1 || c[0].Reason != "by_test" {
		t.Fatalf("parent cancel requests %+v", c)
	}
	for _, c := range children {
		subCancelled(t, c, r.wait(c), "parent canceled")
		if countKind(r.history(c), provider.EventOrchestrationCancelRequested) != 1 {
			t.Fatalf("child %s history has no OrchestrationCancelRequested: %+v", c, r.history(c))
		}
	}
	// The children's failures reach a parent that has ended: they change nothing.
	if a := subAdmin(t, r); a != nil {
		eventually(t, "the orchestrator queue to drain", func() bool {
			d, err := a.GetQueueDepths(context.Background())
			return err == nil && d.OrchestratorQueue == 0
		})
	}
	after := r.history("inst-cancel")
	if len(after) != len(ph) || after[len(after)-1].Kind != provider.EventOrchestrationFailed {
		t.Fatalf("parent history changed after it ended: %+v", after)
	}
	subCancelled(t, "parent", r.wait("inst-cancel"), "by_test")
}

// Port of cancellation_tests.rs cancel_child_directly_signals_parent.
func rtSubCancelChildDirectly(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("ChildD", subWaitingChild).
		orch("ParentD", func(ctx *runtime.Context, _ string) (string, error) {
			v, err := ctx.ScheduleSubOrchestration("ChildD", "x").Get()
			if err == nil {
				return "ok:" + v, nil
			}
			var se *runtime.SubOrchestrationError
			if !errors.As(err, &se) || se.Details == nil {
				return "", fmt.Errorf("want a *SubOrchestrationError, got %T %v", err, err)
			}
			return fmt.Sprintf("child_err:%s|%s|%s", se.Details.AppKind, se.Details.Reason, err), nil
		})
	r.startFast(reg.Registry)
	r.startOrch("inst-chdirect", "ParentD", "")
	const child = "inst-chdirect::sub::2"
	subWaitSubscribed(t, r, child)
	if err := r.C.CancelInstance(context.Background(), child, "by_test_child"); err != nil {
		t.Fatal(err)
	}
	st := r.wait("inst-chdirect")
	if st.State != runtime.StateCompleted || !strings.HasPrefix(st.Output, "child_err:Cancelled|by_test_child|") ||
		!strings.Contains(st.Output, "canceled: by_test_child") {
		t.Fatalf("parent: %s %q (failure %s)", st.State, st.Output, st.Failure.DisplayMessage())
	}
	subCancelled(t, "child", r.wait(child), "by_test_child")
	fails := subFind(r.history("inst-chdirect"), provider.EventSubOrchestrationFailed)
	if len(fails) != 1 || fails[0].SourceEventID != 2 || fails[0].Details == nil ||
		fails[0].Details.AppKind != provider.AppCancelled || fails[0].Details.Reason != "by_test_child" {
		t.Fatalf("parent SubOrchestrationFailed events %+v", fails)
	}
}

// Port of cancellation_tests.rs select2_loser_sub_orchestration_cancelled and
// select2_loser_sub_orchestration_explicit_id_cancelled.
func rtSubSelectLoserCancelled(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("SlowChild", subWaitingChild).
		orch("SelectParent", func(ctx *runtime.Context, explicit string) (string, error) {
			var opts []runtime.SubOrchestrationOption
			if explicit != "" {
				opts = append(opts, runtime.WithInstanceID(explicit))
			}
			sub := ctx.ScheduleSubOrchestration("SlowChild", "input", opts...)
			timer := ctx.CreateTimer(100 * time.Millisecond)
			if ctx.Select(sub, timer) == 0 {
				v, err := sub.Get()
				return "sub_won:" + v, err
			}
			return "timer_won", nil
		})
	r.startFast(reg.Registry)
	for _, c := range []struct{ parent, explicit, child string }{
		{"inst-select-auto", "", "inst-select-auto::sub::2"},
		{"inst-select-explicit", "my-explicit-child-id", "my-explicit-child-id"},
	} {
		completed(t, r.run(c.parent, "SelectParent", c.explicit), "timer_won")
		ph := r.history(c.parent)
		sched := subFind(ph, provider.EventSubOrchestrationScheduled)
		if len(sched) != 1 || sched[0].Instance != c.child {
			t.Fatalf("%s scheduled %+v, want child %s", c.parent, sched, c.child)
		}
		cr := subFind(ph, provider.EventSubOrchestrationCancelRequested)
		if len(cr) != 1 || cr[0].SourceEventID != sched[0].EventID {
			t.Fatalf("%s cancel requests %+v, want one for event %d", c.parent, cr, sched[0].EventID)
		}
		subCancelled(t, c.child, r.wait(c.child), "")
		if countKind(r.history(c.child), provider.EventOrchestrationCancelRequested) != 1 {
			t.Fatalf("child %s has no OrchestrationCancelRequested", c.child)
		}
	}
}

// Port of cancellation_tests.rs sub_orchestration_out_of_scope_cancelled and
// explicit_drop_sub_orchestration_cancelled: a parent that ends without awaiting its
// child cancels it.
func rtSubParentEndCancelsChild(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		orch("WaitingChild", subWaitingChild).
		orch("OutOfScopeParent", func(ctx *runtime.Context, _ string) (string, error) {
			_ = ctx.ScheduleSubOrchestration("WaitingChild", "input")
			if _, err := ctx.CreateTimer(50 * time.Millisecond).Get(); err != nil {
				return "", err
			}
			return "parent_completed_without_await", nil
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-scope", "OutOfScopeParent", ""), "parent_completed_without_await")
	subCancelled(t, "child", r.wait("inst-scope::sub::2"), "")
}

// A child that continues as new reports only its final execution's result to the
// parent (continue_as_new_tests.rs with a parent; the parent link survives every
// execution).
func rtSubChildContinueAsNew(t *testing.T, e renv) {
	r := e.rig(t)
	reg := newRegistry(t).
		act("Inc", func(_ *runtime.ActivityContext, in string) (string, error) {
			n, err := strconv.Atoi(in)
			return strconv.Itoa(n + 1), err
		}).
		orch("Counter", func(ctx *runtime.Context, in string) (string, error) {
			v, err := ctx.ScheduleActivity("Inc", in).Get()
			if err != nil {
				return "", err
			}
			if v != "3" {
				return "", ctx.ContinueAsNew(v)
			}
			return fmt.Sprintf("done:%s@%d", v, ctx.ExecutionID()), nil
		}).
		orch("Parent", func(ctx *runtime.Context, _ string) (string, error) {
			v, err := ctx.ScheduleSubOrchestration("Counter", "0").Get()
			return "parent:" + v, err
		})
	r.startFast(reg.Registry)
	completed(t, r.run("inst-child-can", "Parent", ""), "parent:done:3@3")
	const child = "inst-child-can::sub::2"
	cst := r.wait(child)
	completed(t, cst, "done:3@3")
	if cst.ExecutionID != 3 {
		t.Fatalf("child at execution %d, want 3", cst.ExecutionID)
	}
	for x := uint64(1); x <= 3; x++ {
		h, err := r.P.ReadWithExecution(context.Background(), child, x)
		if err != nil {
			t.Fatalf("read %s execution %d: %v", child, x, err)
		}
		subParentLink(t, h, "inst-child-can", 2, 1)
		last := h[len(h)-1].Kind
		if (x < 3 && last != provider.EventOrchestrationContinuedAsNew) || (x == 3 && last != provider.EventOrchestrationCompleted) {
			t.Fatalf("child execution %d ends with %s", x, last)
		}
	}
	ph := r.history("inst-child-can")
	done := subFind(ph, provider.EventSubOrchestrationCompleted)
	if len(done) != 1 || done[0].Result != "done:3@3" || done[0].SourceEventID != 2 {
		t.Fatalf("parent SubOrchestrationCompleted events %+v", done)
	}
	if a := subAdmin(t, r); a != nil {
		xs, err := a.ListExecutions(context.Background(), child)
		if err != nil || !slices.Equal(xs, []uint64{1, 2, 3}) {
			t.Fatalf("child executions %v, %v", xs, err)
		}
		if got := subChildren(t, a, "inst-child-can"); !slices.Equal(got, []string{child}) {
			t.Fatalf("ListChildren = %q", got)
		}
	}
}
