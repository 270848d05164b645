package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"

	"github.com/go-sql-driver/mysql"

	"github.com/watermill-inbox/inbox"
)

// openMySQL opens a go-sql-driver/mysql DSN (user[:password]@tcp(host:port)/db).
func openMySQL(ctx context.Context, dsn, table string) (inbox.Store, func(), error) {
	// The driver logs some connection failures itself; they are returned too, and
	// reported in one line.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the MySQL DSN: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = connectTimeout
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the MySQL DSN: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("connecting to MySQL: %w", err)
	}
	// The DSN may name TiDB or a vtgate: the store adapts to what the server says it is.
	// The commands' transactions never span shards (a key and its attempts share one).
	engine, err := inbox.MySQLEngineOf(ctx, db)
	var store *inbox.MySQLStore
	if err == nil {
		store, err = inbox.NewMySQLStore(db, inbox.MySQLConfig{Table: table, Engine: engine, AllowBestEffortCommit: engine == inbox.MySQLVitess})
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return store, func() { _ = db.Close() }, nil
}

func mysqlSchema(table string) (string, error) {
	return inbox.MySQLSchema(table)
}
