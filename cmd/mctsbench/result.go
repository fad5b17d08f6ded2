package main

import (
	"encoding/json"
	"fmt"
	"github.com/seriema-go/seriema/dtutils"
	"io"
	"strings"
	"text/tabwriter"
)

// Result is one line of micro output. JSON field names carry their units.
type Result struct {
	Mode      string  `json:"mode"`
	Size      int     `json:"size"`
	Transport string  `json:"transport"`
	CallsPerS float64 `json:"calls_per_s"`
	MBPerS    float64 `json:"mb_per_s"`
	N         int     `json:"n"`
	Reps      int     `json:"reps"`
}

func newResult(mode, transport string, size, n int, callsPerS []float64) Result {
	c := median(callsPerS)
	return Result{Mode: mode, Size: size, Transport: resultTransport(transport), CallsPerS: c, MBPerS: c * float64(size) / 1e6, N: n, Reps: len(callsPerS)}
}

// resultTransport names a transport in results: ofi with its libfabric
// provider ("ofi-tcp", "ofi-shm") and "-rma" with the one-sided path
// (SERIEMA_OFI_ONESIDED=1), so that runs over several providers stay
// apart; other names unchanged.
func resultTransport(t string) string {
	if t != "ofi" {
		return t
	}
	oc := dtutils.DefaultOFIConfig()
	p, _, _ := strings.Cut(oc.Provider, ";")
	if oc.OneSided {
		return "ofi-" + p + "-rma"
	}
	return "ofi-" + p
}

// printResults writes JSON lines, or a table shaped like the paper's Table 2.
func printResults(w io.Writer, rs []Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttransport\tsize (B)\tcalls/s\tpayload MB/s\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.1f\t\n", r.Mode, r.Transport, r.Size, r.CallsPerS, r.MBPerS)
	}
	return tw.Flush()
}
