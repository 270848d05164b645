package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/watermill-inbox/inbox/internal/contract"
	"github.com/watermill-inbox/inbox/internal/sqlstore"
	"github.com/watermill-inbox/inbox/schema"
)

// mysqlUTCDefault is the column default TiDB refuses.
const mysqlUTCDefault = " DEFAULT (UTC_TIMESTAMP(6))"

// mysqlSchemaFor returns the DDL of the store's tables for engine e: on Vitess, which
// has no offset mode, without the offsets table (a table outside the VSchema of a
// sharded keyspace could not be queried anyway).
func mysqlSchemaFor(e Engine, table string) (string, error) {
	ddl, err := Schema(table)
	switch {
	case err != nil:
		return "", err
	case e == TiDB:
		return tidbSchema(ddl), nil
	case e == Vitess:
		var kept []string
		for _, stmt := range sqlstore.Statements(ddl) {
			// No offset mode on Vitess, and no version table (ADR 134): the version
			// is recognised by the columns.
			if !strings.Contains(stmt, "`"+table+"_offsets`") && !strings.Contains(stmt, "`"+table+"_schema`") {
				kept = append(kept, stmt)
			}
		}
		return strings.Join(kept, ";\n") + ";\n", nil
	}
	return ddl, nil
}

// tidbSchema is schema/mysql.sql without the server-side UTC defaults.
func tidbSchema(ddl string) string {
	return strings.ReplaceAll(ddl, mysqlUTCDefault, "")
}

// createEngineSchema runs what CreateSchema needs beyond the DDL: on Vitess, the VSchema
// entries of both tables, unless the keyspace has them already. vtgate serves a change
// a moment after ALTER VSCHEMA returns, and its schema tracker may then serve an older
// version again (a rebuild begun before the change): it returns once two reads 100 ms
// apart both show the entries, and adds a lost one again.
func (s *Store) createEngineSchema(ctx context.Context, conn sqlstore.DB) error {
	if s.cfg.Engine != Vitess {
		return nil
	}
	tables := []string{s.cfg.Table, s.cfg.Table + "_attempts"}
	seen := false // the last read showed both
	for try := 0; ; try++ {
		known, err := vschemaTables(ctx, conn)
		if err != nil {
			return fmt.Errorf("inbox: reading the keyspace's VSchema: %w", err)
		}
		missing := 0
		for _, t := range tables {
			if known[t] {
				continue
			}
			missing++
			stmt := "ALTER VSCHEMA ON `" + t + "` ADD VINDEX `xxhash`(`key`) USING `xxhash`"
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("inbox: adding %q to the keyspace's VSchema (%s: run it as a user vtgate's --vschema-ddl-authorized-users allows, or apply schema/vitess-vschema.json with vtctldclient ApplyVSchema): %w", t, stmt, err)
			}
		}
		if missing == 0 && seen {
			return nil
		}
		seen = missing == 0
		if try == 20 {
			return fmt.Errorf("inbox: vtgate does not serve the VSchema entries of %q and %q after 20 ALTER VSCHEMA rounds", tables[0], tables[1])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// vschemaTables returns the tables of the connection's keyspace's VSchema.
func vschemaTables(ctx context.Context, db sqlstore.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, "SHOW VSCHEMA TABLES")
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return nil, err
		}
		known[name] = true
	}
	return known, errors.Join(rows.Err(), rows.Close())
}

// verifyEngine checks, before the tables are read, what New must refuse on the engine:
// a server of another engine than the config's (checkServerEngine); on Vitess, tables
// missing from the VSchema (vtgate reports them only in its error
// text), and a best-effort commit across shards.
func (s *Store) verifyEngine(ctx context.Context) error {
	if err := s.checkServerEngine(ctx); err != nil || s.cfg.Engine != Vitess {
		return err
	}
	known, err := vschemaTables(ctx, s.db)
	if err != nil {
		return s.wrap("reading the keyspace's VSchema", err)
	}
	for _, t := range []string{s.cfg.Table, s.cfg.Table + "_attempts"} {
		if !known[t] {
			return fmt.Errorf("inbox: checking the tables: %w: table %q is not in the VSchema of the DSN's keyspace: run (*MySQLStore).CreateSchema, or create the tables of schema/mysql.sql and apply schema/vitess-vschema.json", contract.ErrNoTable, t)
		}
	}
	if s.cfg.AllowBestEffortCommit {
		return nil
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, "SELECT @@transaction_mode").Scan(&mode); err != nil {
		return s.wrap("reading vtgate's transaction_mode", err)
	}
	if strings.EqualFold(mode, "MULTI") {
		return errors.New("inbox: vtgate's transaction_mode is MULTI, where a commit across shards is best-effort and can commit the key without the handler's writes or the other way round: " +
			"put the handler's rows on the key's shard and use SINGLE (transaction_mode=%27SINGLE%27 in the DSN), or TWOPC (docs/distributed-sql.md: after crashes it can leave unresolved transactions), " +
			"or set MySQLConfig.AllowBestEffortCommit if your handlers write to the key's shard only")
	}
	return nil
}

// Schema returns the MySQL and MariaDB DDL (schema/mysql.sql) for an inbox table
// named table. It holds several statements: run them one by one, or with a connection
// that allows multiStatements.
func Schema(table string) (string, error) {
	if err := sqlstore.ValidateTable(table); err != nil {
		return "", fmt.Errorf("inbox: %w", err)
	}
	return sqlstore.WithTable(schema.MySQL, "`", table), nil
}

// Creating the tables is safe for any number of replicas starting together (ADR 133):
// CreateSchema runs on one connection that first takes a named lock (GET_LOCK)
// "inbox.schema.<database>.<table>" (on Vitess "inbox.schema.<keyspace>.", as ALTER
// VSCHEMA rewrites the keyspace's whole VSchema), or its hash when that is longer than the 64
// characters MySQL allows, and releases it when done. MySQL, MariaDB and TiDB serve
// GET_LOCK themselves; vtgate keeps it in a lock session of the client's session, so
// that the VSchema entries (ALTER VSCHEMA) are added by one creator at a time as well.
// A lock left by a creator whose connection died is released by the server.

// schemaLockWait bounds the wait for another creator's lock, in seconds.
const schemaLockWait = 120

// schemaLockName returns the lock name of CreateSchema on db's table.
func schemaLockName(db, table string) string {
	name := "inbox.schema." + db + "." + table
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(db + "." + table))
		name = "inbox.schema." + hex.EncodeToString(sum[:])[:40]
	}
	return name
}

// CreateSchema creates the store's tables if they do not exist, with the DDL of
// schema/mysql.sql, for users who do not run a migration tool, and upgrades tables of an
// older version with the steps they lack (schema.MySQLSteps), as `inbox migrate up`
// does. It runs the statements one
// by one, so the DSN needs no multiStatements. Any number of processes may call it at
// once (see the notes above schemaLockWait).
func (s *Store) CreateSchema(ctx context.Context) error {
	_, _, err := s.MigrateSchema(ctx)
	return err
}

// MigrateSchema is CreateSchema, and returns the tables' version before (0: there
// were none), read under the lock, and after: `inbox migrate up`. On Vitess, which
// records no version, both are 0.
func (s *Store) MigrateSchema(ctx context.Context) (before, after int, err error) {
	ddl, err := mysqlSchemaFor(s.cfg.Engine, s.cfg.Table)
	if err != nil {
		return 0, 0, err
	}
	if err := s.checkServerEngine(ctx); err != nil {
		return 0, 0, err
	}
	conn, release, err := s.lockSchema(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer release()
	if s.cfg.Engine == Vitess {
		if err := sqlstore.DropOldAttempts("`"+s.cfg.Table+"_attempts`", func(q string) error {
			_, err := conn.ExecContext(ctx, q)
			return err
		}); err != nil {
			return 0, 0, err
		}
	} else {
		v, err := s.readVersion(ctx, conn)
		if err != nil {
			return 0, 0, err
		}
		before, after = v.Have, max(v.Have, schema.MySQLSteps.Version())
		if v.Have > 0 { // the steps the tables lack, else the whole DDL
			ddl = ""
			seq := schema.MySQLSteps
			for n := v.Have + 1; n <= seq.Version(); n++ {
				ddl += sqlstore.WithTable(seq.Step(n).Up, "`", s.cfg.Table) + "\n"
			}
			if s.cfg.Engine == TiDB {
				ddl = tidbSchema(ddl)
			}
		}
	}
	for _, stmt := range sqlstore.Statements(ddl) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return 0, 0, fmt.Errorf("inbox: creating the schema: %w", err)
		}
	}
	return before, after, s.createEngineSchema(ctx, conn)
}

// readVersion reads the version of the tables (see sqlstore.Version) through db.
func (s *Store) readVersion(ctx context.Context, db sqlstore.DB) (sqlstore.Version, error) {
	t := s.cfg.Table
	rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN (?, ?, ?, ?)", t, t+"_attempts", t+"_offsets", t+"_schema")
	if err != nil {
		return sqlstore.Version{}, s.wrap("reading the tables' version", err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return sqlstore.Version{}, s.wrap("reading the tables' version", err)
		}
		have[name] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return sqlstore.Version{}, s.wrap("reading the tables' version", err)
	}
	if have[t+"_schema"] && have[t] { // a version row left beside dropped tables is not a version
		v := sqlstore.Version{Recorded: true}
		err := db.QueryRowContext(ctx, "SELECT `version`, `compatible` FROM `"+t+"_schema` ORDER BY `version` DESC LIMIT 1").Scan(&v.Have, &v.Compatible)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return sqlstore.Version{}, s.wrap("reading the tables' version", err)
		}
	}
	var old int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'started'", t+"_attempts").Scan(&old); err != nil {
		return sqlstore.Version{}, s.wrap("reading the tables' version", err)
	}
	return sqlstore.Recognised(schema.MySQLSteps, have[t], have[t+"_attempts"], old > 0, have[t+"_offsets"]), nil
}

// SchemaVersion returns the version of the store's tables (0 when they do not exist;
// for tables made before versions were recorded, the version their columns match) and
// the version this code needs. CreateSchema, or `inbox migrate up`, upgrades them. On
// Vitess, where no version is recorded (ADR 134), it fails with errors.ErrUnsupported.
func (s *Store) SchemaVersion(ctx context.Context) (have, want int, err error) {
	if s.cfg.Engine == Vitess {
		return 0, 0, fmt.Errorf("inbox: %w: no schema version on Vitess: CreateSchema and New check the tables by their columns", errors.ErrUnsupported)
	}
	v, err := s.readVersion(ctx, s.db)
	if err != nil {
		return 0, 0, err
	}
	return v.Have, schema.MySQLSteps.Version(), nil
}

// lockSchema takes the schema creation lock on a connection: one of the pool's, or the
// store's own *sql.Conn. release gives the lock back, and the pool's connection too.
func (s *Store) lockSchema(ctx context.Context) (conn sqlstore.DB, release func(), err error) {
	var done func() error
	switch db := s.db.(type) {
	case *sql.DB:
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, nil, s.wrap("acquiring a connection to create the schema", err)
		}
		conn, done = c, c.Close
	default:
		conn, done = db, func() error { return nil }
	}
	var database sql.NullString
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database)
	locked := s.cfg.Table
	if s.cfg.Engine == Vitess {
		locked = "" // ALTER VSCHEMA rewrites the keyspace's whole VSchema: one creator per keyspace
	}
	name := schemaLockName(database.String, locked)
	if err == nil { // Vitess serves lock functions in a SELECT of their own only
		err = s.getLock(ctx, conn, name, schemaLockWait, schemaLockWait*time.Second, &got)
	}
	switch {
	case err != nil:
		_ = done()
		return nil, nil, s.wrap("taking the schema creation lock (GET_LOCK)", err)
	case got.Int64 != 1:
		_ = done()
		return nil, nil, fmt.Errorf("inbox: creating the schema: another process held the lock %q for %d s (it is creating or migrating the tables): retry, or look for a stuck `inbox migrate`", name, schemaLockWait)
	}
	return conn, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var released sql.NullInt64
		if conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&released) != nil {
			if c, ok := conn.(*sql.Conn); ok && c != s.db {
				_ = c.Raw(func(any) error { return driver.ErrBadConn }) // closed, so its lock goes with it
			}
		}
		_ = done()
	}, nil
}

// Verify implements Store, for the inbox (not for you).
func (s *Store) Verify(ctx context.Context) error {
	if err := s.verifyEngine(ctx); err != nil {
		return err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.sql.verify).Scan(&n); err != nil {
		return s.wrap("checking the tables", err)
	}
	if s.cfg.Engine == Vitess {
		return nil
	}
	v, err := s.readVersion(ctx, s.db)
	if err != nil {
		return err
	}
	if err := sqlstore.CheckVersion(schema.MySQLSteps, v, s.cfg.Table, sqlstore.UpgradeCommand(s.cfg.Table, "")); err != nil {
		return fmt.Errorf("inbox: checking the tables: %w", err)
	}
	return nil
}
