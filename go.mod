module github.com/seriema-go/seriema

go 1.26.0

require (
	github.com/puzpuzpuz/xsync/v3 v3.5.1
	github.com/vmihailenco/msgpack/v5 v5.4.1
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	golang.org/x/sys v0.49.0
)
