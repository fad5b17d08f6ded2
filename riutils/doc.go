// Package riutils will hold one-sided remote invocation (DESIGN.md §6, the
// paper's §4.4): Messenger (sealed records written straight into chunks in
// the receiver's memory), Messengers (created on first use per destination),
// Aggregator in trad and ovfl modes, every Table-1 call primitive over
// one-sided writes, and RemoteObject.
//
// Not implemented yet: tracked by the RIutils issue. Nothing in this package
// is usable today.
package riutils
