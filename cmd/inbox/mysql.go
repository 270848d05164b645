package main

import (
	"context"
	"errors"

	"github.com/watermill-inbox/inbox"
)

// errNoMySQL is returned until the MySQL store is part of this build.
var errNoMySQL = errors.New("MySQL is not supported by this build of inbox yet: use a postgres:// DSN")

func openMySQL(context.Context, string, string) (inbox.Store, func(), error) {
	return nil, nil, errNoMySQL
}

func mysqlSchema(string) (string, error) {
	return "", errNoMySQL
}
