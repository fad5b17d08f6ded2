//go:build ofi

package riutils

func init() { testTransports = append(testTransports, "ofi") }
