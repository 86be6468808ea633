package ui

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
)

// instanceAction is an action on one instance: a confirmation page (GET) that asks
// for its fields, and the POST that performs it.
type instanceAction struct {
	name     string // its path under /instance/, and its ?done= code
	label    string
	class    string // "danger" for destructive actions
	question string // the confirmation page's question, with %q for the id
	fields   []formField
	// refuse says why the action does not apply to the instance ("" when it does).
	refuse func(st runtime.OrchestrationStatus, info provider.InstanceInfo) string
	do     func(ctx context.Context, id string, form url.Values) error
	after  func(id string) string // where to go once done, with ?done=
}

// formField is a field of a confirmation form.
type formField struct {
	Name, Label, Help string
	Kind              string // "text", "textarea" or "checkbox"
	Value             string
	Required          bool
}

// doneMessages are what a page says after an action redirected to it (?done=):
// fixed texts, so that nothing of the link is echoed.
var doneMessages = map[string]string{
	"cancel":          "Cancellation recorded: a running runtime delivers it at the instance's next turn.",
	"raise":           "Event raised: a running runtime delivers it at the instance's next turn (dropped if the orchestration is not waiting for it).",
	"enqueue":         "Message enqueued: the orchestration receives it when it dequeues from that queue.",
	"delete":          "Instance deleted, with its executions, sub-orchestrations and queued messages.",
	"redrive-message": "Dead letters redriven: they are visible again in their queue.",
	"delete-message":  "Message deleted.",
	"pause":           "Queue paused: its consumers receive none of its messages until it is resumed.",
	"resume":          "Queue resumed: its consumers receive its messages again.",
	"schedule-pause":  "Schedule paused: it fires nothing until it is resumed.",
	"schedule-resume": "Schedule resumed: it fires again from its next slot.",
}

// running refuses actions that need an instance that has not ended.
func running(st runtime.OrchestrationStatus, _ provider.InstanceInfo) string {
	if st.Terminal() {
		return fmt.Sprintf("the instance has ended (%s)", st.State)
	}
	return ""
}

func (h *handler) instanceActions() []instanceAction {
	back := func(name string) func(string) string {
		return func(id string) string { return "/instance?" + url.Values{"id": {id}, "done": {name}}.Encode() }
	}
	return []instanceAction{
		{name: "cancel", label: "Cancel", class: "danger", question: "Cancel instance %q? It fails with a Cancelled error, and its activities and sub-orchestrations are cancelled.",
			fields: []formField{{Name: "reason", Label: "Reason", Kind: "text", Value: "cancelled from the duroq UI", Help: "recorded in the instance's failure"}},
			refuse: running, after: back("cancel"),
			do: func(ctx context.Context, id string, f url.Values) error {
				return h.client.CancelInstance(ctx, id, f.Get("reason"))
			}},
		{name: "raise", label: "Raise event", question: "Raise an event on instance %q?",
			fields: []formField{{Name: "name", Label: "Event name", Kind: "text", Required: true}, {Name: "data", Label: "Data", Kind: "textarea"}},
			refuse: running, after: back("raise"),
			do: func(ctx context.Context, id string, f url.Values) error {
				return h.client.RaiseEvent(ctx, id, f.Get("name"), f.Get("data"))
			}},
		{name: "enqueue", label: "Send message", question: "Send a queue message to instance %q?",
			fields: []formField{{Name: "queue", Label: "Queue", Kind: "text", Required: true, Help: "the name the orchestration dequeues from"}, {Name: "data", Label: "Message", Kind: "textarea"}},
			refuse: running, after: back("enqueue"),
			do: func(ctx context.Context, id string, f url.Values) error {
				return h.client.EnqueueEvent(ctx, id, f.Get("queue"), f.Get("data"))
			}},
		{name: "delete", label: "Delete", class: "danger", question: "Delete instance %q with its executions, history, sub-orchestrations and queued messages? This cannot be undone.",
			fields: []formField{{Name: "force", Label: "Delete even if it or a sub-orchestration is running", Kind: "checkbox"}},
			refuse: func(st runtime.OrchestrationStatus, info provider.InstanceInfo) string {
				switch {
				case st.State == runtime.StatePending:
					return "the instance has not run yet: cancel it instead"
				case info.ParentInstanceID != "":
					return fmt.Sprintf("it is a sub-orchestration of %q: delete its root instead", clip(info.ParentInstanceID, 200))
				}
				return ""
			},
			after: func(string) string { return "/instances?done=delete" },
			do: func(ctx context.Context, id string, f url.Values) error {
				_, err := h.admin.DeleteInstance(ctx, id, f.Get("force") != "")
				return err
			}},
	}
}

// actionsFor lists the actions the instance page offers (none when read-only).
func (h *handler) actionsFor(d instanceData) []actionLink {
	if h.o.ReadOnly {
		return nil
	}
	var links []actionLink
	for _, a := range h.instanceActions() {
		if a.refuse(d.Status, d.Info) == "" {
			links = append(links, actionLink{a.label, h.link("/instance/"+a.name, url.Values{"id": {d.ID}}), a.class})
		}
	}
	return links
}

// confirmData is the confirmation page's data.
type confirmData struct {
	Question string
	Action   string // where the form posts
	Hidden   map[string]string
	Fields   []formField
	Submit   string
	Class    string
	Back     string
}

// target reads the instance an action names (?id= or the form's id) and refuses
// the action when it does not apply.
func (h *handler) target(r *http.Request, a instanceAction) (string, error) {
	id := r.FormValue("id")
	if id == "" {
		return "", badRequest("%s: no instance id", a.name)
	}
	st, info, err := h.lookup(r.Context(), id)
	if err != nil {
		return "", err
	}
	if why := a.refuse(st, info); why != "" {
		return "", &httpError{http.StatusConflict, fmt.Sprintf("%s instance %q: %s", a.name, clip(id, 200), why)}
	}
	return id, nil
}

func (h *handler) confirmInstanceAction(a instanceAction) func(*http.Request) (*view, error) {
	return func(r *http.Request) (*view, error) {
		id, err := h.target(r, a)
		if err != nil {
			return nil, err
		}
		return &view{page: "confirm.html", title: a.label, data: confirmData{
			Question: fmt.Sprintf(a.question, clip(id, 200)), Action: h.link("/instance/"+a.name, nil),
			Hidden: map[string]string{"id": id}, Fields: a.fields, Submit: a.label, Class: a.class,
			Back: h.link("/instance", url.Values{"id": {id}})}}, nil
	}
}

// maxFormBytes bounds a posted form: an event's data or a message is at most this.
const maxFormBytes = 1 << 20

// parseForm reads the form posted to action, at most maxFormBytes of it.
func parseForm(r *http.Request, action string) error {
	r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return badRequest("%s: reading the form: %v", action, err)
	}
	return nil
}

func (h *handler) doInstanceAction(a instanceAction) func(*http.Request) (*view, error) {
	return func(r *http.Request) (*view, error) {
		if err := parseForm(r, a.name); err != nil {
			return nil, err
		}
		id, err := h.target(r, a)
		if err != nil {
			return nil, err
		}
		for _, f := range a.fields {
			if f.Required && strings.TrimSpace(r.PostForm.Get(f.Name)) == "" {
				return nil, badRequest("%s: %s is required", a.name, strings.ToLower(f.Label))
			}
		}
		if err := a.do(r.Context(), id, r.PostForm); err != nil {
			return nil, fmt.Errorf("%s instance %q: %w", a.name, clip(id, 200), err)
		}
		return &view{redirect: a.after(id)}, nil
	}
}

// switchAction switches a named thing (a queue, a schedule) from one state to
// another (pause, resume): the thing's page offers it when applies says so for the
// thing's state S; a confirmation page (GET /<thing>/<name>) asks, and the POST
// performs it and goes back to the thing's page.
type switchAction[S any] struct {
	name     string // the action: its path under /<thing>/
	label    string
	thing    string // "queue", "schedule"
	field    string // the form field that names the thing
	question string // with %q for the thing's name
	done     string // the ?done= code of the page it goes back to; default name
	applies  func(S) bool
	do       func(ctx context.Context, target string) error
	// page is the thing's page: the path and query it goes back to.
	page func(target string) (string, url.Values)
}

func (a switchAction[S]) path() string { return "/" + a.thing + "/" + a.name }

// link is the link to the action's confirmation page for target.
func (a switchAction[S]) link(h *handler, target string) actionLink {
	return actionLink{a.label, h.link(a.path(), url.Values{a.field: {target}}), ""}
}

// target reads the name of the thing the request names.
func (a switchAction[S]) target(r *http.Request) (string, error) {
	target := r.FormValue(a.field)
	if target == "" {
		return "", badRequest("%s: no %s %s", a.name, a.thing, a.field)
	}
	return target, nil
}

// register serves the confirmation page and the POST.
func (a switchAction[S]) register(h *handler) {
	h.action(a.path(), func(r *http.Request) (*view, error) {
		target, err := a.target(r)
		if err != nil {
			return nil, err
		}
		back, query := a.page(target)
		return &view{page: "confirm.html", title: a.label, data: confirmData{
			Question: fmt.Sprintf(a.question, clip(target, 200)), Action: h.link(a.path(), nil),
			Hidden: map[string]string{a.field: target}, Submit: a.label, Back: h.link(back, query)}}, nil
	}, func(r *http.Request) (*view, error) {
		if err := parseForm(r, a.name); err != nil {
			return nil, err
		}
		target, err := a.target(r)
		if err != nil {
			return nil, err
		}
		if err := a.do(r.Context(), target); err != nil {
			return nil, fmt.Errorf("%s %s %q: %w", a.name, a.thing, clip(target, 200), err)
		}
		back, query := a.page(target)
		if query == nil {
			query = url.Values{}
		}
		query.Set("done", cmp.Or(a.done, a.name))
		return &view{redirect: back + "?" + query.Encode()}, nil
	})
}
