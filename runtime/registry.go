package runtime

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/duroq/duroq/runtime/provider"
)

// ReservedPrefix starts the names of the runtime's built-in activities; user
// activities and orchestrations may not use it.
const ReservedPrefix = "__duroq:"

// SysKVGet is the built-in activity behind Context.KVFromInstance.
const SysKVGet = ReservedPrefix + "kv_get"

// DefaultVersion is the version of an orchestration registered without one.
const DefaultVersion = "1.0.0"

// ErrRegistry reports a bad registration (duplicate, reserved or empty name, bad or
// non-increasing version).
var ErrRegistry = errors.New("runtime: registry")

// ErrKVNotFound is the error of KVFromInstance for a key that is not set.
var ErrKVNotFound = errors.New("runtime: KV key not found")

// Activity is an activity's code. It runs on a worker, at least once per schedule
// (a crash before its completion is committed runs it again), so it should be
// idempotent. ctx is cancelled when the orchestration gives the activity up or ends,
// and when the runtime shuts down.
type Activity func(ctx *ActivityContext, input string) (string, error)

// VersionPolicy picks the version of an orchestration started without one: the
// latest registered (the zero value) or Exact.
type VersionPolicy struct {
	// Exact is the version to start ("MAJOR.MINOR.PATCH"); "" starts the latest
	// registered. An Exact version this runtime has not registered is treated as
	// unregistered code (offered again with backoff, then poison).
	Exact string
}

// Registry maps names to orchestration and activity code. Register everything before
// the runtime starts; a Registry is not safe for concurrent registration.
type Registry struct {
	activities     map[string]Activity
	orchestrations map[string]*orchestrationVersions
}

type orchestrationVersions struct {
	versions []provider.SemVer // increasing
	fns      map[provider.SemVer]Orchestration
	policy   VersionPolicy
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{activities: map[string]Activity{}, orchestrations: map[string]*orchestrationVersions{}}
}

func checkName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: %s with an empty name", ErrRegistry, kind)
	case strings.HasPrefix(name, ReservedPrefix):
		return fmt.Errorf("%w: %s %q uses the reserved prefix %q", ErrRegistry, kind, name, ReservedPrefix)
	}
	return nil
}

// RegisterActivity adds activity name.
func (r *Registry) RegisterActivity(name string, fn Activity) error {
	if err := checkName("activity", name); err != nil {
		return err
	}
	if _, dup := r.activities[name]; dup {
		return fmt.Errorf("%w: activity %q registered twice", ErrRegistry, name)
	}
	r.activities[name] = fn
	return nil
}

// ReplaceActivity registers fn as activity name, replacing the activity registered
// under that name if there is one: for tests that stub an activity (see
// runtime/runtimetest) on a Clone of the application's registry.
func (r *Registry) ReplaceActivity(name string, fn Activity) error {
	if err := checkName("activity", name); err != nil {
		return err
	}
	r.activities[name] = fn
	return nil
}

// Clone returns a copy of r that can be changed without changing r.
func (r *Registry) Clone() *Registry {
	c := NewRegistry()
	maps.Copy(c.activities, r.activities)
	for name, o := range r.orchestrations {
		c.orchestrations[name] = &orchestrationVersions{versions: slices.Clone(o.versions), fns: maps.Clone(o.fns), policy: o.policy}
	}
	return c
}

// RegisterOrchestration adds orchestration name at DefaultVersion.
func (r *Registry) RegisterOrchestration(name string, fn Orchestration) error {
	return r.RegisterOrchestrationVersion(name, DefaultVersion, fn)
}

// RegisterOrchestrationVersion adds a version of orchestration name; versions of a
// name must be registered in increasing order.
func (r *Registry) RegisterOrchestrationVersion(name, version string, fn Orchestration) error {
	if err := checkName("orchestration", name); err != nil {
		return err
	}
	v, err := provider.ParseSemVer(version)
	if err != nil {
		return fmt.Errorf("%w: orchestration %q: %v", ErrRegistry, name, err)
	}
	o := r.orchestrations[name]
	if o == nil {
		o = &orchestrationVersions{fns: map[provider.SemVer]Orchestration{}}
		r.orchestrations[name] = o
	}
	if n := len(o.versions); n > 0 && o.versions[n-1].Ordinal() >= v.Ordinal() {
		return fmt.Errorf("%w: orchestration %q version %s registered after %s (versions must increase)", ErrRegistry, name, v, o.versions[n-1])
	}
	o.versions = append(o.versions, v)
	o.fns[v] = fn
	return nil
}

// SetVersionPolicy sets how a start without a version picks one for name.
func (r *Registry) SetVersionPolicy(name string, p VersionPolicy) error {
	o := r.orchestrations[name]
	if o == nil {
		return fmt.Errorf("%w: policy for unregistered orchestration %q", ErrRegistry, name)
	}
	if p.Exact != "" {
		if _, err := provider.ParseSemVer(p.Exact); err != nil {
			return fmt.Errorf("%w: policy for %q: %v", ErrRegistry, name, err)
		}
	}
	o.policy = p
	return nil
}

// Orchestrations lists the registered orchestration names, sorted.
func (r *Registry) Orchestrations() []string {
	names := make([]string, 0, len(r.orchestrations))
	for n := range r.orchestrations {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Versions lists the registered versions of orchestration name, oldest first.
func (r *Registry) Versions(name string) []string {
	o := r.orchestrations[name]
	if o == nil {
		return nil
	}
	out := make([]string, len(o.versions))
	for i, v := range o.versions {
		out[i] = v.String()
	}
	return out
}

// Activities lists the registered activity names, sorted.
func (r *Registry) Activities() []string {
	names := make([]string, 0, len(r.activities))
	for n := range r.activities {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// resolveVersion picks the version to start: requested if given, else by policy. ok
// is false when no such version is registered here.
func (r *Registry) resolveVersion(name, requested string) (string, bool) {
	o := r.orchestrations[name]
	if o == nil {
		return "", false
	}
	if requested == "" {
		requested = o.policy.Exact
	}
	if requested == "" {
		return o.versions[len(o.versions)-1].String(), true
	}
	v, err := provider.ParseSemVer(requested)
	if err != nil {
		return "", false
	}
	_, ok := o.fns[v]
	return v.String(), ok
}

// orchestration returns the code of name at exactly version.
func (r *Registry) orchestration(name, version string) (Orchestration, bool) {
	o := r.orchestrations[name]
	if o == nil {
		return nil, false
	}
	v, err := provider.ParseSemVer(version)
	if err != nil {
		return nil, false
	}
	fn, ok := o.fns[v]
	return fn, ok
}
