//go:build ofi

package rdmo

import "github.com/seriema-go/seriema/dtutils"

func init() {
	testTransports = append(testTransports, testTransport{name: "ofi", make: func(_ *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error) {
		cfg := dtutils.DefaultOFIConfig()
		cfg.Logger = quietLog
		if cfg.Provider == "tcp" {
			cfg.Node = "127.0.0.1"
		}
		return dtutils.NewOFI(proc, cfg)
	}})
}
