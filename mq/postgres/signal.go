package postgres

import (
	"hash/fnv"
	"strconv"
)

// Signals are wake-ups by name that are not about a queue's messages: the runtime's
// clients waiting for one instance (an execution that ends in another process) are
// woken by a signal of the instance, not by polling its state. They ride the
// notifier's statements on a channel of their own, so that long polls never wake
// for them.

// signalChannelExpr is the NOTIFY channel of the schema's signals, whose payload is
// a signal key.
const signalChannelExpr = `'duroq_sig_' || to_hex(hashtextextended(current_schema(), 0))`

// signalKey is what a signal of name carries: a 64-bit FNV-1a hash in hex. The
// payload stays small however long the name (PostgreSQL refuses payloads of 8,000
// bytes or more), and a collision only wakes a watcher that then finds nothing new.
func signalKey(name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return strconv.FormatUint(h.Sum64(), 16)
}

// Signal wakes the watchers of names (see Watch): this process's at once, every
// other process's through a NOTIFY sent right after, in the statement that carries
// the queues' wake-ups (see Notify). Call it once the transaction that made the
// change the watchers wait for has committed.
func (q *Queue) Signal(names ...string) {
	if len(names) == 0 {
		return
	}
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i] = signalKey(name)
		q.watchers.Notify(keys[i])
	}
	q.notes.add(q, nil, keys)
}

// Watch returns a channel closed by the next Signal of name from any process
// sharing the schema, and a function that ends the watch, to call once the caller
// stops waiting. Take it before reading the state it announces changes of. It
// starts the queue's listener if none runs. The channel also closes when the
// listener (re)connects, as signals sent while it was down are lost, and at Close.
// A process that dies between its commit and its NOTIFY signals nothing: watchers
// must also look again now and then. Where no listener can run (a pool of one
// connection, a driver other than pgx's) the channel is nil: no signal will come.
func (q *Queue) Watch(name string) (<-chan struct{}, func()) {
	q.startListening()
	if q.deaf.Load() {
		return nil, func() {}
	}
	return q.watchers.Watch(signalKey(name))
}
