//go:build ofi

package rdmo

import "github.com/seriema-go/seriema/dtutils"

func init() {
	testTransports = append(testTransports, struct {
		name string
		make func(f *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error)
	}{"ofi", func(_ *dtutils.LoopFabric, proc *dtutils.Process) (dtutils.Provider, error) {
		cfg := dtutils.DefaultOFIConfig()
		cfg.Logger = quietLog
		if cfg.Provider == "tcp" {
			cfg.Node = "127.0.0.1"
		}
		return dtutils.NewOFI(proc, cfg)
	}})
}
