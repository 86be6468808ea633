package main

import (
	"compress/gzip"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"
)

// With -otel otlp the demo exports its spans and metrics over OTLP/HTTP to the
// -otel-endpoint given, which overrides the environment's: one trace per order, its
// root span the parent of the order's first turn, every turn and activity in an
// order's trace, and the runtime's metrics, all from the service duroq-demo.
func TestDemoOTLP(t *testing.T) {
	// Where the environment says to export: the flag must win. Traces are gzipped,
	// metrics not, so that the collector reads both encodings.
	setOTelEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":                       "http://127.0.0.1:9/wrong",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":                "http://127.0.0.1:9/wrong/v1/traces",
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":               "http://127.0.0.1:9/wrong/v1/metrics",
		"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION":             "gzip",
		"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION":            "none",
		"OTEL_EXPORTER_OTLP_COMPRESSION":                    "",
		"OTEL_EXPORTER_OTLP_PROTOCOL":                       "",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":                "",
		"OTEL_SERVICE_NAME":                                 "",
		"OTEL_RESOURCE_ATTRIBUTES":                          "",
		"OTEL_EXPORTER_OTLP_HEADERS":                        "",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":                 "",
		"OTEL_EXPORTER_OTLP_METRICS_HEADERS":                "",
		"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "",
	})
	c := startCollector(t, http.StatusOK)
	var out, errOut strings.Builder
	db := filepath.Join(t.TempDir(), "demo.db")
	const orders = 3
	if err := runDemo([]string{"-db", db, "-orders", fmt.Sprint(orders), "-work", "1ms", "-otel", "otlp", "-otel-endpoint", c.url}, &out, &errOut); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), fmt.Sprintf("all %d orders completed", orders)) || strings.Contains(out.String(), "{") {
		t.Errorf("demo output, want its report and no telemetry:\n%s", out.String())
	}
	if errOut.Len() > 0 {
		t.Errorf("the demo reported an export failure:\n%s", errOut.String())
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.gzipped["/v1/traces"] || c.gzipped["/v1/metrics"] {
		t.Errorf("gzipped requests: %v, want the traces' only (as the environment asks)", c.gzipped)
	}
	traces := map[string][]otlpSpan{} // trace id → its spans
	var roots []otlpSpan
	for _, s := range c.spans {
		if s.service != demoServiceName {
			t.Errorf("span %q from service %q, want %q", s.name, s.service, demoServiceName)
		}
		traces[s.traceID] = append(traces[s.traceID], s)
		if strings.HasPrefix(s.name, "order order-") {
			roots = append(roots, s)
		}
	}
	if len(roots) != orders {
		t.Fatalf("%d order root spans, want %d; spans: %v", len(roots), orders, c.spans)
	}
	for _, root := range roots {
		id := strings.TrimPrefix(root.name, "order ")
		if root.parentID != "" {
			t.Errorf("%s: the order's span has a parent %s, want a root", id, root.parentID)
		}
		var names []string
		first := false
		for _, s := range traces[root.traceID] {
			names = append(names, s.name)
			if s.name == "turn ProcessOrder" && s.parentID == root.spanID {
				first = true
				if got := s.attrs["duroq.instance.id"]; got != id {
					t.Errorf("%s: its first turn is instance %q's", id, got)
				}
			}
		}
		if !first {
			t.Errorf("%s: no ProcessOrder turn is a child of the order's span %s", id, root.spanID)
		}
		for _, want := range []string{"turn ProcessOrder", "turn ShipOrder", "activity ReserveItem", "activity ChargeCard", "activity PackItem", "activity NotifyCustomer"} {
			if !slices.Contains(names, want) {
				t.Errorf("%s: its trace %s has no %q: %v", id, root.traceID, want, names)
			}
		}
	}
	if len(traces) != orders {
		for id, spans := range traces {
			if !slices.ContainsFunc(roots, func(r otlpSpan) bool { return r.traceID == id }) {
				t.Errorf("trace %s is no order's: %v", id, spans)
			}
		}
	}

	for _, want := range []string{"duroq.turn.duration", "duroq.activity.duration"} {
		if !slices.Contains(c.metrics, demoServiceName+" "+want) {
			t.Errorf("no metric %q from %s; got %v", want, demoServiceName, c.metrics)
		}
	}
}

// A collector that refuses the telemetry does not fail the demo: its work is done,
// and the failure is reported on errOut.
func TestDemoOTLPExportFailure(t *testing.T) {
	setOTelEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": ""})
	c := startCollector(t, http.StatusInternalServerError)
	var out, errOut strings.Builder
	db := filepath.Join(t.TempDir(), "demo.db")
	if err := runDemo([]string{"-db", db, "-orders", "1", "-work", "1ms", "-otel", "otlp", "-otel-endpoint", c.url + "/"}, &out, &errOut); err != nil {
		t.Fatalf("demo: %v, want its work done whatever the collector says\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "all 1 orders completed") {
		t.Errorf("demo output:\n%s", out.String())
	}
	for _, want := range []string{"duroq demo: -otel otlp: exporting the last spans failed: ", "duroq demo: -otel otlp: exporting the last metrics failed: ", "500 Internal Server Error"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("errOut lacks %q:\n%s", want, errOut.String())
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.posts["/v1/traces"] == 0 || c.posts["/v1/metrics"] == 0 {
		t.Errorf("posts: %v, want traces and metrics (a base URL's trailing slash is no path of its own)", c.posts)
	}
}

// -otel and -otel-endpoint are checked before anything is opened: an unknown
// exporter, an endpoint without otlp, an endpoint that is no http(s) URL; the value
// quoted, bounded.
func TestDemoOTelFlagsRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "demo.db")
	long := "http//" + strings.Repeat("x", 5000)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-otel", "jaeger"}, `demo: -otel "jaeger": want stdout or otlp`},
		{[]string{"-otel", strings.Repeat("j", 5000)}, "want stdout or otlp"},
		{[]string{"-otel-endpoint", "http://localhost:4318"}, `demo: -otel-endpoint "http://localhost:4318" needs -otel otlp`},
		{[]string{"-otel", "stdout", "-otel-endpoint", "http://localhost:4318"}, "needs -otel otlp"},
		{[]string{"-otel", "otlp", "-otel-endpoint", "localhost:4318"}, `demo: -otel-endpoint "localhost:4318": want an http:// or https:// URL, such as http://localhost:4318`},
		{[]string{"-otel", "otlp", "-otel-endpoint", "http:///v1"}, "want an http:// or https:// URL"},
		{[]string{"-otel", "otlp", "-otel-endpoint", long}, "want an http:// or https:// URL"},
	} {
		var out, errOut strings.Builder
		err := runDemo(append([]string{"-db", db}, tc.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 400 {
			t.Errorf("%.80q: %.500v, want a short error with %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("a refused demo opened its database: %v", err)
	}
}

// setOTelEnv sets the environment variables for the test.
func setOTelEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
}

// otlpSpan is a span as a collector received it, ids in hex.
type otlpSpan struct {
	service, name, traceID, spanID, parentID string
	attrs                                    map[string]string // the string ones
}

// collector is an OTLP/HTTP collector: it keeps what is posted to /v1/traces and
// /v1/metrics, and answers with status.
type collector struct {
	url    string
	status int

	mu      sync.Mutex
	spans   []otlpSpan
	metrics []string // "service metric"
	posts   map[string]int
	gzipped map[string]bool
}

// startCollector starts a collector answering with status, closed when the test ends.
func startCollector(t *testing.T, status int) *collector {
	c := &collector{status: status, posts: map[string]int{}, gzipped: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.receive(r); err != nil {
			t.Errorf("collector: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if c.status != http.StatusOK {
			http.Error(w, "refused", c.status)
			return
		}
		var resp proto.Message = &coltracepb.ExportTraceServiceResponse{}
		if r.URL.Path == "/v1/metrics" {
			resp = &colmetricpb.ExportMetricsServiceResponse{}
		}
		body, err := proto.Marshal(resp)
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

// receive decodes an export request and keeps what it carries.
func (c *collector) receive(r *http.Request) error {
	if r.Method != http.MethodPost {
		return errors.New("want POST")
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return fmt.Errorf("content type %q, want application/x-protobuf", ct)
	}
	var body io.Reader = r.Body
	gzipped := r.Header.Get("Content-Encoding") == "gzip"
	if gzipped {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return err
		}
		body = gz
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.posts[r.URL.Path]++
	c.gzipped[r.URL.Path] = c.gzipped[r.URL.Path] || gzipped
	switch r.URL.Path {
	case "/v1/traces":
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return err
		}
		for _, rs := range req.ResourceSpans {
			service := serviceName(rs.Resource)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					c.spans = append(c.spans, otlpSpan{service: service, name: s.Name,
						traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId),
						parentID: hex.EncodeToString(s.ParentSpanId), attrs: stringAttrs(s.Attributes)})
				}
			}
		}
	case "/v1/metrics":
		var req colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return err
		}
		for _, rm := range req.ResourceMetrics {
			service := serviceName(rm.Resource)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					c.metrics = append(c.metrics, service+" "+m.Name)
				}
			}
		}
	default:
		return errors.New("no such path")
	}
	return nil
}

// serviceName returns the service.name of a resource.
func serviceName(r *resourcepb.Resource) string {
	return stringAttrs(r.GetAttributes())["service.name"]
}

// stringAttrs returns the attributes whose values are strings.
func stringAttrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		if v, ok := kv.Value.GetValue().(*commonpb.AnyValue_StringValue); ok {
			out[kv.Key] = v.StringValue
		}
	}
	return out
}
