package dtutils

import (
	"errors"
	"testing"
	"time"
)

// TestConfigConventions: every Config of the package has its defaults and
// a VerifyConfig that refuses out-of-range fields with ErrBadConfig.
func TestConfigConventions(t *testing.T) {
	if d := DefaultTransmitterConfig(1024); d.SignalEvery != 256 || d.MaxGoroutines != 1024 || d.SignalBytes != 1<<20 {
		t.Errorf("DefaultTransmitterConfig: %+v", d)
	}
	if d := DefaultTransmitterConfig(1 << 24); d.SignalBytes != 1<<22 {
		t.Errorf("DefaultTransmitterConfig with k above 1 MiB: SignalBytes %d, want k", d.SignalBytes)
	}
	if d := DefaultProcessConfig(0); d.MaxUnsignaled != 16384 || d.VerifyConfig() != nil {
		t.Errorf("DefaultProcessConfig: %+v", d)
	}
	if d := DefaultSHMConfig(); d.ConnectTimeout <= 0 || d.Logger == nil {
		t.Errorf("DefaultSHMConfig: %+v", d)
	}
	for name, err := range map[string]error{
		"tcp listen":        TCPConfig{Listen: "no port"}.VerifyConfig(),
		"tcp timeout":       TCPConfig{ConnectTimeout: -1}.VerifyConfig(),
		"shm timeout":       SHMConfig{ConnectTimeout: -1}.VerifyConfig(),
		"signal every":      TransmitterConfig{SignalEvery: 10}.VerifyConfig(4),
		"goroutines":        TransmitterConfig{MaxGoroutines: 1 << 20}.VerifyConfig(4),
		"signal bytes":      TransmitterConfig{SignalEvery: 4, SignalBytes: 3}.VerifyConfig(4),
		"receive slots":     ProcessConfig{ReceiveSlots: 3, MaxUnsignaled: 1, MaxTransfer: 1}.VerifyConfig(),
		"call slots":        ProcessConfig{CallSlots: 3, ReceiveSlots: 4, MaxUnsignaled: 1, MaxTransfer: 1}.VerifyConfig(),
		"call bytes":        ProcessConfig{CallBytes: maxCallBytes + 1, ReceiveSlots: 4, MaxUnsignaled: 1, MaxTransfer: 1}.VerifyConfig(),
		"unsignaled":        ProcessConfig{ReceiveSlots: 4, MaxTransfer: 1}.VerifyConfig(),
		"transfer":          ProcessConfig{ReceiveSlots: 4, MaxUnsignaled: 1, MaxTransfer: 1<<31 + 1}.VerifyConfig(),
		"ofi message bytes": OFIConfig{MessageSize: 1}.withDefaults().VerifyConfig(),
		"ofi receives":      OFIConfig{ReceiveBuffers: 1}.withDefaults().VerifyConfig(),
		"ofi sends":         OFIConfig{SendBuffers: 1 << 17}.withDefaults().VerifyConfig(),
		"ofi peer timeout":  OFIConfig{PeerTimeout: time.Millisecond}.withDefaults().VerifyConfig(),
	} {
		if !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, err := range map[string]error{
		"tcp":         DefaultTCPConfig().VerifyConfig(),
		"shm":         DefaultSHMConfig().VerifyConfig(),
		"transmitter": DefaultTransmitterConfig(16).VerifyConfig(16),
		"process":     DefaultProcessConfig(0).VerifyConfig(),
		"ofi":         DefaultOFIConfig().VerifyConfig(),
	} {
		if err != nil {
			t.Errorf("default %s config refused: %v", name, err)
		}
	}
}
