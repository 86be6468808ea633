package wake

import "testing"

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestWatchersNotifyClosesOnlyItsKey(t *testing.T) {
	var w Watchers
	a1, releaseA1 := w.Watch("a")
	a2, releaseA2 := w.Watch("a")
	b, releaseB := w.Watch("b")
	w.Notify("a")
	if !closed(a1) || !closed(a2) {
		t.Fatal("Notify(a) left a watcher of a open")
	}
	if closed(b) {
		t.Fatal("Notify(a) closed b's channel")
	}
	releaseA1()
	releaseA2()
	// A new watch of a after the notification is a fresh channel, which the old
	// watchers' releases above must not have forgotten.
	a3, releaseA3 := w.Watch("a")
	defer releaseA3()
	if closed(a3) {
		t.Fatal("a watch taken after Notify(a) is closed already")
	}
	w.NotifyAll()
	if !closed(a3) || !closed(b) {
		t.Fatal("NotifyAll left a channel open")
	}
	releaseB()
	if len(w.watches) != 0 {
		t.Fatalf("%d keys left after every watch was notified", len(w.watches))
	}
}

func TestWatchersReleaseForgetsUnnotifiedKeys(t *testing.T) {
	var w Watchers
	_, r1 := w.Watch("x")
	ch, r2 := w.Watch("x")
	r1()
	r1() // a second call of one release is a no-op
	if len(w.watches) != 1 {
		t.Fatalf("x forgotten while a watcher still holds it (%d keys)", len(w.watches))
	}
	r2()
	if len(w.watches) != 0 {
		t.Fatalf("%d keys left after every watcher released", len(w.watches))
	}
	if closed(ch) {
		t.Fatal("release closed the channel")
	}
	// A stale release after a newer watch of the same key keeps the newer one.
	_, r3 := w.Watch("x")
	w.Notify("x")
	_, r4 := w.Watch("x")
	r3()
	if len(w.watches) != 1 {
		t.Fatal("a stale release forgot the key's newer watch")
	}
	r4()
}

func TestWatchersKeysAreTheWatchedOnes(t *testing.T) {
	var w Watchers
	_, ra := w.Watch("a")
	_, rb := w.Watch("b")
	w.Notify("b")
	rb()
	if keys := w.Keys(); len(keys) != 1 || keys[0] != "a" {
		t.Fatalf("Keys = %q, want [a]", keys)
	}
	ra()
	if keys := w.Keys(); len(keys) != 0 {
		t.Fatalf("Keys = %q after every watch ended, want none", keys)
	}
}

func TestWatchersCloseClosesLaterWatchesToo(t *testing.T) {
	var w Watchers
	before, release := w.Watch("a")
	defer release()
	w.Close()
	after, releaseAfter := w.Watch("a")
	defer releaseAfter()
	if !closed(before) || !closed(after) {
		t.Fatal("a watch taken before or after Close is open")
	}
	if len(w.watches) != 0 {
		t.Fatalf("%d keys kept after Close", len(w.watches))
	}
}
