//go:build ofi

package shuffle

import "github.com/seriema-go/seriema/dtutils"

// With -tags ofi the suite also runs over libfabric (the provider of
// FI_PROVIDER, else tcp;ofi_rxm): in-process pairs, and jobs of
// self-launched processes whose dsfabric and shuffle connections are ofi.
func init() {
	transports = append(transports, testTransport{"ofi", func(_ *dtutils.LoopFabric, p *dtutils.Process) (dtutils.Provider, error) {
		cfg := dtutils.DefaultOFIConfig()
		cfg.Logger = quietLog
		return dtutils.NewOFI(p, cfg)
	}})
	wiringCases = append(wiringCases, wiringCase{"ofi", 1, WR, false}, wiringCase{"ofi", 2, SR, false}, wiringCase{"ofi", 1, RD, true})
	jobTransports = append(jobTransports, "ofi")
}
