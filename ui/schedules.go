package ui

import (
	"context"
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
					row.Actions = append(row.Actions, a.link(h, in.ID))
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

// scheduleActions pause and resume a schedule from the Schedules page.
func (h *handler) scheduleActions() []switchAction[schedule.Info] {
	pause := func(ctx context.Context, id string) error { _, err := h.schedules.Pause(ctx, id); return err }
	resume := func(ctx context.Context, id string) error { _, err := h.schedules.Resume(ctx, id); return err }
	page := func(string) (string, url.Values) { return "/schedules", nil }
	return []switchAction[schedule.Info]{
		{name: "pause", label: "Pause", field: "id", thing: "schedule", done: "schedule-pause",
			question: "Pause schedule %q? It fires nothing until it is resumed; a firing in progress fires nothing (an orchestration it started stays started).",
			applies:  func(in schedule.Info) bool { return !in.Paused },
			do:       pause,
			page:     page},
		{name: "resume", label: "Resume", field: "id", thing: "schedule", done: "schedule-resume",
			question: "Resume schedule %q? It fires again from its next slot after now: the slots it missed while paused never fire.",
			applies:  func(in schedule.Info) bool { return in.Paused },
			do:       resume,
			page:     page},
	}
}
