package dtutils

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProbeSHM (docs/design.md §5: shm only where it is provably
// reachable): ProbeSHM accepts the probe of a provider it reaches, and
// refuses, each with its own error, a probe that does not parse, one whose
// socket cannot be dialed (another host or mount namespace), one naming
// a region the provider does not hand out, and one whose region does not
// hold the nonce (another process answering on that path). SHMProbe is
// only for shm providers.
func TestProbeSHM(t *testing.T) {
	p := newProcess(t, 0, nil)
	prov, err := NewSHM(p, SHMConfig{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	probe, err := SHMProbe(prov)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := SHMProbe(prov); err != nil || !bytes.Equal(again, probe) {
		t.Fatalf("a second SHMProbe: %v, %x; want the first probe %x", err, again, probe)
	}
	if err := ProbeSHM(probe, 5*time.Second); err != nil {
		t.Fatalf("the provider's own probe: %v", err)
	}
	if _, err := SHMProbe(NewLoopFabric().NewProvider(newProcess(t, 1, nil))); !errors.Is(err, ErrBadRequest) {
		t.Errorf("SHMProbe of a loop provider: %v, want ErrBadRequest", err)
	}
	ep, err := parseEndpoint(probe, transportSHM)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		forge func(*endpoint)
		want  error
		says  string
	}{
		{"no socket", func(e *endpoint) { e.addr = filepath.Join(t.TempDir(), "none.sock") }, ErrConnectionLost, "shm socket"},
		{"wrong key", func(e *endpoint) { e.srqKey ^= 1 }, ErrRemoteAccess, "refused region"},
		{"wrong nonce", func(e *endpoint) { e.token ^= 1 }, ErrRemoteAccess, "nonce"},
	} {
		forged := ep
		c.forge(&forged)
		if err := ProbeSHM(forged.marshal(), 5*time.Second); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v (%s)", c.name, err, c.want, c.says)
		}
	}
	if err := ProbeSHM(probe[:len(probe)-1], time.Second); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("a probe cut short: %v, want ErrBadEndpoint", err)
	}
	if err := ProbeSHM(probe, 5*time.Second); err != nil {
		t.Fatalf("the provider's own probe after the forged ones: %v", err)
	}
}
