package schedule

import (
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests name, whatever the machine has
)

func mustSlots(t *testing.T, s Schedule) slots {
	t.Helper()
	s.ID = "s"
	s.Enqueue = &EnqueueTarget{Queue: "q"}
	_, sl, err := s.normalize("test", DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	return sl
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// walk lists the slots in (from, to] one Next at a time: what latest must agree with.
func walk(sl slots, from, to time.Time) []time.Time {
	var out []time.Time
	for t := sl.next(from); !t.IsZero() && !t.After(to); t = sl.next(t) {
		out = append(out, t)
	}
	return out
}

func TestIntervalSlots(t *testing.T) {
	sl := mustSlots(t, Schedule{Every: 15 * time.Minute, Anchor: utc("2026-01-01T00:05:00Z")})
	if every := mustSlots(t, Schedule{Every: time.Second}); len(every.latest(utc("2025-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z"), 3)) != 3 {
		t.Fatal("latest 3 of a year of seconds")
	}
	if got, want := sl.next(utc("2026-03-01T10:00:00Z")), utc("2026-03-01T10:05:00Z"); !got.Equal(want) {
		t.Fatalf("next = %v, want %v", got, want)
	}
	if got, want := sl.next(utc("2026-03-01T10:05:00Z")), utc("2026-03-01T10:20:00Z"); !got.Equal(want) {
		t.Fatalf("next of a slot = %v, want the following slot %v", got, want)
	}
	// Before the anchor, the slots keep its phase.
	if got, want := sl.next(utc("2025-12-31T23:45:00Z")), utc("2025-12-31T23:50:00Z"); !got.Equal(want) {
		t.Fatalf("next before the anchor = %v, want %v", got, want)
	}
	from, to := utc("2026-03-01T10:05:00Z"), utc("2026-03-01T11:10:00Z")
	if got, want := sl.latest(from, to, 100), []time.Time{from, utc("2026-03-01T10:20:00Z"), utc("2026-03-01T10:35:00Z"),
		utc("2026-03-01T10:50:00Z"), utc("2026-03-01T11:05:00Z")}; !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("latest = %v, want %v", got, want)
	}
	if got := sl.latest(from, to, 2); !slices.EqualFunc(got, []time.Time{utc("2026-03-01T10:50:00Z"), utc("2026-03-01T11:05:00Z")}, time.Time.Equal) {
		t.Fatalf("latest 2 = %v", got)
	}
	if got := sl.latest(to, from, 10); len(got) != 0 {
		t.Fatalf("latest of an empty range = %v", got)
	}
}

func TestCronLatestMatchesWalking(t *testing.T) {
	for _, c := range []struct{ cron, zone string }{
		{"*/7 * * * *", ""},
		{"0 9 * * MON-FRI", "Europe/Paris"},
		{"* * 1 * *", ""}, // every minute of the first day of each month: bursts
		{"*/10 * * * * *", ""},
		{"@hourly", "America/New_York"},
	} {
		sl := mustSlots(t, Schedule{Cron: c.cron, TimeZone: c.zone})
		from, to := utc("2026-02-20T10:00:00Z"), utc("2026-03-10T12:34:56Z")
		all := append([]time.Time{}, walk(sl, from.Add(-time.Nanosecond), to)...)
		for _, n := range []int{1, 5, 100} {
			got := sl.latest(from, to, n)
			want := all[max(0, len(all)-n):]
			if !slices.EqualFunc(got, want, time.Time.Equal) {
				t.Errorf("%q in %q: latest %d = %v, want %v", c.cron, c.zone, n, got, want)
			}
		}
	}
}

// What robfig/cron does around daylight saving (documented in doc.go).
func TestCronDaylightSaving(t *testing.T) {
	ny := func(s string) time.Time {
		loc, _ := time.LoadLocation("America/New_York")
		v, err := time.ParseInLocation("2006-01-02 15:04 MST", s, loc)
		if err != nil {
			panic(err)
		}
		return v
	}
	for _, c := range []struct {
		cron     string
		from, to time.Time
		want     []string
	}{
		// Clocks jump 02:00 -> 03:00 on 2026-03-08: 02:30 does not exist that day.
		{"30 2 * * *", ny("2026-03-07 00:00 EST"), ny("2026-03-09 12:00 EDT"),
			[]string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}},
		// Clocks fall back 02:00 -> 01:00 on 2026-11-01: 01:30 happens twice.
		{"30 1 * * *", ny("2026-10-31 12:00 EDT"), ny("2026-11-01 12:00 EST"),
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"}},
	} {
		sl := mustSlots(t, Schedule{Cron: c.cron, TimeZone: "America/New_York"})
		var got []string
		for _, s := range walk(sl, c.from, c.to) {
			got = append(got, s.Format(time.RFC3339))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: slots %v, want %v", c.cron, got, c.want)
		}
	}
}

func TestSlotID(t *testing.T) {
	for _, c := range []struct {
		id   string
		slot time.Time
		want string
	}{
		{"nightly", utc("2026-01-02T03:00:00Z"), "nightly@2026-01-02T03:00:00Z"},
		{"a@b", time.Date(2026, 1, 2, 4, 0, 0, 0, time.FixedZone("", 3600)), "a@b@2026-01-02T03:00:00Z"},
		{"fast", utc("2026-01-02T03:00:00.1Z"), "fast@2026-01-02T03:00:00.1Z"},
	} {
		got := SlotID(c.id, c.slot)
		if got != c.want {
			t.Errorf("SlotID(%q, %v) = %q, want %q", c.id, c.slot, got, c.want)
		}
		id, slot, err := ParseSlotID(got)
		if err != nil || id != c.id || !slot.Equal(c.slot) {
			t.Errorf("ParseSlotID(%q) = %q, %v, %v", got, id, slot, err)
		}
	}
	for _, bad := range []string{"", "nightly", "nightly@yesterday"} {
		if _, _, err := ParseSlotID(bad); err == nil {
			t.Errorf("ParseSlotID(%q) succeeded", bad)
		}
	}
}
