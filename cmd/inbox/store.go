package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watermill-inbox/inbox"
)

// connectTimeout bounds connecting to the database and checking its tables.
const connectTimeout = 15 * time.Second

// isMySQLDSN reports whether dsn is in the go-sql-driver/mysql form
// [user[:password]@][net[(addr)]]/db over tcp or a unix socket, as the driver itself
// parses it: the password may hold '@' or '/', since the driver splits at the last '@'.
func isMySQLDSN(dsn string) bool {
	cfg, err := mysql.ParseDSN(dsn)
	return err == nil && (cfg.Net == "tcp" || cfg.Net == "unix") && strings.Contains(dsn, cfg.Net)
}

// openStoreIn opens the database a DSN names and returns its inbox store, checked to have
// its tables, and a function that closes the connections. The tables may be in a
// PostgreSQL schema, or, for Redis, under a key prefix (schema; "" for the default). A
// missing table's error names --table and the tables that look like inbox tables
// (tableHint).
func openStoreIn(ctx context.Context, dsn, table, schema string) (inbox.Store, func(), error) {
	store, closeDB, err := connectStore(ctx, dsn, table, schema)
	if err != nil {
		return nil, nil, err
	}
	verifyCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := store.Verify(verifyCtx); err != nil {
		closeDB()
		return nil, nil, tableHint(ctx, dsn, schema, table, "_attempts", err)
	}
	return store, closeDB, nil
}

// connectStore connects to the database a DSN names and returns its inbox store, its
// tables not checked, and a function that closes the connections.
func connectStore(ctx context.Context, dsn, table, schema string) (inbox.Store, func(), error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return openPostgres(ctx, dsn, table, schema)
	case strings.HasPrefix(dsn, "redis://"), strings.HasPrefix(dsn, "rediss://"):
		prefix := table + ":"
		if schema != "" {
			prefix = schema
		}
		return openRedis(ctx, dsn, prefix)
	case schema != "":
		return nil, nil, errors.New("a schema is for a PostgreSQL DSN (or a key prefix for Redis): name a MySQL tenant's database in its DSN")
	case strings.HasPrefix(dsn, "mysql://"):
		return openMySQL(ctx, strings.TrimPrefix(dsn, "mysql://"), table)
	case isMySQLDSN(dsn):
		return openMySQL(ctx, dsn, table)
	}
	if _, ok := sqlitePath(dsn); ok {
		return openSQLite(ctx, dsn, table)
	}
	return nil, nil, errors.New("the DSN is neither a PostgreSQL URL (postgres://user@host:5432/db), a MySQL DSN (mysql://user@tcp(host:3306)/db), a Redis URL (redis://host:6379/0) nor a SQLite file (sqlite:app.db, or a path ending in .db)")
}

func openPostgres(ctx context.Context, dsn, table, schema string) (inbox.Store, func(), error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the PostgreSQL DSN %s: %w", redact(dsn), err)
	}
	cfg.MaxConns = 2
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	store, err := inbox.NewPostgresStore(pool, inbox.PostgresConfig{Table: table, Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return store, pool.Close, nil
}

// redact hides a URL's password, for error messages.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
