package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The demo's telemetry: its service name, the collector's address when neither
// -otel-endpoint nor the OTLP environment names one, and how long the exit waits
// for the last spans and metrics to be exported.
const (
	demoServiceName     = "duroq-demo"
	defaultOTLPEndpoint = "http://localhost:4318"
	otelShutdownTimeout = 5 * time.Second
)

// demoOTel is the OpenTelemetry SDK that -otel sets up for the demo: the providers
// the runtime gets, and what exports their last data at exit.
type demoOTel struct {
	to string // "stdout" or "otlp"
	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider
	// flush, when set, exports the metrics once before mp shuts down (stdout: a
	// manual reader, so that they are printed once, at exit).
	flush func(context.Context) error
}

// newDemoOTel sets up what -otel to asks for: "stdout" prints the spans on out as
// they end and the metrics once at exit, a JSON object each; "otlp" exports both over
// OTLP/HTTP to endpoint (a base URL: /v1/traces and /v1/metrics are added) or, when
// it is empty, where OTEL_EXPORTER_OTLP_ENDPOINT and the signal's own variable say,
// else http://localhost:4318. It returns nil for "" and refuses an endpoint without
// otlp. Nothing connects yet.
func newDemoOTel(ctx context.Context, to, endpoint string, out io.Writer) (*demoOTel, error) {
	if endpoint != "" && to != "otlp" {
		return nil, fmt.Errorf("demo: -otel-endpoint %q needs -otel otlp", clip(endpoint))
	}
	if to == "" {
		return nil, nil
	}
	var base *url.URL
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("demo: -otel-endpoint %q: want an http:// or https:// URL, such as %s", clip(endpoint), defaultOTLPEndpoint)
		}
		base = u
	}
	var o demoOTel
	var spans sdktrace.SpanExporter
	var reader sdkmetric.Reader
	switch to {
	case "stdout":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return nil, err
		}
		metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(out))
		if err != nil {
			return nil, err
		}
		manual := sdkmetric.NewManualReader()
		o.flush = func(ctx context.Context) error {
			var rm metricdata.ResourceMetrics
			if err := manual.Collect(ctx, &rm); err != nil {
				return err
			}
			return errors.Join(metrics.Export(ctx, &rm), metrics.Shutdown(ctx))
		}
		spans, reader = exp, manual
	case "otlp":
		var traceOpts []otlptracehttp.Option
		if u := otlpURL(base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "v1/traces"); u != "" {
			traceOpts = append(traceOpts, otlptracehttp.WithEndpointURL(u))
		}
		exp, err := otlptracehttp.New(ctx, traceOpts...)
		if err != nil {
			return nil, err
		}
		var metricOpts []otlpmetrichttp.Option
		if u := otlpURL(base, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "v1/metrics"); u != "" {
			metricOpts = append(metricOpts, otlpmetrichttp.WithEndpointURL(u))
		}
		metrics, err := otlpmetrichttp.New(ctx, metricOpts...)
		if err != nil {
			return nil, err
		}
		spans, reader = exp, sdkmetric.NewPeriodicReader(metrics) // and once more at exit
	default:
		return nil, fmt.Errorf("demo: -otel %q: want stdout or otlp", clip(to))
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set, override.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(demoServiceName)), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("demo: -otel: resource: %v", clip(err.Error()))
	}
	o.to = to
	o.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	return &o, nil
}

// otlpURL returns the URL of a signal's OTLP/HTTP endpoint: path under base when
// base is set; else "" when OTEL_EXPORTER_OTLP_ENDPOINT or the signal's variable
// env is set, for the exporter reads them; else path under http://localhost:4318
// (left to itself, the exporter would use https).
func otlpURL(base *url.URL, env, path string) string {
	if base == nil {
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv(env) != "" {
			return ""
		}
		base, _ = url.Parse(defaultOTLPEndpoint)
	}
	return base.JoinPath(path).String()
}

// shutdown exports the last spans and metrics and stops the providers, waiting
// otelShutdownTimeout at most. It reports a failure on errOut and returns nothing:
// telemetry lost does not undo the demo's work. A nil o does nothing.
func (o *demoOTel) shutdown(ctx context.Context, errOut io.Writer) {
	if o == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), otelShutdownTimeout)
	defer cancel()
	var spansErr, metricsErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		// Shutdown would hand the last export's error to otel.Handle; ForceFlush
		// returns it.
		flushErr := o.tp.ForceFlush(ctx)
		stopErr := o.tp.Shutdown(ctx)
		if flushErr != nil && errors.Is(stopErr, context.DeadlineExceeded) {
			stopErr = nil // the same timeout, said once
		}
		spansErr = errors.Join(flushErr, stopErr)
	})
	wg.Go(func() {
		if o.flush != nil {
			metricsErr = o.flush(ctx)
		}
		metricsErr = errors.Join(metricsErr, o.mp.Shutdown(ctx))
	})
	wg.Wait()
	for _, failed := range []struct {
		what string
		err  error
	}{{"spans", spansErr}, {"metrics", metricsErr}} {
		if failed.err == nil {
			continue
		}
		msg := strings.ReplaceAll(failed.err.Error(), "\n", "; ") // errors.Join's lines
		if errors.Is(failed.err, context.DeadlineExceeded) {
			msg += fmt.Sprintf(" (gave up after %v)", otelShutdownTimeout)
		}
		fmt.Fprintf(errOut, "duroq demo: -otel %s: exporting the last %s failed: %s\n", o.to, failed.what, truncate(msg, 1000))
	}
}
