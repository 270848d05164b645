// Package contract is what the inbox and its stores agree on: the Store interface and
// its optional abilities (BatchStore, OffsetStore, AttemptCounter, AttemptLister,
// ConsumerNeighbours, AttemptChecker, StoredReader), the values they exchange (Record, Claim, Tx...), the
// errors a store returns for the inbox to classify (ErrContended, ErrNoTable...), the
// transaction a context carries, and the few helpers every store needs (StorableKey,
// the "inbox: " error chain).
//
// It sits below everything else: it imports only the standard library, the inbox
// package aliases its names (inbox.Store is contract.Store), and every store
// (postgresstore, mysqlstore, sqlitestore, redisstore) implements it without importing
// the inbox package. A store written outside this module implements the same contract
// through the inbox package's names.
package contract
