// Package tracectx carries an OpenTelemetry span across processes as a W3C
// traceparent string, the form duroq stores in work items, history events and queue
// messages. It needs OpenTelemetry's API only: without an SDK no span is valid and
// every function here is a cheap no-op.
package tracectx
