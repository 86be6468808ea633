package ui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// Bounds of what one page reads.
const (
	defaultListSize = 50  // instances per listing page
	historyPageSize = 500 // events per history page
	maxExecutions   = 100 // latest executions listed on an instance page
	maxTreeNodes    = 200 // instances shown in a tree
	maxKVShown      = 200 // KV entries shown
	recentCap       = 1000
)

// ---- overview ----

// overviewData is the overview page's data.
type overviewData struct {
	Metrics        *provider.SystemMetrics
	Depths         *provider.QueueDepths
	Recent         []recentRow
	RecentFailures []provider.InstanceInfo
	Queues         []queueRow
}

// recentRow counts the instances that reached a status within recent windows.
type recentRow struct {
	Status  string
	Windows []recentCount
}

// recentCount counts the instances that reached a status within a recent window,
// up to recentCap.
type recentCount struct {
	Window string
	Count  int
	More   bool // at least recentCap: the count stopped there
	Link   string
}

func (h *handler) overview(r *http.Request) (*view, error) {
	ctx := r.Context()
	d := overviewData{}
	if h.admin != nil {
		m, err := h.admin.GetSystemMetrics(ctx)
		if err != nil {
			return nil, err
		}
		q, err := h.admin.GetQueueDepths(ctx)
		if err != nil {
			return nil, err
		}
		d.Metrics, d.Depths = &m, &q
		now := h.o.Now().UTC()
		for _, status := range []string{provider.StatusCompleted, provider.StatusFailed} {
			row := recentRow{Status: status}
			for _, w := range []struct {
				name string
				d    time.Duration
			}{{"5 minutes", 5 * time.Minute}, {"hour", time.Hour}} {
				since := now.Add(-w.d)
				page, err := h.admin.ListInstancePage(ctx, provider.InstanceQuery{Status: status, UpdatedAfter: since, Limit: recentCap})
				if err != nil {
					return nil, err
				}
				row.Windows = append(row.Windows, recentCount{Window: w.name, Count: len(page.Instances), More: page.Next != "",
					Link: h.link("/instances", url.Values{"status": {status}, "updated_after": {since.Format(time.RFC3339)}})})
			}
			d.Recent = append(d.Recent, row)
		}
		page, err := h.admin.ListInstancePage(ctx, provider.InstanceQuery{Status: provider.StatusFailed, UpdatedAfter: now.Add(-24 * time.Hour), Limit: 10})
		if err != nil {
			return nil, err
		}
		d.RecentFailures = page.Instances
	}
	if h.queues != nil {
		rows, err := h.queueRows(r)
		if err != nil {
			return nil, err
		}
		d.Queues = rows
	}
	return &view{page: "overview.html", title: "Overview", data: d}, nil
}

// ---- instance listing ----

// instancesData is the listing page's data.
type instancesData struct {
	Filter    instanceFilter
	Statuses  []string
	Instances []provider.InstanceInfo
	Next      string // the next page's link; "" on the last page
	First     string // the first page's link; "" on the first page
	Done      string // what an action that redirected here did
}

// instanceFilter is the listing's filter as the form shows it.
type instanceFilter struct {
	Status, Orchestration, Prefix, Parent string
	Roots                                 bool
	CreatedAfter, CreatedBefore           string
	UpdatedAfter, UpdatedBefore           string
	Limit                                 int
}

// query is the filter's link query (without the cursor).
func (f instanceFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "orchestration": f.Orchestration, "prefix": f.Prefix, "parent": f.Parent,
		"created_after": f.CreatedAfter, "created_before": f.CreatedBefore, "updated_after": f.UpdatedAfter, "updated_before": f.UpdatedBefore} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Roots {
		q.Set("roots", "1")
	}
	if f.Limit != defaultListSize {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

func (h *handler) instances(r *http.Request) (*view, error) {
	q := r.URL.Query()
	f := instanceFilter{Status: q.Get("status"), Orchestration: q.Get("orchestration"), Prefix: q.Get("prefix"), Parent: q.Get("parent"),
		Roots: q.Get("roots") != "", CreatedAfter: q.Get("created_after"), CreatedBefore: q.Get("created_before"),
		UpdatedAfter: q.Get("updated_after"), UpdatedBefore: q.Get("updated_before"), Limit: defaultListSize}
	iq := provider.InstanceQuery{Status: f.Status, Orchestration: f.Orchestration, IDPrefix: f.Prefix, Parent: f.Parent,
		RootsOnly: f.Roots, After: q.Get("after")}
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		return nil, badRequest("status %q: want one of %v", clip(f.Status, 100), statuses)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > provider.MaxPageSize {
			return nil, badRequest("limit %q: want a number from 1 to %d", clip(s, 100), provider.MaxPageSize)
		}
		f.Limit = n
	}
	iq.Limit = f.Limit
	for _, t := range []struct {
		name string
		text string
		to   *time.Time
	}{{"created_after", f.CreatedAfter, &iq.CreatedAfter}, {"created_before", f.CreatedBefore, &iq.CreatedBefore},
		{"updated_after", f.UpdatedAfter, &iq.UpdatedAfter}, {"updated_before", f.UpdatedBefore, &iq.UpdatedBefore}} {
		if err := parseTime(t.name, t.text, t.to); err != nil {
			return nil, err
		}
	}
	page, err := h.admin.ListInstancePage(r.Context(), iq)
	if err != nil {
		return nil, err
	}
	d := instancesData{Filter: f, Statuses: statuses, Instances: page.Instances, Done: doneMessages[q.Get("done")]}
	if page.Next != "" {
		nq := f.query()
		nq.Set("after", page.Next)
		d.Next = h.link("/instances", nq)
	}
	if iq.After != "" {
		d.First = h.link("/instances", f.query())
	}
	return &view{page: "instances.html", title: "Instances", data: d}, nil
}

// statuses are the statuses the listing filters on.
var statuses = []string{provider.StatusRunning, provider.StatusCompleted, provider.StatusFailed, provider.StatusContinuedAsNew}

// timeForms are the time formats a filter accepts, all read as UTC unless they
// carry a zone: RFC 3339, what an HTML datetime-local input sends, and a date.
var timeForms = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// parseTime reads the filter parameter name into to ("" leaves it zero).
func parseTime(name, text string, to *time.Time) error {
	if text == "" {
		return nil
	}
	for _, f := range timeForms {
		if t, err := time.ParseInLocation(f, text, time.UTC); err == nil {
			*to = t
			return nil
		}
	}
	return badRequest("%s %q: want a time such as 2026-01-02T15:04 (UTC) or RFC 3339", name, clip(text, 100))
}

// ---- one instance ----

// instanceData is the instance page's data.
type instanceData struct {
	ID         string
	Status     runtime.OrchestrationStatus
	Info       provider.InstanceInfo // zero while Pending
	Input      string
	HasInput   bool
	Failure    string
	KV         []kvEntry
	KVMore     int // entries not shown
	Executions []provider.ExecutionInfo
	Execution  uint64 // the execution whose history is shown
	History    []eventRow
	HistoryAt  int    // index of the first event shown
	Events     int    // events in the execution
	NextEvents string // link to the next page of events; ""
	PrevEvents string
	Tree       *treeNode
	TreeMore   bool // the tree was cut at maxTreeNodes
	Done       string
	Actions    []actionLink
}

type kvEntry struct{ Key, Value string }

// eventRow is a history event as the timeline shows it.
type eventRow struct {
	ID     uint64
	Kind   string
	Name   string
	Time   time.Time
	Offset string // since the execution's first event
	Fields []provider.EventField
	Class  string // "fail", "done" or "" for styling
}

// treeNode is an instance of a tree, with its children.
type treeNode struct {
	ID, Name, Status string
	Current          bool
	Children         []*treeNode
}

// actionLink is an action offered on the instance page.
type actionLink struct{ Label, Link, Class string }

func (h *handler) instance(r *http.Request) (*view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	id := q.Get("id")
	if id == "" {
		return nil, badRequest("no instance id (?id=)")
	}
	st, info, err := h.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	d := instanceData{ID: id, Status: st, Info: info, Failure: st.Failure.DisplayMessage(), Done: doneMessages[q.Get("done")]}
	if st.State != runtime.StatePending {
		if err := h.fillInstance(r, &d); err != nil {
			return nil, err
		}
	}
	d.Actions = h.actionsFor(d)
	return &view{page: "instance.html", title: "Instance " + clip(id, 80), data: d}, nil
}

// lookup reads the instance id's status and, once it has run (not Pending), its
// stored info; an unknown instance is a 404.
func (h *handler) lookup(ctx context.Context, id string) (runtime.OrchestrationStatus, provider.InstanceInfo, error) {
	var info provider.InstanceInfo
	st, err := h.client.Status(ctx, id)
	if err != nil {
		return st, info, err
	}
	if st.State == runtime.StateNotFound {
		return st, info, &httpError{http.StatusNotFound, fmt.Sprintf("instance %q not found", clip(id, 200))}
	}
	if st.State != runtime.StatePending {
		info, err = h.admin.GetInstanceInfo(ctx, id)
	}
	return st, info, err
}

// fillInstance reads what a stored instance has besides its info: executions, the
// history page asked for, KV and tree.
func (h *handler) fillInstance(r *http.Request, d *instanceData) error {
	ctx := r.Context()
	q := r.URL.Query()
	info := d.Info
	ids, err := h.admin.ListExecutions(ctx, d.ID)
	if err != nil {
		return err
	}
	if len(ids) > maxExecutions {
		ids = ids[len(ids)-maxExecutions:]
	}
	for _, x := range slices.Backward(ids) {
		e, err := h.admin.GetExecutionInfo(ctx, d.ID, x)
		if errors.Is(err, provider.ErrNotFound) {
			continue // pruned since it was listed
		} else if err != nil {
			return err
		}
		d.Executions = append(d.Executions, e)
	}
	d.Execution = info.CurrentExecutionID
	if s := q.Get("execution"); s != "" {
		if d.Execution, err = strconv.ParseUint(s, 10, 64); err != nil {
			return badRequest("execution %q: want a number", clip(s, 100))
		}
	}
	if err := h.fillHistory(r, d); err != nil {
		return err
	}
	kv, err := h.o.Provider.GetKVAllValues(ctx, d.ID)
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(kv))
	for _, k := range keys[:min(len(keys), maxKVShown)] {
		d.KV = append(d.KV, kvEntry{k, kv[k]})
	}
	d.KVMore = len(keys) - len(d.KV)
	budget := maxTreeNodes
	root := cmp.Or(rootOf(ctx, h.admin, info), d.ID)
	if d.Tree, err = h.tree(r, root, d.ID, &budget); err != nil {
		return err
	}
	d.TreeMore = budget < 0
	return nil
}

// fillHistory reads the shown execution's history and keeps the page of events
// asked for (?from=).
func (h *handler) fillHistory(r *http.Request, d *instanceData) error {
	events, err := h.admin.ReadHistoryWithExecutionID(r.Context(), d.ID, d.Execution)
	if errors.Is(err, provider.ErrNotFound) || (err == nil && len(events) == 0 && d.Execution != d.Info.CurrentExecutionID) {
		return &httpError{http.StatusNotFound, fmt.Sprintf("instance %q has no execution %d", clip(d.ID, 200), d.Execution)}
	}
	if err != nil {
		return err
	}
	d.Events = len(events)
	if s := r.URL.Query().Get("from"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= max(len(events), 1) {
			return badRequest("from %q: want an event index from 0 to %d", clip(s, 100), max(len(events)-1, 0))
		}
		d.HistoryAt = n
	}
	var start time.Time
	if len(events) > 0 {
		start = time.UnixMilli(events[0].TimestampMs)
	}
	end := min(d.HistoryAt+historyPageSize, len(events))
	for _, e := range events[d.HistoryAt:end] {
		t := time.UnixMilli(e.TimestampMs).UTC()
		row := eventRow{ID: e.EventID, Kind: string(e.Kind), Name: e.Name, Time: t, Offset: "+" + t.Sub(start).String(), Fields: e.Fields()}
		switch {
		case e.Details != nil:
			row.Class = "fail"
		case e.IsTerminal():
			row.Class = "done"
		}
		d.History = append(d.History, row)
	}
	for _, e := range events {
		if e.Kind == provider.EventOrchestrationStarted {
			d.Input, d.HasInput = e.Input, true
			break
		}
	}
	page := func(from int) string {
		return h.link("/instance", url.Values{"id": {d.ID}, "execution": {strconv.FormatUint(d.Execution, 10)}, "from": {strconv.Itoa(from)}})
	}
	if end < len(events) {
		d.NextEvents = page(end)
	}
	if d.HistoryAt > 0 {
		d.PrevEvents = page(max(d.HistoryAt-historyPageSize, 0))
	}
	return nil
}

// rootOf walks up the parents of info to the root instance's id ("" on a
// failure, when the page then shows the tree from the instance itself).
func rootOf(ctx context.Context, admin provider.ProviderAdmin, info provider.InstanceInfo) string {
	id, parent := info.InstanceID, info.ParentInstanceID
	for range maxTreeNodes {
		if parent == "" {
			return id
		}
		p, err := admin.GetInstanceInfo(ctx, parent)
		if err != nil {
			return ""
		}
		id, parent = p.InstanceID, p.ParentInstanceID
	}
	return ""
}

// tree reads the instance id and its descendants, at most *budget of them
// (*budget ends negative when the tree was cut).
func (h *handler) tree(r *http.Request, id, current string, budget *int) (*treeNode, error) {
	*budget--
	info, err := h.admin.GetInstanceInfo(r.Context(), id)
	if errors.Is(err, provider.ErrNotFound) {
		return &treeNode{ID: id, Status: "deleted", Current: id == current}, nil
	} else if err != nil {
		return nil, err
	}
	n := &treeNode{ID: id, Name: info.OrchestrationName, Status: info.Status, Current: id == current}
	children, err := h.admin.ListChildren(r.Context(), id)
	if err != nil {
		return nil, err
	}
	for _, c := range children {
		if *budget <= 0 {
			*budget = -1
			break
		}
		child, err := h.tree(r, c, current, budget)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, child)
	}
	return n, nil
}
