package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/duroq/duroq/runtime/provider"
)

// errInterrupted marks a command that SIGINT or SIGTERM (in tests, the end of its
// context) stopped.
var errInterrupted = errors.New("interrupted")

// interruptible returns a context that SIGINT or SIGTERM ends. Once one has, a second
// ends the process at once, as without it: the operator is not stuck waiting for a
// page or a shutdown that hangs.
func interruptible() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// bulkOptions are the flags of a command that goes through many items a page at a
// time.
type bulkOptions struct {
	batch int  // items per page
	quiet bool // print no progress lines
}

// bulkFlags defines -batch, the items per page (perPage says what they are), and
// -quiet.
func bulkFlags(fs *flag.FlagSet, perPage string, def, most int) *bulkOptions {
	b := &bulkOptions{batch: def}
	intFlag(fs, "batch", fmt.Sprintf("%s: 1 to %d (default %d)", perPage, most, def), 1, most, &b.batch)
	fs.BoolVar(&b.quiet, "quiet", false, "print no progress lines on standard error")
	return b
}

// tally is how many items a selection holds, counted up to countCap.
type tally struct {
	n       int
	running int  // running instances among them
	capped  bool // it holds more than n
}

// countCap bounds the count of a selection before a bulk operation to ten pages of
// the largest size: cheap however many instances are stored.
const countCap = 10 * provider.MaxPageSize

func (t tally) String() string {
	if t.capped {
		return "more than " + strconv.Itoa(t.n)
	}
	return strconv.Itoa(t.n)
}

// about is the tally as a progress line shows it: an estimate, since instances come
// and go meanwhile.
func (t tally) about() string {
	if t.capped {
		return strconv.Itoa(t.n) + "+"
	}
	return "~" + strconv.Itoa(t.n)
}

// walk goes through a selection a page at a time, telling its progress, and stops
// between pages once its context ends.
type walk struct {
	name        string        // the command, which starts each progress line
	noun        string        // what it goes through ("instances")
	progress    io.Writer     // where it tells its progress (io.Discard with -quiet)
	total       tally         // the selection, counted at the start
	did         func() string // what it did so far ("3 instances deleted")
	done        int           // how many items it went through
	ended       bool          // it went through the last page
	interrupted bool
}

func (s *session) walk(b *bulkOptions, noun string, did func() string) *walk {
	w := &walk{name: s.cmd, noun: noun, progress: s.stderr, did: did}
	if b.quiet {
		w.progress = io.Discard
	}
	return w
}

// run calls page until it tells that no page follows, or ctx ends; page goes
// through one page and says how many items it held.
func (w *walk) run(ctx context.Context, page func(ctx context.Context) (n int, more bool, err error)) error {
	for more := true; more; {
		if ctx.Err() != nil {
			return w.interrupt(ctx)
		}
		n, m, err := page(ctx)
		if err != nil && ctx.Err() != nil {
			return w.interrupt(ctx) // the page failed on the interruption: nothing of it was done
		} else if err != nil && w.done > 0 {
			return fmt.Errorf("after %s: %w", w.count(), err)
		} else if err != nil {
			return err
		}
		w.done, more = w.done+n, m
		if n > 0 { // an empty selection, or the empty page after a full one, tells nothing
			fmt.Fprintf(w.progress, "%s: %s done (%s)\n", w.name, w.count(), w.did())
		}
	}
	w.ended = true
	return nil
}

func (w *walk) interrupt(ctx context.Context) error {
	w.interrupted = true
	return fmt.Errorf("%w after %s (%v)", errInterrupted, w.count(), context.Cause(ctx))
}

// count is how far the walk went: "3 of ~10 instances", or "10 instances" at its end.
func (w *walk) count() string {
	if w.ended {
		return fmt.Sprintf("%d %s", w.done, w.noun)
	}
	return fmt.Sprintf("%d of %s %s", w.done, w.total.about(), w.noun)
}

// fields are the JSON fields of the walk's summary.
func (w *walk) fields() map[string]any {
	f := map[string]any{"selected": w.done}
	if w.interrupted {
		f["interrupted"] = true
	}
	return f
}

// report prints the summary of what the walk did when it went to the end or was
// interrupted (then also telling how far it went), and returns its error.
func (w *walk) report(err error, summary func() error) error {
	if err != nil && !errors.Is(err, errInterrupted) {
		return err
	}
	if serr := summary(); serr != nil {
		return serr
	}
	return err
}

// walkInstances goes through the instances q selects, q.Limit at a time, acting on
// each page that holds any.
func (s *session) walkInstances(ctx context.Context, w *walk, q provider.InstanceQuery, act func(ctx context.Context, page []provider.InstanceInfo) error) error {
	return w.run(ctx, func(ctx context.Context) (int, bool, error) {
		page, err := s.admin.ListInstancePage(ctx, q)
		if err == nil && len(page.Instances) > 0 {
			err = act(ctx, page.Instances)
		}
		q.After = page.Next
		return len(page.Instances), page.Next != "", err
	})
}

func instanceIDs(page []provider.InstanceInfo) []string {
	ids := make([]string, len(page))
	for i, in := range page {
		ids[i] = in.InstanceID
	}
	return ids
}

// countInstances counts the instances q selects, up to countCap.
func (s *session) countInstances(ctx context.Context, q provider.InstanceQuery) (tally, error) {
	var t tally
	q.Limit, q.After = provider.MaxPageSize, ""
	for {
		page, err := s.admin.ListInstancePage(ctx, q)
		if err != nil {
			return t, err
		}
		t.n += len(page.Instances)
		for _, in := range page.Instances {
			if in.Status == provider.StatusRunning {
				t.running++
			}
		}
		if page.Next == "" {
			return t, nil
		}
		if t.n >= countCap {
			t.capped = true
			return t, nil
		}
		q.After = page.Next
	}
}

// selection is how delete and prune select instances: an id, or list's filters,
// which -yes must confirm.
type selection struct {
	filters *provider.InstanceQuery
	yes     *bool
	*bulkOptions
}

func selectionFlags(fs *flag.FlagSet, perPage string) *selection {
	return &selection{
		filters:     filterFlags(fs),
		yes:         fs.Bool("yes", false, "confirm acting on the instances the filters select (without it, it says how many it would)"),
		bulkOptions: bulkFlags(fs, perPage, provider.DefaultPageSize, provider.MaxPageSize),
	}
}

// actOnSelected counts the instances q selects and, when -yes confirms it, goes
// through them with w, acting on a page at a time; without -yes, it returns the
// usage error that refuse makes of the count (unless q selects none).
func (s *session) actOnSelected(ctx context.Context, sel *selection, q provider.InstanceQuery, w *walk, refuse func(tally) error,
	act func(ctx context.Context, page []provider.InstanceInfo) error) error {
	t, err := s.countInstances(ctx, q)
	switch {
	case err != nil:
		return err
	case !*sel.yes && t.n > 0:
		return refuse(t)
	case !*sel.yes:
		w.ended = true // nothing selected: nothing to confirm
		return nil
	}
	w.total, q.Limit = t, sel.batch
	return s.walkInstances(ctx, w, q, act)
}

// refusal is the usage error of verb without -yes: it says that verb would act on
// the t instances (noun) the filters select, and how (detail).
func (sel *selection) refusal(verb string, t tally, noun, detail string) error {
	which := "those the filters select"
	if *sel.filters == (provider.InstanceQuery{}) {
		which = "every one stored"
	}
	return usageError(fmt.Sprintf("refusing to %s without -yes: this would %s %s %s (%s)%s; run it again with -yes to %s them",
		verb, verb, t, noun, which, detail, verb))
}

// deleteSelected deletes the root instances the filters select with their
// sub-orchestrations, a page (one transaction) at a time; running ones, and those
// with a running sub-orchestration, only with force.
func (s *session) deleteSelected(ctx context.Context, sel *selection, force bool) error {
	q := *sel.filters
	if q.Parent != "" {
		return usageError("-parent selects sub-orchestrations, which are deleted only with their root")
	}
	q.RootsOnly = true
	var r provider.DeleteInstanceResult
	kept := 0
	w := s.walk(sel.bulkOptions, "root instances", func() string {
		if kept > 0 {
			return fmt.Sprintf("%d instances deleted, %d running kept", r.InstancesDeleted, kept)
		}
		return fmt.Sprintf("%d instances deleted", r.InstancesDeleted)
	})
	refuse := func(t tally) error {
		running := ""
		if t.running > 0 && force {
			running = fmt.Sprintf(", %d of them running", t.running)
		} else if t.running > 0 {
			running = fmt.Sprintf(", but not the %d running (-force deletes them)", t.running)
		}
		return sel.refusal("delete", t, plural(t.n, "root instance"), " with their sub-orchestrations"+running)
	}
	err := s.actOnSelected(ctx, sel, q, w, refuse, func(ctx context.Context, page []provider.InstanceInfo) error {
		var roots []string
		for _, in := range page {
			if in.Status == provider.StatusRunning && !force {
				kept++
			} else {
				roots = append(roots, in.InstanceID)
			}
		}
		d, err := s.deleteRoots(ctx, roots, force)
		r.InstancesDeleted += d.InstancesDeleted
		r.ExecutionsDeleted += d.ExecutionsDeleted
		r.EventsDeleted += d.EventsDeleted
		r.QueueMessagesDeleted += d.QueueMessagesDeleted
		return err
	})
	return w.report(err, func() error {
		f := w.fields()
		f["kept_running"] = kept
		note := "; went through " + w.count()
		if kept > 0 {
			note += fmt.Sprintf(", kept %d running (-force deletes them)", kept)
		}
		return s.counts("deleted ", f, deletedCounts(r), note)
	})
}

// deleteRoots deletes root instances with their sub-orchestrations in one
// transaction: with force, running ones too; without, it keeps those whose tree
// runs.
func (s *session) deleteRoots(ctx context.Context, roots []string, force bool) (provider.DeleteInstanceResult, error) {
	// A page started is finished, so that what the command says it did is exact.
	write := context.WithoutCancel(ctx)
	if len(roots) == 0 {
		return provider.DeleteInstanceResult{}, nil
	} else if !force {
		return s.admin.DeleteInstanceBulk(write, provider.InstanceFilter{InstanceIDs: roots})
	}
	var ids []string // DeleteInstancesAtomic wants every instance of the trees
	for _, root := range roots {
		tree, err := s.admin.GetInstanceTree(ctx, root)
		if err != nil {
			return provider.DeleteInstanceResult{}, err
		}
		ids = append(ids, tree.AllIDs...)
	}
	return s.admin.DeleteInstancesAtomic(write, ids, true)
}

// pruneSelected prunes the old executions of the instances the filters select, as o
// says, a page (one transaction) at a time.
func (s *session) pruneSelected(ctx context.Context, sel *selection, o provider.PruneOptions) error {
	var r provider.PruneResult
	w := s.walk(sel.bulkOptions, "instances", func() string { return fmt.Sprintf("%d executions pruned", r.ExecutionsDeleted) })
	refuse := func(t tally) error {
		which := fmt.Sprintf(": their executions before the latest %d", max(o.KeepLast, 1))
		if !o.CompletedBefore.IsZero() {
			which += " that completed before " + when(o.CompletedBefore)
		}
		return sel.refusal("prune", t, plural(t.n, "instance"), which)
	}
	err := s.actOnSelected(ctx, sel, *sel.filters, w, refuse, func(ctx context.Context, page []provider.InstanceInfo) error {
		p, err := s.admin.PruneExecutionsBulk(context.WithoutCancel(ctx), // a page started is finished: the counts are exact
			provider.InstanceFilter{InstanceIDs: instanceIDs(page)}, o)
		r.ExecutionsDeleted += p.ExecutionsDeleted
		r.EventsDeleted += p.EventsDeleted
		return err
	})
	return w.report(err, func() error { return s.counts("pruned ", w.fields(), prunedCounts(r), "; went through "+w.count()) })
}
