package ui

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/duroq/duroq/mq"
	"github.com/duroq/duroq/runtime"
	"github.com/duroq/duroq/runtime/provider"
	"github.com/duroq/duroq/schedule"
)

// Options configure New. At least one of Provider and Queues must be set.
type Options struct {
	// Provider is the runtime's store whose instances the UI shows and acts on.
	// nil: no instance pages (a UI of queues only).
	Provider provider.ManagedProvider
	// Queues is the message queue whose queues and dead letters the UI shows and
	// redrives; it must implement mq.Admin, as duroq's queues do. nil: no queue
	// pages. For a runtime's own queues pass its provider's (adapter.Provider.Queue).
	Queues mq.MessageQueue
	// ScheduleQueue is the queue of Queues holding the schedules (see package
	// schedule) the Schedules page lists, pauses and resumes. Default
	// schedule.DefaultQueue. The page exists when Queues is set and implements
	// what schedule.NewManager needs, as duroq's queues do.
	ScheduleQueue string
	// ReadOnly hides every action and answers every POST with 403 Forbidden.
	ReadOnly bool
	// Prefix is the path the handler is mounted under, without a trailing slash:
	// "/duroq" when mounted with mux.Handle("/duroq/", http.StripPrefix("/duroq",
	// h)). Default "": mounted at the root.
	Prefix string
	// Now is the clock of the overview's recent windows and of "ago" times.
	// Default time.Now.
	Now func() time.Time
	// Logger receives the errors behind 500 answers. Default: none (silent).
	Logger *slog.Logger
}

// ErrNoSource is returned by New when neither Options.Provider nor Options.Queues
// is set.
var ErrNoSource = errors.New("ui: Options.Provider and Options.Queues are both nil: nothing to show")

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets/style.css
var styleCSS []byte

// queueAdmin is what the queue pages use of a queue.
type queueAdmin interface {
	mq.MessageQueue
	mq.Admin
}

// handler serves the UI.
type handler struct {
	o      Options
	admin  provider.ProviderAdmin // nil without Options.Provider
	queues queueAdmin             // nil without Options.Queues
	// schedules manages the schedules of Options.ScheduleQueue; nil without a
	// Schedules page.
	schedules *schedule.Manager
	client    *runtime.Client // nil without Options.Provider
	pages     map[string]*template.Template
	mux       *http.ServeMux
	csrf      *http.CrossOriginProtection
}

// New returns the UI as an http.Handler. Serve it on a loopback address or behind
// the application's authentication: it has none of its own.
func New(o Options) (http.Handler, error) {
	if o.Provider == nil && o.Queues == nil {
		return nil, ErrNoSource
	}
	if o.Prefix != "" && (!strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/")) {
		return nil, fmt.Errorf("ui: Options.Prefix %q must start with / and not end with one", clip(o.Prefix, 100))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.ScheduleQueue = cmp.Or(o.ScheduleQueue, schedule.DefaultQueue)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{o: o, mux: http.NewServeMux(), csrf: http.NewCrossOriginProtection()}
	if o.Queues != nil {
		var ok bool
		if h.queues, ok = o.Queues.(queueAdmin); !ok {
			return nil, fmt.Errorf("ui: Options.Queues: the %T queue does not implement mq.Admin", o.Queues)
		}
		if _, ok := o.Queues.(mq.TxQueue); ok {
			var err error
			if h.schedules, err = schedule.NewManager(o.Queues, schedule.ManagerOptions{Queue: o.ScheduleQueue, Now: o.Now}); err != nil {
				return nil, fmt.Errorf("ui: Options.ScheduleQueue: %w", err)
			}
		}
	}
	if o.Provider != nil {
		h.admin = o.Provider.Management()
		h.client = runtime.NewClient(o.Provider)
	}
	var err error
	if h.pages, err = parsePages(h.funcs()); err != nil {
		return nil, err
	}
	h.routes()
	return h, nil
}

// routes registers every page; the instance and queue pages only when their
// source is set.
func (h *handler) routes() {
	h.mux.HandleFunc("GET /assets/style.css", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Write(styleCSS)
	})
	h.mux.Handle("GET /{$}", h.page(h.overview))
	if h.admin != nil {
		h.mux.Handle("GET /instances", h.page(h.instances))
		h.mux.Handle("GET /instance", h.page(h.instance))
		for _, a := range h.instanceActions() {
			h.action("/instance/"+a.name, h.confirmInstanceAction(a), h.doInstanceAction(a))
		}
	}
	if h.queues != nil {
		h.mux.Handle("GET /queues", h.page(h.queueList))
		h.mux.Handle("GET /queue", h.page(h.queue))
		for _, a := range h.messageActions() {
			h.action("/queue/"+a.name, h.confirmMessageAction(a), h.doMessageAction(a))
		}
		for _, a := range h.queueActions() {
			a.register(h)
		}
	}
	if h.schedules != nil {
		h.mux.Handle("GET /schedules", h.page(h.schedulesPage))
		for _, a := range h.scheduleActions() {
			a.register(h)
		}
	}
	h.mux.Handle("/", h.page(func(*http.Request) (*view, error) {
		return nil, &httpError{http.StatusNotFound, "no such page"}
	}))
}

// action registers an action at path: its confirmation page (GET) and the POST
// that performs it.
func (h *handler) action(path string, confirm, do func(*http.Request) (*view, error)) {
	h.mux.Handle("GET "+path, h.page(confirm))
	h.mux.Handle("POST "+path, h.page(do))
}

// ServeHTTP sets the headers every answer carries and refuses cross-origin and,
// in read-only mode, all POSTs before any handler runs.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	if r.Method == http.MethodPost && h.o.ReadOnly {
		h.fail(w, r, &httpError{http.StatusForbidden, "this UI is read-only"})
		return
	}
	if err := h.csrf.Check(r); err != nil {
		h.fail(w, r, &httpError{http.StatusForbidden, "cross-origin request refused: actions must come from this UI's own pages"})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// view is what a page handler renders (template page with data), or where it
// redirects to after an action (redirect set).
type view struct {
	page     string // the template, e.g. "instances.html"
	title    string
	data     any
	redirect string // a path of the UI (without Prefix) to redirect to with 303
}

// httpError is an error answered with its status code and message.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

// badRequest is a 400 answer naming what was wrong.
func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// page adapts a page handler: renders its view in the layout, or its error.
func (h *handler) page(f func(*http.Request) (*view, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := f(r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if v.redirect != "" {
			http.Redirect(w, r, h.o.Prefix+v.redirect, http.StatusSeeOther)
			return
		}
		h.render(w, http.StatusOK, v)
	})
}

// layoutData is what the layout template sees.
type layoutData struct {
	Title     string
	Nav       string // the active navigation entry
	Instances bool   // the instance pages exist
	Queues    bool   // the queue pages exist
	Schedules bool   // the Schedules page exists
	ReadOnly  bool
	Data      any // the page's own data
}

// render writes v's page; it renders into a buffer first so that a template error
// answers 500 instead of half a page.
func (h *handler) render(w http.ResponseWriter, code int, v *view) {
	var buf bytes.Buffer
	nav, _, _ := strings.Cut(v.page, ".")
	err := h.pages[v.page].ExecuteTemplate(&buf, "layout", layoutData{Title: v.title, Nav: nav,
		Instances: h.admin != nil, Queues: h.queues != nil, Schedules: h.schedules != nil, ReadOnly: h.o.ReadOnly, Data: v.data})
	if err != nil {
		h.o.Logger.Error("ui: render", "page", v.page, "err", err)
		http.Error(w, "ui: rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	io.Copy(w, &buf)
}

// fail answers err: its code for an httpError, 404 for provider.ErrNotFound, else
// 500. The message shown is bounded.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	var he *httpError
	switch {
	case errors.As(err, &he):
		code = he.code
	case errors.Is(err, provider.ErrNotFound), errors.Is(err, schedule.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, provider.ErrInvalid), errors.Is(err, mq.ErrInvalid), errors.Is(err, schedule.ErrInvalid):
		code = http.StatusBadRequest
	default:
		h.o.Logger.Error("ui: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	h.render(w, code, &view{page: "error.html", title: http.StatusText(code),
		data: struct {
			Code    int
			Message string
		}{code, clip(err.Error(), 2000)}})
}

// link is a path of the UI with its query, under Options.Prefix.
func (h *handler) link(path string, query url.Values) string {
	if len(query) == 0 {
		return h.o.Prefix + path
	}
	return h.o.Prefix + path + "?" + query.Encode()
}

// parsePages parses each page's template with the layout.
func parsePages(funcs template.FuncMap) (map[string]*template.Template, error) {
	names, err := templateFS.ReadDir("templates")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		if n.Name() == "layout.html" {
			continue
		}
		t, err := template.New(n.Name()).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n.Name())
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", n.Name(), err)
		}
		pages[n.Name()] = t
	}
	return pages, nil
}

// funcs are the templates' helpers.
func (h *handler) funcs() template.FuncMap {
	return template.FuncMap{
		// href builds a link from a path and key/value pairs, skipping empty values.
		"href": func(path string, kv ...string) string {
			q := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] != "" {
					q.Set(kv[i], kv[i+1])
				}
			}
			return h.link(path, q)
		},
		"asset": func(path string) string { return h.o.Prefix + path },
		"when":  when,
		"ago":   func(t time.Time) string { return ago(h.o.Now(), t) },
		"clip":  func(s string) string { return clip(s, displayLimit) },
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
		"lower": strings.ToLower,
		"span":  span,
	}
}

// span formats d without the zero units Duration.String keeps: "1m", "1h", "1m30s".
func span(d time.Duration) string {
	s := strings.TrimSuffix(d.String(), "m0s")
	if s != d.String() {
		s = strings.TrimSuffix(s+"m", "h0m")
		if !strings.HasSuffix(s, "m") {
			s += "h"
		}
	}
	return s
}

// displayLimit bounds every stored value a page shows (inputs, outputs, payloads,
// errors): a megabyte payload must not make a megabyte page.
const displayLimit = 4096

// clip bounds s to n bytes, saying how much was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes in all)", strings.ToValidUTF8(s[:n], ""), len(s))
}

const timeLayout = "2006-01-02 15:04:05.000 UTC"

// when formats t in UTC to the millisecond ("" for the zero time).
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

// ago says how long before now t was, coarsely ("3m ago"); "" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + coarse(-d)
	}
	return coarse(d) + " ago"
}

func coarse(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
