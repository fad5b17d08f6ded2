//go:build ofi

package dsfabric

func init() { testTransports = append(testTransports, "ofi") }
