package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

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
	Stats    mq.Stats
	Messages []messageRow
	Dead     int    // dead letters on this page
	Redrive  string // the link redriving every dead letter shown by the filter; "" when none
	Next     string
	First    string
	Done     string
	Count    int // messages the action just done moved
}

// messageRow is a stored message as the queue page shows it.
type messageRow struct {
	mq.MessageInfo
	State   string // "locked", "delayed", "ready" or "dead letter"
	Payload string // the payload as text when it is UTF-8, else "" (Binary says so)
	Binary  bool
	Redrive string // the link redriving this dead letter; "" for others or read-only
	Work    *workItemView
}

// workItemView is a runtime work item found in a queue of the UI's provider.
type workItemView struct {
	Kind, Name, Instance string
	Link                 string // the instance's page
	Fields               []provider.EventField
}

const queuePageSize = 50

func (h *handler) queue(r *http.Request) (*view, error) {
	q := r.URL.Query()
	d := queueData{Name: q.Get("name"), Key: q.Get("key"), Done: doneMessages[q.Get("done")]}
	if d.Name == "" {
		return nil, badRequest("no queue name (?name=)")
	}
	d.Count, _ = strconv.Atoi(q.Get("n"))
	opts := mq.PeekOptions{RoutingKey: d.Key, Limit: queuePageSize}
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
	msgs, err := h.queues.Peek(ctx, d.Name, opts)
	if err != nil {
		return nil, err
	}
	now := h.o.Now()
	for _, m := range msgs {
		row := messageRow{MessageInfo: m, State: "ready"}
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
		payload := m.Payload[:min(len(m.Payload), displayLimit)]
		switch {
		case utf8.Valid(payload):
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

// redriveTarget reads what a redrive names: the dead-letter queue, and a routing
// key or message ids (none: every dead letter of the queue).
func redriveTarget(r *http.Request) (string, mq.RedriveOptions, error) {
	name := r.FormValue("name")
	if name == "" {
		return "", mq.RedriveOptions{}, badRequest("redrive: no queue name")
	}
	o := mq.RedriveOptions{RoutingKey: r.FormValue("key")}
	for _, s := range r.Form["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return "", o, badRequest("redrive: message id %q: want a number", clip(s, 100))
		}
		o.IDs = append(o.IDs, id)
	}
	return name, o, nil
}

func (h *handler) confirmRedrive(r *http.Request) (*view, error) {
	name, o, err := redriveTarget(r)
	if err != nil {
		return nil, err
	}
	what := "every dead letter"
	switch {
	case len(o.IDs) == 1:
		what = fmt.Sprintf("dead letter %d", o.IDs[0])
	case len(o.IDs) > 1:
		what = fmt.Sprintf("%d dead letters", len(o.IDs))
	}
	if o.RoutingKey != "" {
		what += fmt.Sprintf(" of routing key %q", clip(o.RoutingKey, 200))
	}
	hidden := map[string]string{"name": name, "key": o.RoutingKey}
	if len(o.IDs) == 1 {
		hidden["id"] = strconv.FormatInt(o.IDs[0], 10)
	}
	back := url.Values{"name": {name}}
	return &view{page: "confirm.html", title: "Redrive", data: confirmData{
		Question: fmt.Sprintf("Redrive %s of queue %q back to the queue each came from? They become visible at once with their attempt count reset.", what, clip(name, 200)),
		Action:   h.link("/queue/redrive", nil), Hidden: hidden, Submit: "Redrive", Back: h.link("/queue", back)}}, nil
}

func (h *handler) redrive(r *http.Request) (*view, error) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return nil, badRequest("redrive: reading the form: %v", err)
	}
	name, o, err := redriveTarget(r)
	if err != nil {
		return nil, err
	}
	n, err := h.queues.Redrive(r.Context(), name, o)
	if err != nil {
		return nil, fmt.Errorf("redrive queue %q: %w", clip(name, 200), err)
	}
	return &view{redirect: "/queue?" + url.Values{"name": {name}, "done": {"redrive"}, "n": {strconv.Itoa(n)}}.Encode()}, nil
}
