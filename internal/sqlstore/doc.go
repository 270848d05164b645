// Package sqlstore is what the SQL stores share, so that each dialect holds only what
// differs: the database/sql transaction of a claimed key and the attempt around it (Tx,
// ClaimInNewTx, ClaimJoined, ReadStored, Attempts), the handles an attempt is counted
// through beside a joined transaction (AttemptDB, AsideDB), the schema helpers (table
// names, statements of a DDL file) and the consumer-name neighbours. It imports
// internal/contract and the standard library, never a driver nor the inbox package.
package sqlstore
