package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/duroq/duroq/internal/tracectx"
	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime/provider"
)

// queueRow is a queue as the overview and the queue list show it.
type queueRow struct {
	mq.QueueStats
	Link string
}

// queueRows lists every queue with its counts.
func (h *handler) queueRows(r *http.Request) ([]queueRow, error) {
	qs, err := h.queues.Queues(r.Context())
	if err != nil {
		return nil, err
	}
	rows := make([]queueRow, len(qs))
	for i, q := range qs {
		rows[i] = queueRow{q, h.link("/queue", url.Values{"name": {q.Queue}})}
	}
	return rows, nil
}

func (h *handler) queueList(r *http.Request) (*view, error) {
	rows, err := h.queueRows(r)
	if err != nil {
		return nil, err
	}
	return &view{page: "queues.html", title: "Queues", data: rows}, nil
}

// queueData is the queue page's data.
type queueData struct {
	Name     string
	Key      string
	State    string   // the state shown ("" any)
	States   []string // the states to choose from
	Stats    mq.Stats
	Messages []messageRow
	Dead     int    // dead letters on this page
	Redrive  string // the link redriving every dead letter shown by the filter; "" when none
	Next     string
	First    string
	Done     string         // what an action that redirected here did, with how many messages
	Actions  []actionLink   // pause or resume; none when read-only
	Limits   []mq.LimitInfo // the queue's limits, with the batches each holds in flight
}

// messageRow is a stored message as the queue page shows it.
type messageRow struct {
	mq.MessageInfo
	State   string // "locked", "delayed", "ready" or "dead letter"
	Payload string // the payload as text when it is UTF-8, else "" (Binary says so)
	Binary  bool
	Redrive string // the link redriving this dead letter; "" for others or read-only
	Delete  string // the link deleting this message; "" when read-only
	Work    *workItemView
	TraceID string // the trace of the span that enqueued it ("" = none)
}

// workItemView is a runtime work item found in a queue of the UI's provider.
type workItemView struct {
	Kind, Name, Instance string
	Link                 string // the instance's page
	Fields               []provider.EventField
}

// traceID is the trace id of a W3C traceparent, what a tracing backend searches
// by; "" when tp is none.
func traceID(tp string) string {
	if sc := tracectx.Remote(tp); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

const queuePageSize = 50

// messageStates are the states the queue page filters on.
var messageStates = []string{string(mq.StateReady), string(mq.StateDelayed), string(mq.StateLocked)}

func (h *handler) queue(r *http.Request) (*view, error) {
	q := r.URL.Query()
	d := queueData{Name: q.Get("name"), Key: q.Get("key"), State: q.Get("state"), States: messageStates, Done: doneMessages[q.Get("done")]}
	if d.Name == "" {
		return nil, badRequest("no queue name (?name=)")
	}
	if n, err := strconv.Atoi(q.Get("n")); err == nil && d.Done != "" {
		d.Done += fmt.Sprintf(" (%d %s)", n, map[string]string{"redrive-message": "moved", "delete-message": "deleted"}[q.Get("done")])
	}
	opts := mq.PeekOptions{RoutingKey: d.Key, State: mq.MessageState(d.State), Limit: queuePageSize}
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("after %q: want a message id", clip(s, 100))
		}
		opts.AfterID = n
	}
	ctx := r.Context()
	var err error
	if d.Key == "" {
		d.Stats, err = h.queues.Stats(ctx, d.Name)
	} else {
		d.Stats, err = h.queues.KeyStats(ctx, d.Name, d.Key)
	}
	if err != nil {
		return nil, err
	}
	if d.Limits, err = h.queues.Limits(ctx, d.Name); err != nil {
		return nil, err
	}
	if !h.o.ReadOnly {
		for _, a := range h.queueActions() {
			if a.applies(d.Stats) {
				d.Actions = append(d.Actions, a.link(h, d.Name))
			}
		}
	}
	msgs, err := h.queues.Peek(ctx, d.Name, opts)
	if err != nil {
		return nil, err
	}
	now := h.o.Now()
	for _, m := range msgs {
		row := messageRow{MessageInfo: m, State: "ready", TraceID: traceID(m.TraceParent)}
		if !h.o.ReadOnly {
			row.Delete = h.link("/queue/delete", url.Values{"name": {d.Name}, "id": {strconv.FormatInt(m.ID, 10)}})
		}
		switch {
		case m.Locked:
			row.State = "locked"
		case m.OriginQueue != "":
			row.State = "dead letter"
			d.Dead++
			if !h.o.ReadOnly {
				row.Redrive = h.link("/queue/redrive", url.Values{"name": {d.Name}, "id": {strconv.FormatInt(m.ID, 10)}})
			}
		case m.VisibleAt.After(now):
			row.State = "delayed"
		}
		switch {
		case utf8.Valid(m.Payload): // the whole payload: a cut could split a rune
			row.Payload = clip(string(m.Payload), displayLimit)
		case h.admin != nil:
			row.Work = h.workItem(m.Payload)
			row.Binary = row.Work == nil
		default:
			row.Binary = true
		}
		d.Messages = append(d.Messages, row)
	}
	base := url.Values{"name": {d.Name}}
	if d.Key != "" {
		base.Set("key", d.Key)
	}
	if d.State != "" {
		base.Set("state", d.State)
	}
	if d.Dead > 0 && !h.o.ReadOnly {
		d.Redrive = h.link("/queue/redrive", base)
	}
	if len(msgs) == queuePageSize {
		next := url.Values{"after": {strconv.FormatInt(msgs[len(msgs)-1].ID, 10)}}
		for k, v := range base {
			next[k] = v
		}
		d.Next = h.link("/queue", next)
	}
	if opts.AfterID > 0 {
		d.First = h.link("/queue", base)
	}
	return &view{page: "queue.html", title: "Queue " + clip(d.Name, 80), data: d}, nil
}

// workItem decodes payload as a work item of the runtime (nil if it is not one):
// the orchestrator and worker queues then say what they hold (which start, which
// activity, for which instance) rather than showing bytes.
func (h *handler) workItem(payload []byte) *workItemView {
	w, err := provider.UnmarshalWorkItem(payload)
	if err != nil || w.Kind == "" {
		return nil
	}
	id := w.TargetInstance()
	e := provider.Event{Input: w.Input, Result: w.Result, Data: w.Data, Reason: w.Reason, Details: w.Details, FireAtMs: w.FireAtMs,
		SessionID: w.SessionID, Tag: w.Tag, Version: w.Version}
	return &workItemView{Kind: string(w.Kind), Name: w.Name, Instance: id, Link: h.link("/instance", url.Values{"id": {id}}), Fields: e.Fields()}
}

// messageAction is an action on stored messages of a queue, selected by routing
// key or by id: a confirmation page (GET) and the POST that performs it.
type messageAction struct {
	name     string // its path under /queue/, and its ?done= code
	label    string
	class    string
	question string // with %s for what it acts on and %q for the queue
	needsID  bool   // it acts on one message only, never on a whole queue or key
	noun     string // "dead letter" or "message"
	do       func(ctx context.Context, queue string, t messageTarget) (int, error)
}

// messageTarget is what a message action selects in its queue.
type messageTarget struct {
	key string
	ids []int64
}

func (h *handler) messageActions() []messageAction {
	return []messageAction{
		{name: "redrive", label: "Redrive", noun: "dead letter",
			question: "Redrive %s of queue %q back to the queue each came from? They become visible at once with their attempt count reset.",
			do: func(ctx context.Context, queue string, t messageTarget) (int, error) {
				return h.queues.Redrive(ctx, queue, mq.RedriveOptions{RoutingKey: t.key, IDs: t.ids})
			}},
		{name: "delete", label: "Delete", class: "danger", noun: "message", needsID: true,
			question: "Delete %s of queue %q? A consumer that holds it loses it. This cannot be undone.",
			do: func(ctx context.Context, queue string, t messageTarget) (int, error) {
				return h.queues.Purge(ctx, queue, mq.PurgeOptions{RoutingKey: t.key, IDs: t.ids})
			}},
	}
}

// target reads what a message action names: the queue, and a routing key or
// message ids (none: every message the action applies to in the queue).
func (a messageAction) target(r *http.Request) (string, messageTarget, error) {
	name := r.FormValue("name")
	if name == "" {
		return "", messageTarget{}, badRequest("%s: no queue name", a.name)
	}
	t := messageTarget{key: r.FormValue("key")}
	for _, s := range r.Form["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return "", t, badRequest("%s: message id %q: want a number", a.name, clip(s, 100))
		}
		t.ids = append(t.ids, id)
	}
	if a.needsID && len(t.ids) != 1 {
		return "", t, badRequest("%s: name one message (id=)", a.name)
	}
	return name, t, nil
}

func (h *handler) confirmMessageAction(a messageAction) func(*http.Request) (*view, error) {
	return func(r *http.Request) (*view, error) {
		name, t, err := a.target(r)
		if err != nil {
			return nil, err
		}
		what := "every " + a.noun
		switch {
		case len(t.ids) == 1:
			what = fmt.Sprintf("%s %d", a.noun, t.ids[0])
		case len(t.ids) > 1:
			what = fmt.Sprintf("%d %ss", len(t.ids), a.noun)
		}
		if t.key != "" {
			what += fmt.Sprintf(" of routing key %q", clip(t.key, 200))
		}
		hidden := map[string]string{"name": name, "key": t.key}
		if len(t.ids) == 1 {
			hidden["id"] = strconv.FormatInt(t.ids[0], 10)
		}
		return &view{page: "confirm.html", title: a.label, data: confirmData{
			Question: fmt.Sprintf(a.question, what, clip(name, 200)), Action: h.link("/queue/"+a.name, nil), Hidden: hidden,
			Submit: a.label, Class: a.class, Back: h.link("/queue", url.Values{"name": {name}})}}, nil
	}
}

func (h *handler) doMessageAction(a messageAction) func(*http.Request) (*view, error) {
	return func(r *http.Request) (*view, error) {
		if err := parseForm(r, a.name); err != nil {
			return nil, err
		}
		name, t, err := a.target(r)
		if err != nil {
			return nil, err
		}
		n, err := a.do(r.Context(), name, t)
		if err != nil {
			return nil, fmt.Errorf("%s in queue %q: %w", a.name, clip(name, 200), err)
		}
		return &view{redirect: "/queue?" + url.Values{"name": {name}, "done": {a.name + "-message"}, "n": {strconv.Itoa(n)}}.Encode()}, nil
	}
}

// queueActions pause and resume a queue from its page.
func (h *handler) queueActions() []switchAction[mq.Stats] {
	page := func(name string) (string, url.Values) { return "/queue", url.Values{"name": {name}} }
	return []switchAction[mq.Stats]{
		{name: "pause", label: "Pause", field: "name", thing: "queue",
			question: "Pause queue %q? Its consumers, in every process, receive none of its messages until it is resumed; producers go on enqueuing, and the batches consumers hold now are settled as usual.",
			applies:  func(st mq.Stats) bool { return !st.Paused },
			do:       h.queues.Pause,
			page:     page},
		{name: "resume", label: "Resume", field: "name", thing: "queue",
			question: "Resume queue %q? Its consumers receive its messages again, in their order.",
			applies:  func(st mq.Stats) bool { return st.Paused },
			do:       h.queues.Resume,
			page:     page},
	}
}
