// Package ui is duroq's operator web UI: an http.Handler that an application mounts
// (or that `duroq ui` serves) to see and fix what runs.
//
// It shows instances with filters and cursor paging, an instance's status,
// input, output, failure, custom status, KV, executions, history timeline and tree
// of sub-orchestrations, and the message queues with their ready, delayed and locked
// counts, their limits and whether they are paused, their messages (the runtime's
// work items decoded) and their dead letters with reasons, and the schedules (see
// package schedule) with their next slot and state. Its actions — cancel, raise an
// event, send a queue message, delete an instance, redrive dead letters, delete a
// message, pause or resume a queue or a schedule — each ask for confirmation on a
// page of their own and are POSTs that cross-origin requests cannot forge
// (http.CrossOriginProtection). Options.ReadOnly removes them.
//
// Every page reads a bounded amount: listings are pages of the management API, an
// instance's history is shown a page of events at a time. Its templates and
// stylesheet are embedded: it needs no network and no JavaScript.
package ui
