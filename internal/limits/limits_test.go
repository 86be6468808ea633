package limits

import (
	"math"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestAvailableRefillsUpToTheRate(t *testing.T) {
	r := Rule{Rate: 10, Per: time.Second, Tokens: 2, Refilled: t0}
	for _, c := range []struct {
		at   time.Time
		want float64
	}{
		{t0, 2},
		{t0.Add(500 * time.Millisecond), 7},
		{t0.Add(time.Hour), 10}, // capped at Rate
		{t0.Add(-time.Hour), 2}, // a clock behind Refilled adds nothing
		{t0.Add(100 * time.Millisecond), 3},
	} {
		if got := r.Available(c.at); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Available(%v) = %v, want %v", c.at.Sub(t0), got, c.want)
		}
	}
	if got := (Rule{MaxInFlight: 3}).Available(t0); !math.IsInf(got, 1) {
		t.Errorf("Available without a rate = %v, want +Inf", got)
	}
}

func TestBudgetCountsBatchesOncePerGroup(t *testing.T) {
	b := New(t0, []Rule{{MaxInFlight: 3}, {Group: "g", MaxInFlight: 2}, {Group: "h", MaxInFlight: 1}},
		[]Held{{"t1", "g"}, {"t1", "g"}, {"t1", "h"}, {"t2", ""}})
	if b.InFlight("") != 2 || b.InFlight("g") != 1 || b.InFlight("h") != 1 || b.InFlight("none") != 0 {
		t.Fatalf("InFlight = %d, g %d, h %d; want 2, 1, 1", b.InFlight(""), b.InFlight("g"), b.InFlight("h"))
	}
	if got := b.Blocked(); !slices.Equal(got, []string{"h"}) || b.Closed() {
		t.Fatalf("Blocked = %q, Closed = %v; want [h], false", got, b.Closed())
	}
	b.Took([]string{"g", "g"})
	if got := b.Blocked(); !slices.Equal(got, []string{"g", "h"}) || !b.Closed() {
		t.Fatalf("after a batch of g: Blocked = %q, Closed = %v; want [g h], true", got, b.Closed())
	}
	if b.MaxMessages("g") != math.MaxInt || len(b.Spent()) != 0 || !b.Refill().IsZero() {
		t.Fatal("limits without rates cut no batch, spend no token and wait for no refill")
	}
}

func TestBudgetSpendsTokensAndSaysWhenTheNextComes(t *testing.T) {
	b := New(t0, []Rule{{Rate: 4, Per: time.Second, Tokens: 1.5, Refilled: t0.Add(-time.Second)}, {Group: "g", Rate: 2, Per: time.Minute, Tokens: 2, Refilled: t0}}, nil)
	if b.MaxMessages("") != 4 || b.MaxMessages("g") != 2 {
		t.Fatalf("MaxMessages = %d, g %d; want 4 (refilled to the rate), 2", b.MaxMessages(""), b.MaxMessages("g"))
	}
	b.Took([]string{"g", "g", ""})
	if b.Closed() || !slices.Equal(b.Blocked(), []string{"g"}) {
		t.Fatalf("after 3 messages: Closed = %v, Blocked = %q; want open, [g]", b.Closed(), b.Blocked())
	}
	spent := b.Spent()
	if len(spent) != 2 || spent[0].Tokens != 1 || spent[1].Tokens != 0 || !spent[0].Refilled.Equal(t0) {
		t.Fatalf("Spent = %+v; want the queue's at 1 token and g's at 0, refilled now", spent)
	}
	if want := t0.Add(30 * time.Second); !b.Refill().Equal(want) {
		t.Fatalf("Refill = %v, want %v (g's next token)", b.Refill().Sub(t0), want.Sub(t0))
	}
}

func TestEarliest(t *testing.T) {
	a, b := t0, t0.Add(time.Second)
	for _, c := range [][3]time.Time{{a, b, a}, {b, a, a}, {{}, b, b}, {a, {}, a}, {{}, {}, {}}} {
		if got := Earliest(c[0], c[1]); !got.Equal(c[2]) {
			t.Errorf("Earliest(%v, %v) = %v, want %v", c[0], c[1], got, c[2])
		}
	}
}
