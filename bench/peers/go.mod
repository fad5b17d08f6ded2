module github.com/seriema-go/seriema/bench/peers

go 1.26.0

require (
	github.com/seriema-go/seriema v0.0.0
	golang.org/x/net v0.60.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// The library itself, from this repository.
replace github.com/seriema-go/seriema => ../..
