package runtime

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Unit tests of the Registry, ported from duroxide's tests/registry_tests.rs and the
// registry part of tests/versioning_tests.rs.

// tagged is an orchestration that returns tag, so a test can tell which function
// the registry resolved.
func tagged(tag string) Orchestration {
	return func(*Context, string) (string, error) { return tag, nil }
}

func noopActivity(*ActivityContext, string) (string, error) { return "", nil }

// mustRegister fails the test on a registration error.
func mustRegister(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("registration failed: %v", err)
	}
}

// wantRegistryError asserts a registration error wrapping ErrRegistry whose message
// mentions every part.
func wantRegistryError(t *testing.T, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, ErrRegistry) {
		t.Fatalf("error %v, want one wrapping ErrRegistry", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}

// resolvedTag returns the tag of the function registered for name at version.
func resolvedTag(t *testing.T, r *Registry, name, version string) string {
	t.Helper()
	fn, ok := r.orchestration(name, version)
	if !ok {
		t.Fatalf("%s %s is not registered", name, version)
	}
	out, _ := fn(nil, "")
	return out
}

// test_activity_registry_builder_detects_duplicates.
func TestRegistryDuplicateActivity(t *testing.T) {
	r := NewRegistry()
	first := func(*ActivityContext, string) (string, error) { return "first", nil }
	mustRegister(t, r.RegisterActivity("activity1", first))
	wantRegistryError(t, r.RegisterActivity("activity1", noopActivity), "activity1", "twice")
	// The first registration stands.
	if out, _ := r.activities["activity1"](nil, ""); out != "first" {
		t.Fatalf("duplicate registration replaced the activity (got %q)", out)
	}
	if got := r.Activities(); !slices.Equal(got, []string{"activity1"}) {
		t.Fatalf("Activities() = %v", got)
	}
}

// duplicate_default_version_returns_error and duplicate_specific_version_returns_error.
func TestRegistryDuplicateOrchestration(t *testing.T) {
	t.Run("DefaultVersionTwice", func(t *testing.T) {
		r := NewRegistry()
		mustRegister(t, r.RegisterOrchestration("OrderFlow", tagged("first")))
		wantRegistryError(t, r.RegisterOrchestration("OrderFlow", tagged("second")), "OrderFlow")
		if got := resolvedTag(t, r, "OrderFlow", DefaultVersion); got != "first" {
			t.Fatalf("duplicate registration replaced the orchestration (got %q)", got)
		}
		if got := r.Versions("OrderFlow"); !slices.Equal(got, []string{DefaultVersion}) {
			t.Fatalf("Versions = %v", got)
		}
	})
	t.Run("SpecificVersionTwice", func(t *testing.T) {
		r := NewRegistry()
		mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "1.2.0", tagged("first")))
		wantRegistryError(t, r.RegisterOrchestrationVersion("OrderFlow", "1.2.0", tagged("second")), "OrderFlow", "1.2.0")
		if got := resolvedTag(t, r, "OrderFlow", "1.2.0"); got != "first" {
			t.Fatalf("duplicate registration replaced the orchestration (got %q)", got)
		}
	})
	t.Run("ExplicitDefaultAfterDefault", func(t *testing.T) {
		r := NewRegistry()
		mustRegister(t, r.RegisterOrchestration("OrderFlow", tagged("first")))
		wantRegistryError(t, r.RegisterOrchestrationVersion("OrderFlow", "1.0.0", tagged("second")))
	})
}

// non_monotonic_registration_panics (duroq returns an error instead of panicking).
func TestRegistryVersionsMustIncrease(t *testing.T) {
	r := NewRegistry()
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "2.0.0", tagged("v2")))
	wantRegistryError(t, r.RegisterOrchestrationVersion("OrderFlow", "1.1.0", tagged("v1.1")), "OrderFlow", "1.1.0", "2.0.0")
	if got := r.Versions("OrderFlow"); !slices.Equal(got, []string{"2.0.0"}) {
		t.Fatalf("a rejected version was kept: %v", got)
	}
	if _, ok := r.orchestration("OrderFlow", "1.1.0"); ok {
		t.Fatal("a rejected version resolves")
	}
	// Increasing registrations after a rejected one still work.
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "2.0.1", tagged("v2.0.1")))
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "2.1.0", tagged("v2.1")))
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "10.0.0", tagged("v10"))) // numeric, not lexical, order
	if got := r.Versions("OrderFlow"); !slices.Equal(got, []string{"2.0.0", "2.0.1", "2.1.0", "10.0.0"}) {
		t.Fatalf("Versions = %v", got)
	}
	if v, ok := r.resolveVersion("OrderFlow", ""); !ok || v != "10.0.0" {
		t.Fatalf("latest = %q, %v; want 10.0.0", v, ok)
	}
}

// test_reserved_prefix_rejected and test_user_cannot_override_builtins.
func TestRegistryReservedPrefix(t *testing.T) {
	r := NewRegistry()
	for _, name := range []string{ReservedPrefix + "evil", SysKVGet} {
		wantRegistryError(t, r.RegisterActivity(name, noopActivity), "reserved prefix", ReservedPrefix)
		wantRegistryError(t, r.RegisterOrchestration(name, tagged("x")), "reserved prefix", ReservedPrefix)
		wantRegistryError(t, r.RegisterOrchestrationVersion(name, "2.0.0", tagged("x")), "reserved prefix", ReservedPrefix)
	}
	if len(r.Activities()) != 0 || len(r.Orchestrations()) != 0 {
		t.Fatalf("rejected names were registered: %v %v", r.Activities(), r.Orchestrations())
	}
	// The prefix only counts at the start of a name.
	mustRegister(t, r.RegisterActivity("my"+ReservedPrefix+"ok", noopActivity))
}

func TestRegistryEmptyNames(t *testing.T) {
	r := NewRegistry()
	wantRegistryError(t, r.RegisterActivity("", noopActivity), "empty name")
	wantRegistryError(t, r.RegisterOrchestration("", tagged("x")), "empty name")
	wantRegistryError(t, r.RegisterOrchestrationVersion("", "1.0.0", tagged("x")), "empty name")
	if len(r.Activities()) != 0 || len(r.Orchestrations()) != 0 {
		t.Fatalf("empty names were registered: %v %v", r.Activities(), r.Orchestrations())
	}
}

func TestRegistryBadSemver(t *testing.T) {
	check := func(t *testing.T, bad []string) {
		for _, v := range bad {
			r := NewRegistry()
			err := r.RegisterOrchestrationVersion("OrderFlow", v, tagged("x"))
			if !errors.Is(err, ErrRegistry) {
				t.Errorf("version %q: error %v, want ErrRegistry", v, err)
				continue
			}
			// A rejected first registration leaves nothing behind (an empty entry
			// would make resolution index an empty version list).
			if names := r.Orchestrations(); len(names) != 0 {
				t.Errorf("version %q: registry lists %v after the rejection", v, names)
			}
			if got, ok := r.resolveVersion("OrderFlow", ""); ok {
				t.Errorf("version %q: resolves to %q after the rejection", v, got)
			}
		}
	}
	t.Run("Malformed", func(t *testing.T) {
		check(t, []string{"", "1", "1.0", "v1.0.0", "a.b.c", "1.0.x", "1..0", "-1.0.0", "1.-1.0", "latest"})
	})
	// semver (and duroxide's semver::Version::parse) accept exactly three numeric
	// parts, optionally followed by a -pre-release or +build suffix; anything else
	// after the patch number is not a version.
	t.Run("TrailingGarbage", func(t *testing.T) {
		check(t, []string{"1.0.0.0", "1.2.3junk", "1.2.3 4"})
	})
	t.Run("PreReleaseAndBuildAccepted", func(t *testing.T) {
		r := NewRegistry()
		mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "1.0.0+build.7", tagged("b")))
		mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "2.0.0-rc.1", tagged("rc")))
		if got := r.Versions("OrderFlow"); len(got) != 2 {
			t.Fatalf("Versions = %v", got)
		}
	})
}

func TestRegistrySetVersionPolicy(t *testing.T) {
	r := NewRegistry()
	mustRegister(t, r.RegisterOrchestration("OrderFlow", tagged("v1")))
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "1.1.0", tagged("v1.1")))

	wantRegistryError(t, r.SetVersionPolicy("Missing", VersionPolicy{}), "Missing")
	wantRegistryError(t, r.SetVersionPolicy("Missing", VersionPolicy{Exact: "1.0.0"}), "Missing")
	if slices.Contains(r.Orchestrations(), "Missing") {
		t.Fatal("a policy for an unknown name registered it")
	}
	wantRegistryError(t, r.SetVersionPolicy("OrderFlow", VersionPolicy{Exact: "one"}), "OrderFlow")
	// The rejected policy did not replace the default (Latest).
	if v, ok := r.resolveVersion("OrderFlow", ""); !ok || v != "1.1.0" {
		t.Fatalf("after a rejected policy: %q, %v; want 1.1.0", v, ok)
	}

	// policy_exact_pins_resolve_handler: pin, then unpin back to Latest.
	mustRegister(t, r.SetVersionPolicy("OrderFlow", VersionPolicy{Exact: "1.0.0"}))
	if v, ok := r.resolveVersion("OrderFlow", ""); !ok || v != "1.0.0" {
		t.Fatalf("Exact 1.0.0: %q, %v", v, ok)
	}
	mustRegister(t, r.SetVersionPolicy("OrderFlow", VersionPolicy{}))
	if v, ok := r.resolveVersion("OrderFlow", ""); !ok || v != "1.1.0" {
		t.Fatalf("back to Latest: %q, %v; want 1.1.0", v, ok)
	}

	// test_resolve_handler_exact_policy_missing_version: an Exact policy may name a
	// version this registry lacks (another node may have it); it then does not resolve.
	mustRegister(t, r.SetVersionPolicy("OrderFlow", VersionPolicy{Exact: "2.0.0"}))
	if v, ok := r.resolveVersion("OrderFlow", ""); ok {
		t.Fatalf("Exact 2.0.0 without 2.0.0 registered resolved to %q", v)
	}
	// Policies are per name.
	mustRegister(t, r.RegisterOrchestrationVersion("Other", "3.0.0", tagged("o3")))
	if v, ok := r.resolveVersion("Other", ""); !ok || v != "3.0.0" {
		t.Fatalf("Other: %q, %v", v, ok)
	}
}

// register_default_is_1_0_0_and_list_versions, register_multiple_versions_latest_is_highest,
// test_orchestration_registry_list_names, test_activity_registry_list_names,
// test_orchestration_registry_list_versions.
func TestRegistryListing(t *testing.T) {
	r := NewRegistry()
	if len(r.Orchestrations()) != 0 || len(r.Activities()) != 0 || len(r.Versions("OrderFlow")) != 0 {
		t.Fatal("a new registry is not empty")
	}
	mustRegister(t, r.RegisterOrchestration("OrderFlow", tagged("v1")))
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "1.1.0", tagged("v1.1")))
	mustRegister(t, r.RegisterOrchestrationVersion("OrderFlow", "2.0.0", tagged("v2")))
	mustRegister(t, r.RegisterOrchestration("Billing", tagged("b")))
	for _, a := range []string{"ship", "charge", "audit"} {
		mustRegister(t, r.RegisterActivity(a, noopActivity))
	}
	if got := r.Orchestrations(); !slices.Equal(got, []string{"Billing", "OrderFlow"}) {
		t.Fatalf("Orchestrations() = %v", got)
	}
	if got := r.Activities(); !slices.Equal(got, []string{"audit", "charge", "ship"}) {
		t.Fatalf("Activities() = %v", got)
	}
	if got := r.Versions("OrderFlow"); !slices.Equal(got, []string{"1.0.0", "1.1.0", "2.0.0"}) {
		t.Fatalf("Versions(OrderFlow) = %v", got)
	}
	if got := r.Versions("Billing"); !slices.Equal(got, []string{DefaultVersion}) {
		t.Fatalf("Versions(Billing) = %v", got)
	}
	if got := r.Versions("non-existent"); len(got) != 0 {
		t.Fatalf("Versions(non-existent) = %v", got)
	}
	// The lists are copies.
	r.Versions("OrderFlow")[0] = "9.9.9"
	r.Orchestrations()[0] = "Mutated"
	r.Activities()[0] = "mutated"
	if r.Versions("OrderFlow")[0] != "1.0.0" || r.Orchestrations()[0] != "Billing" || r.Activities()[0] != "audit" {
		t.Fatal("mutating a returned list changed the registry")
	}
	// Each version keeps its own code.
	for v, want := range map[string]string{"1.0.0": "v1", "1.1.0": "v1.1", "2.0.0": "v2"} {
		if got := resolvedTag(t, r, "OrderFlow", v); got != want {
			t.Fatalf("OrderFlow %s runs %q, want %q", v, got, want)
		}
	}
}

// test_resolve_version_latest, test_resolve_version_exact, test_empty_registry_resolution,
// resolve_handler_exact_missing_returns_none.
func TestRegistryResolveVersion(t *testing.T) {
	r := NewRegistry()
	if v, ok := r.resolveVersion("nonexistent", ""); ok || v != "" {
		t.Fatalf("empty registry resolves %q, %v", v, ok)
	}
	if _, ok := r.orchestration("nonexistent", "1.0.0"); ok {
		t.Fatal("empty registry has code")
	}
	mustRegister(t, r.RegisterOrchestration("orch1", tagged("v1")))
	mustRegister(t, r.RegisterOrchestrationVersion("orch1", "2.0.0", tagged("v2")))

	cases := []struct {
		name, requested, exact string // exact: the policy ("" = Latest)
		want                   string
		ok                     bool
	}{
		{"Latest", "", "", "2.0.0", true},
		{"Exact", "", "1.0.0", "1.0.0", true},
		{"ExplicitBeatsLatest", "1.0.0", "", "1.0.0", true},
		{"ExplicitBeatsExact", "2.0.0", "1.0.0", "2.0.0", true},
		{"ExplicitMissing", "9.9.9", "", "9.9.9", false},
		{"ExplicitMalformed", "two", "", "", false},
		{"ExplicitNormalised", "2.0.0+meta", "", "2.0.0", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mustRegister(t, r.SetVersionPolicy("orch1", VersionPolicy{Exact: c.exact}))
			v, ok := r.resolveVersion("orch1", c.requested)
			if ok != c.ok || (c.want != "" && v != c.want) {
				t.Fatalf("resolveVersion(orch1, %q) with policy %q = %q, %v; want %q, %v", c.requested, c.exact, v, ok, c.want, c.ok)
			}
			if ok {
				if got, want := resolvedTag(t, r, "orch1", v), "v"+strings.TrimSuffix(strings.TrimSuffix(v, ".0"), ".0"); got != want {
					t.Fatalf("resolved %s runs %q, want %q", v, got, want)
				}
			}
		})
	}
	if _, ok := r.resolveVersion("missing", "1.0.0"); ok {
		t.Fatal("an unknown name resolves")
	}
	if _, ok := r.orchestration("orch1", "9.9.9"); ok {
		t.Fatal("orchestration(orch1, 9.9.9) found code")
	}
	if _, ok := r.orchestration("orch1", "garbage"); ok {
		t.Fatal("orchestration(orch1, garbage) found code")
	}
}
