package postgresstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox/internal/contract"
)

// foldedClaim claims a key in one round trip: BEGIN and the key's INSERT in one
// simple-protocol query (see PostgresStore), after the attempt's start when there is one.
type foldedClaim struct {
	s *Store
	// begin is the BEGIN of s.cfg.TxOptions; table and attempts the quoted table names,
	// with their schema.
	begin, table, attempts string
}

// pinPgx returns the func that takes a connection of db and gives it back: nil when db
// is neither a *pgxpool.Pool, a *pgx.Conn nor a *pgxpool.Conn.
func pinPgx(db PgxDB) func(ctx context.Context) (*pgx.Conn, func(), error) {
	switch db := db.(type) {
	case *pgxpool.Pool:
		return func(ctx context.Context) (*pgx.Conn, func(), error) {
			c, err := db.Acquire(ctx)
			if err != nil {
				return nil, nil, err
			}
			return c.Conn(), c.Release, nil
		}
	case *pgx.Conn:
		return func(context.Context) (*pgx.Conn, func(), error) { return db, func() {}, nil }
	case *pgxpool.Conn:
		return func(context.Context) (*pgx.Conn, func(), error) { return db.Conn(), func() {}, nil }
	}
	return nil
}

// newFoldedClaim returns a foldedClaim for s, whose pin is set.
func newFoldedClaim(s *Store) *foldedClaim {
	f := &foldedClaim{s: s, table: s.sql.table, attempts: pgName(s.cfg.Schema, s.cfg.Table+"_attempts")}
	o := s.cfg.TxOptions
	f.begin = "begin isolation level " + string(o.IsoLevel) // as pgx's own BeginTx writes it
	if o.AccessMode != "" {
		f.begin += " " + string(o.AccessMode)
	}
	if o.DeferrableMode != "" {
		f.begin += " " + string(o.DeferrableMode)
	}
	return f
}

// pgUniqueViolation is PostgreSQL's unique_violation: the key is there already.
const pgUniqueViolation = "23505"

func (f *foldedClaim) claim(ctx context.Context, rec contract.Record) (contract.Claim, error) {
	conn, release, err := f.s.pin(ctx)
	if err != nil {
		return contract.Claim{}, f.s.wrap("acquiring a connection", err)
	}
	query, ok := f.beginInsert(conn.PgConn(), rec)
	if !ok { // not provably safe to quote: the parameterized claim, on this connection
		return f.s.claimOn(ctx, conn, release, rec)
	}

	opts := f.s.cfg.TxOptions
	opts.BeginQuery = query
	tx, err := conn.BeginTx(ctx, opts)
	if err == nil {
		claim := contract.Claim{Tx: &pgxInboxTx{tx: tx, store: f.s, rec: rec, release: release}}
		if rec.Attempt != "" {
			if claim.Unfinished, err = f.s.unfinishedPgx(ctx, tx, rec); err != nil {
				err = contract.Join(f.s.wrap("counting the attempts", err), f.s.releasePgx(ctx, conn, rec, true))
				release()
				return contract.Claim{}, err
			}
		}
		return claim, nil
	}
	defer release()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation && pgErr.TableName == f.s.cfg.Table &&
		(f.s.cfg.Schema == "" || pgErr.SchemaName == f.s.cfg.Schema) {
		return f.duplicate(ctx, conn, rec)
	}
	// The transaction may have begun (a lock timeout, a missing table): end it, so that
	// the connection goes back to the pool idle rather than being destroyed. Outside a
	// transaction ROLLBACK only warns. The attempt, if it started, ends: a clean failure.
	if !conn.IsClosed() {
		if rec.Attempt != "" {
			_ = f.s.releasePgx(ctx, conn, rec, true)
		} else {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}
	return contract.Claim{}, f.s.wrap("inserting the key", err)
}

// duplicate rolls back the transaction the duplicate key aborted, ends the attempt if
// there is one, and reads what the first delivery stored, in one round trip; at READ
// COMMITTED, outside the transaction, the read sees the committed row that made the
// insert fail.
func (f *foldedClaim) duplicate(ctx context.Context, conn *pgx.Conn, rec contract.Record) (contract.Claim, error) {
	q := "ROLLBACK; "
	if rec.Attempt != "" {
		tok := quoteLiteral(rec.Attempt)
		q += "DELETE FROM " + f.attempts + " WHERE consumer = " + quoteLiteral(rec.Consumer) + " AND key = " + quoteLiteral(rec.Key) +
			" AND attempt = " + tok + "; SELECT pg_advisory_unlock(hashtextextended(" + tok + ", 0)); "
	}
	// encode(..., 'hex') whatever the session's bytea_output.
	q += "SELECT encode(fingerprint, 'hex'), encode(output, 'hex') FROM " + f.table +
		" WHERE consumer = " + quoteLiteral(rec.Consumer) + " AND key = " + quoteLiteral(rec.Key)
	results, err := conn.PgConn().Exec(context.WithoutCancel(ctx), q).ReadAll()
	if err != nil {
		return contract.Claim{}, f.s.wrap("reading the stored key", err)
	}
	last := len(results) - 1
	if last < 1 || len(results[last].Rows) == 0 { // deleted (Forget, purge) since the insert
		return contract.Claim{}, fmt.Errorf("inbox: the key vanished while being claimed: %w", contract.ErrContended)
	}
	row := results[last].Rows[0]
	claim := contract.Claim{Duplicate: true}
	if claim.Fingerprint, err = decodeHex(row[0]); err == nil {
		claim.Output, err = decodeHex(row[1])
	}
	if err != nil {
		return contract.Claim{}, f.s.wrap("reading the stored key", err)
	}
	return claim, nil
}

// decodeHex decodes a hex text column; NULL stays nil.
func decodeHex(text []byte) ([]byte, error) {
	if text == nil {
		return nil, nil
	}
	out := make([]byte, hex.DecodedLen(len(text)))
	_, err := hex.Decode(out, text)
	return out, err
}

// beginInsert returns the simple query that begins the transaction and inserts rec's
// key, with the lock timeout around the insert when one is set, after the start of
// rec's attempt when it has one. It reports false when
// the values cannot be quoted provably safely on conn: quoteLiteral is complete only
// with standard_conforming_strings on (a backslash is then an ordinary character) and a
// UTF8 client encoding (no multibyte character can hide a quote), for valid UTF-8 text
// without NUL.
func (f *foldedClaim) beginInsert(conn *pgconn.PgConn, rec contract.Record) (string, bool) {
	if conn.ParameterStatus("standard_conforming_strings") != "on" || conn.ParameterStatus("client_encoding") != "UTF8" ||
		!literalSafe(rec.Consumer) || !literalSafe(rec.Key) {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(f.begin) + len(f.s.sql.searchPath) + len(f.table) + 2*(len(rec.Consumer)+len(rec.Key)) + 2*len(rec.Fingerprint) + 400)
	if rec.Attempt != "" {
		if !literalSafe(rec.Attempt) {
			return "", false
		}
		b.WriteString(f.s.sql.attempts.literal(f.attempts, rec))
	}
	b.WriteString(f.begin)
	if f.s.sql.searchPath != "" {
		b.WriteString("; ")
		b.WriteString(f.s.sql.searchPath)
	}
	if f.s.cfg.LockTimeout > 0 {
		fmt.Fprintf(&b, "; SELECT set_config('%s', current_setting('lock_timeout'), true); SET LOCAL lock_timeout = %d",
			savedLockTimeout, lockTimeoutMillis(f.s.cfg.LockTimeout))
	}
	b.WriteString("; INSERT INTO ")
	b.WriteString(f.table)
	b.WriteString(" (consumer, key, fingerprint) VALUES (")
	b.WriteString(quoteLiteral(rec.Consumer))
	b.WriteString(", ")
	b.WriteString(quoteLiteral(rec.Key))
	if rec.Fingerprint == nil {
		b.WriteString(", NULL)")
	} else {
		b.WriteString(", '\\x")
		b.WriteString(hex.EncodeToString(rec.Fingerprint))
		b.WriteString("'::bytea)")
	}
	if f.s.cfg.LockTimeout > 0 {
		b.WriteString("; ")
		b.WriteString(restoreLockTimeout)
	}
	return b.String(), true
}

// literalSafe reports whether s can go into a string literal: valid UTF-8 without NUL
// (storableKey makes every key so; the check stays here, next to the quoting).
func literalSafe(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// quoteLiteral returns s as a PostgreSQL string literal, for a server with
// standard_conforming_strings on and UTF8 client encoding (see beginInsert).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
