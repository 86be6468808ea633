package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/duroq/duroq/schedule"
)

// schedulesPageSize is how many schedules a page of the Schedules page shows.
const schedulesPageSize = 100

// schedulesData is what schedules.html shows.
type schedulesData struct {
	Queue     string // the queue holding the schedules
	Schedules []scheduleRow
	Next      string // the link to the next page; "" on the last
	First     string // the link to the first page; "" on it
	Done      string // what an action that redirected here did
	Instances bool   // the instance pages exist: last instances are links
}

// scheduleRow is a schedule as the Schedules page shows it.
type scheduleRow struct {
	schedule.Info
	Actions []actionLink // pause or resume; none when read-only
}

func (h *handler) schedulesPage(r *http.Request) (*view, error) {
	after := r.URL.Query().Get("after")
	page, err := h.schedules.List(r.Context(), schedule.ListOptions{After: after, Limit: schedulesPageSize})
	if err != nil {
		return nil, err
	}
	d := schedulesData{Queue: h.o.ScheduleQueue, Done: doneMessages[r.URL.Query().Get("done")], Instances: h.admin != nil}
	for _, in := range page.Schedules {
		row := scheduleRow{Info: in}
		if !h.o.ReadOnly {
			for _, a := range h.scheduleActions() {
				if a.applies(in) {
					row.Actions = append(row.Actions, actionLink{a.label, h.link("/schedule/"+a.name, url.Values{"id": {in.ID}}), ""})
				}
			}
		}
		d.Schedules = append(d.Schedules, row)
	}
	if page.Next != "" {
		d.Next = h.link("/schedules", url.Values{"after": {page.Next}})
	}
	if after != "" {
		d.First = h.link("/schedules", nil)
	}
	return &view{page: "schedules.html", title: "Schedules", data: d}, nil
}

// scheduleAction is an action on a schedule (pause, resume): a confirmation page
// (GET) and the POST that performs it.
type scheduleAction struct {
	name     string // its path under /schedule/, and its ?done= code
	label    string
	question string // with %q for the schedule id
	applies  func(in schedule.Info) bool
	do       func(ctx context.Context, id string) (schedule.Info, error)
}

func (h *handler) scheduleActions() []scheduleAction {
	return []scheduleAction{
		{name: "pause", label: "Pause",
			question: "Pause schedule %q? It fires nothing until it is resumed; a firing in progress fires nothing (an orchestration it started stays started).",
			applies:  func(in schedule.Info) bool { return !in.Paused },
			do:       h.schedules.Pause},
		{name: "resume", label: "Resume",
			question: "Resume schedule %q? It fires again from its next slot after now: the slots it missed while paused never fire.",
			applies:  func(in schedule.Info) bool { return in.Paused },
			do:       h.schedules.Resume},
	}
}

// scheduleID reads the schedule an action names (?id= or the form's id).
func (a scheduleAction) scheduleID(r *http.Request) (string, error) {
	id := r.FormValue("id")
	if id == "" {
		return "", badRequest("%s: no schedule id", a.name)
	}
	return id, nil
}

func (h *handler) confirmScheduleAction(a scheduleAction) func(*http.Request) (*view, error) {
	return func(r *http.Request) (*view, error) {
		id, err := a.scheduleID(r)
		if err != nil {
			return nil, err
		}
		return &view{page: "confirm.html", title: a.label, data: confirmData{
			Question: fmt.Sprintf(a.question, clip(id, 200)), Action: h.link("/schedule/"+a.name, nil),
			Hidden: map[string]string{"id": id}, Submit: a.label, Back: h.link("/schedules", nil)}}, nil
	}
}

func (h *handler) doScheduleAction(a scheduleAction) func(*http.Request) (*view, error) {
	return func(r *http.Request) (*view, error) {
		if err := parseForm(r, a.name); err != nil {
			return nil, err
		}
		id, err := a.scheduleID(r)
		if err != nil {
			return nil, err
		}
		if _, err := a.do(r.Context(), id); err != nil {
			return nil, fmt.Errorf("%s schedule %q: %w", a.name, clip(id, 200), err)
		}
		return &view{redirect: "/schedules?" + url.Values{"done": {"schedule-" + a.name}}.Encode()}, nil
	}
}
