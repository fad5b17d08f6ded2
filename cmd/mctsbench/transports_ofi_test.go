//go:build ofi

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/seriema-go/seriema/dtutils"
	"github.com/seriema-go/seriema/internal/jobtest"
)

func init() {
	testTransports = append(testTransports, "ofi")
	hostCases = append(hostCases, struct {
		name, flag string
		privateTmp bool
		want       string
	}{"forced-ofi", "-transport ofi", true, "ofi"})
}

// TestOFIOneSidedAcrossTwoHosts: micro and the demo as jobs across two
// hosts over ofi's one-sided path (SERIEMA_OFI_ONESIDED=1 in every rank's
// environment, as a launcher would set it): fi_writemsg/fi_readmsg over
// libfabric's tcp provider between network namespaces.
func TestOFIOneSidedAcrossTwoHosts(t *testing.T) {
	t.Setenv("SERIEMA_OFI_ONESIDED", "1")
	if p := dtutils.DefaultOFIConfig().Provider; p != "tcp" {
		t.Skipf("FI_PROVIDER=%s does not cross network namespaces", p)
	}
	h := jobtest.TwoHosts(t)
	out := runHostJob(t, h, true, 7400, "micro -mode write,trad -sizes 64 -n 2000 -reps 1 -json -transport ofi")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 results, got %q", out)
	}
	for _, l := range lines {
		var r Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Transport != "ofi-tcp-rma" || r.CallsPerS <= 0 {
			t.Fatalf("bad result %q: %v", l, err)
		}
	}
	out = runHostJob(t, h, true, 7401, "demo -board 7 -moves 2 -visits 2000 -json -transport ofi")
	var sum DemoSummary
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("rank 0 printed no summary: %v\n%s", err, out)
	}
	if sum.Transport != "ofi" || len(sum.Moves) != 2 {
		t.Errorf("the game did not run over ofi to its two moves: %+v", sum)
	}
}

// TestShuffleOverOFI: mctsbench shuffle over libfabric (the provider of
// FI_PROVIDER): package shuffle's three designs repartition and join with
// their connections made by ofi providers, the data intact, and the lines
// name the provider as micro's do.
func TestShuffleOverOFI(t *testing.T) {
	want := resultTransport("ofi")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"repartition", []string{"repartition", "-impl", "wr,rd,sr", "-transport", "ofi"}},
		{"join", []string{"join", "-impl", "wr,rd,sr", "-threads", "2", "-config", "me", "-orders", "5000", "-transport", "ofi"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range shuffleLines(t, c.args, 3) {
				if !r.OK || r.Transport != want || r.Pattern != c.args[0] || r.Procs != 2 {
					t.Errorf("bad line %+v (want transport %s, ok)", r, want)
				}
			}
		})
	}
}
