// Package groupcommit lets concurrent callers share one transaction: each submits
// its work and waits; a caller that finds no round running leads one, which applies
// every request waiting at that moment in one call. While a round runs, new requests
// wait for the next, which one of them leads. Nothing waits for a timer: an idle
// caller's round starts at once, and under load rounds grow by themselves (the way
// PostgreSQL and mq.Consumer's settlements group commits).
//
// Each request stays independent: when a round of several fails, its requests are
// applied again one by one, so each caller gets its own outcome and one bad request
// fails alone.
package groupcommit
